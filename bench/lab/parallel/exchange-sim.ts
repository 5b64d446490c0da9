// Data-parallel VPPS without a GPU: what the per-batch exchange of touched rows costs two VPPS ranks whose hosts are busy, with
// the real BatchLauncher (runtime/launcher.ts) and the real TCP process group (src/parallel/group.ts), and fakes for
// what needs a GPU: the schedule workers (a batch is ready `schedule` ms after it was posted, on one of `workers`
// workers) and the runtime (a launch takes `launch` ms of the host; the GPU runs one batch per `gpu` ms, at most
// `slots` batches queued). The main thread is "busy" (asleep, so that two ranks fit on a small machine) for `build`
// ms per step, ±`jitter`, as when it builds a graph. Mode `sync` exchanges at each launch and waits (the launcher
// before the fix: the exchange is started inside submit); `async` starts it when the batch is taken from the workers
// and holds the batch until it is in (the fix). Prints one rank alone (WORLD_SIZE=1), then each mode's ranks' ms per
// step.
//
//   node --import tsx bench/lab/parallel/exchange-sim.ts [steps] [build] [schedule] [workers] [gpu]
import { spawn } from "node:child_process";
import type { DpExchange } from "../../../src/engines/vpps/runtime/dp-exchange.js";
import { BatchLauncher, type BatchTag, type LaunchVariant } from "../../../src/engines/vpps/runtime/launcher.js";
import type { VppsRuntime } from "../../../src/engines/vpps/runtime/submit.js";
import type { PooledBatch, SchedulePool } from "../../../src/engines/vpps/schedule/pool.js";
import type { ComputationGraph, Expression } from "../../../src/graph/graph.js";
import { rankEnvFrom } from "../../../src/parallel/env.js";
import { ProcessGroup } from "../../../src/parallel/group.js";

const [steps, build, schedule, workers, gpu] = [200, 2, 16, 6, 2.4].map((d, i) => Number(process.argv[2 + i] ?? d));
const launchMs = 0.2;
const slots = 8;
const jitter = 0.5;

const sleeper = new Int32Array(new SharedArrayBuffer(4));
const sleep = (ms: number) => {
  if (ms > 0) Atomics.wait(sleeper, 0, 0, ms);
};

function rank(): void {
  const env = rankEnvFrom()!;
  const mode = process.env.SIM_MODE!;
  const group = ProcessGroup.start(env);
  // a different random stream per rank (and per step): the hosts are not in step
  let seed = 12345 + 7919 * env.rank;
  const rand = () => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed / 0x7fffffff;
  };
  const vary = (ms: number) => ms * (1 - jitter / 2 + jitter * rand());
  const free = new Float64Array(workers); // when each worker is next free
  const queue: { id: number; readyAt: number; tag: BatchTag }[] = [];
  let next = 0;
  const pool = {
    size: workers,
    stats: { snapshotMs: 0, waitMs: 0, scheduleMs: 0 },
    get pending() {
      return queue.length;
    },
    post(_g: unknown, _l: unknown, _v: number, tag: BatchTag) {
      let k = 0;
      for (let i = 1; i < workers; i++) if (free[i]! < free[k]!) k = i;
      const readyAt = Math.max(performance.now(), free[k]!) + vary(schedule);
      free[k] = readyAt;
      queue.push({ id: next++, readyAt, tag });
    },
    take(block: boolean): PooledBatch<BatchTag> | undefined {
      const head = queue[0];
      if (head === undefined) return undefined;
      const wait = head.readyAt - performance.now();
      if (wait > 0 && !block) return undefined;
      const t0 = performance.now();
      sleep(wait);
      this.stats.waitMs += performance.now() - t0;
      queue.shift();
      const pairs = Int32Array.from({ length: 2 * 2500 }, (_, i) => i);
      return {
        id: head.id,
        variant: 0,
        tag: head.tag,
        batch: { id: head.id, pairs, liveNodes: 1 },
        inputs: null,
        scheduleMs: 0,
      } as unknown as PooledBatch<BatchTag>;
    },
    release() {},
  };
  let gpuFree = 0;
  const inFlight: number[] = []; // when each queued batch finishes on the GPU
  const pairsOf = (s: unknown) => (s as { pairs: Int32Array }).pairs;
  // the real exchange's shape (dp-exchange.ts) over the real gather; the union itself is not needed here
  const exchange = (s: unknown): DpExchange => {
    const gather = group.startAllGatherHost(pairsOf(s));
    return {
      ready: () => gather.ready(),
      union: () => {
        gather.wait();
        return new Int32Array(0);
      },
      keptByAll: () => false,
    };
  };
  const runtime = {
    pipeline: { batches: 0, slots },
    dataParallel: true,
    startExchange: (s: unknown): DpExchange | undefined => (mode === "async" ? exchange(s) : undefined),
    submit(_v: unknown, s: unknown, _i: unknown, _lr: number, _c: number, _t: boolean, _a: unknown, x?: DpExchange) {
      (x ?? exchange(s)).union();
      if (inFlight.length >= slots) sleep(inFlight.shift()! - performance.now());
      sleep(launchMs);
      gpuFree = Math.max(performance.now(), gpuFree) + gpu;
      inFlight.push(gpuFree);
      this.pipeline.batches++;
      return Number.NaN;
    },
  };
  const variant = { index: 0, plan: { ctas: 1 } } as unknown as LaunchVariant;
  const launcher = new BatchLauncher(
    runtime as unknown as VppsRuntime,
    pool as unknown as SchedulePool<BatchTag>,
    () => variant,
    { scheduleAhead: 2 * workers, timing: false, profiling: () => false },
    {},
  );
  const tag: BatchTag = { lr: 0.1, clip: 5, adam: undefined, quiet: false };
  const warm = 20;
  let t0 = 0;
  for (let step = 0; step < steps + warm; step++) {
    if (step === warm) t0 = performance.now();
    sleep(vary(build));
    launcher.run(variant, {} as ComputationGraph, {} as Expression, tag);
  }
  launcher.flush();
  sleep(gpuFree - performance.now());
  const ms = (performance.now() - t0) / steps;
  group.close();
  process.stdout.write(`${JSON.stringify({ rank: env.rank, ms })}\n`);
}

function run(mode: string, r: number, port: number, world = 2): Promise<{ rank: number; ms: number }> {
  return new Promise((resolve, reject) => {
    const env = { ...process.env, SIM_MODE: mode, RANK: String(r), WORLD_SIZE: String(world), LOCAL_RANK: String(r) };
    const child = spawn(process.execPath, ["--import", "tsx", process.argv[1]!, ...process.argv.slice(2)], {
      env: { ...env, MASTER_ADDR: "127.0.0.1", MASTER_PORT: String(port) },
      stdio: ["ignore", "pipe", "inherit"],
    });
    let out = "";
    child.stdout.on("data", (d) => {
      out += d;
    });
    child.on("close", (code) => (code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`rank ${r}: exit ${code}`))));
  });
}

if (process.env.SIM_MODE !== undefined) rank();
else {
  console.log(
    `two ranks, ${steps} steps: build ${build} ms/step ±${(100 * jitter) / 2}%, schedule ${schedule} ms on ${workers} ` +
      `workers, launch ${launchMs} ms, GPU ${gpu} ms/batch, ${slots} slots`,
  );
  let port = 29600 + (process.pid % 300);
  const one = await run("sync", 0, port++, 1);
  console.log(`one rank (WORLD_SIZE=1, its exchange answered at once): ${one.ms.toFixed(2)} ms/step`);
  for (const mode of ["sync", "async"]) {
    const rs = await Promise.all([0, 1].map((r) => run(mode, r, port)));
    port++;
    console.log(`${mode}: ${rs.map((x) => `rank ${x.rank} ${x.ms.toFixed(2)} ms/step`).join(", ")}`);
  }
}
