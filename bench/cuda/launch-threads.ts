/**
 * Does issuing CUDA calls from several host threads raise the calls per second? (Issue 19: with direct launches a
 * Caffe-style convolution is bound by one host thread issuing ~9 µs cuBLAS calls; bench/cuda/launch-cost.ts.)
 * P worker threads (P in THREADS, default "1,2,4,8"), each with its own stream and cuBLAS handle on the process's
 * primary context, start together and issue CALLS calls each (a spin kernel keeps each stream busy so that no call
 * waits for the GPU); the rate is P·CALLS over the slowest thread's time, median of ROUNDS rounds.
 * bench/cuda/launch-threads.cu does the same from C (std::thread).
 *
 *   node --import tsx bench/cuda/launch-threads.ts [--json FILE]
 */
import { writeFileSync } from "node:fs";
import { isMainThread, parentPort, Worker, workerData } from "node:worker_threads";
import {
  CudaStream,
  compileCuda,
  getCublas,
  getDriver,
  KernelParams,
  karg,
  loadModule,
  openDevice,
  rowMajorGemm,
} from "../../src/cuda/index.js";

const CALLS = Number(process.env["CALLS"] ?? 300);
const ROUNDS = Number(process.env["ROUNDS"] ?? 9);
const SOURCE = `extern "C" __global__ void spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {}
}
extern "C" __global__ void empty() {}`;

interface Job {
  /** [0]: round started (generation), [1]: threads done. */
  sync: SharedArrayBuffer;
  kind: "sgemm" | "launch";
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}

/** A thread's side: its stream, handle and buffers; per round: spin, wait for the start, issue, report its µs. */
function workerMain(job: Job): void {
  const device = openDevice(0);
  const driver = getDriver();
  const stream = CudaStream.create({ nonBlocking: true });
  const module = loadModule(compileCuda({ name: "threads.cu", source: SOURCE, arch: device.props.arch }).cubin);
  const spin = module.getFunction("spin");
  const empty = module.getFunction("empty");
  const params = new KernelParams(2).pack([]);
  const cublas = getCublas();
  const handle = cublas.create();
  cublas.setStream(handle, stream.handle);
  const [A, B, C] = [32 * 75, 75 * 1024, 32 * 1024].map((n) => driver.memAlloc(4 * n)) as [number, number, number];
  const gemm = rowMajorGemm({ m: 32, n: 1024, k: 75, A, B, C, beta: 0 });
  const call =
    job.kind === "sgemm"
      ? () => cublas.sgemm(handle, gemm)
      : () => driver.launchKernel(empty.handle, [1], [32], 0, stream.handle, params);
  const sync = new Int32Array(job.sync);
  parentPort!.on("message", (generation: number) => {
    spin.launch({ grid: 1, block: 1, stream }, [karg.u64(40_000_000)]);
    call(); // warm
    Atomics.add(sync, 1, 1);
    Atomics.notify(sync, 1);
    Atomics.wait(sync, 0, generation - 1); // the start
    const t0 = performance.now();
    for (let i = 0; i < CALLS; i++) call();
    const us = (performance.now() - t0) * 1000;
    stream.synchronize();
    parentPort!.postMessage(us);
  });
  parentPort!.postMessage("ready");
}

const BOOT = `
const { workerData } = require("node:worker_threads");
(async () => {
  (await import(workerData.tsx)).register();
  await import(workerData.entry);
})().catch((e) => { console.error(e); process.exit(1); });
`;

async function main(): Promise<void> {
  const threads = (process.env["THREADS"] ?? "1,2,4,8").split(",").map(Number);
  const results: Record<string, Record<string, { callsPerMs: number; usPerCallPerThread: number }>> = {};
  for (const kind of ["sgemm", "launch"] as const) {
    results[kind] = {};
    for (const P of threads) {
      const sync = new SharedArrayBuffer(8);
      const s = new Int32Array(sync);
      const workers = Array.from(
        { length: P },
        () =>
          new Worker(BOOT, {
            eval: true,
            workerData: { entry: import.meta.url, tsx: import.meta.resolve("tsx/esm/api"), job: { sync, kind } },
          }),
      );
      const next = (w: Worker) =>
        new Promise<unknown>((resolve, reject) => {
          const fail = (e: Error) => reject(e);
          w.once("error", fail);
          w.once("message", (m) => {
            w.off("error", fail);
            resolve(m);
          });
        });
      await Promise.all(workers.map(next));
      const rates: number[] = [];
      const perThread: number[] = [];
      for (let r = 0; r <= ROUNDS; r++) {
        Atomics.store(s, 1, 0);
        const done = workers.map(next);
        for (const w of workers) w.postMessage(r + 1);
        while (Atomics.load(s, 1) < P) Atomics.wait(s, 1, Atomics.load(s, 1), 50);
        Atomics.store(s, 0, r + 1);
        Atomics.notify(s, 0);
        const us = (await Promise.all(done)) as number[];
        if (r === 0) continue;
        const slowest = Math.max(...us);
        rates.push((P * CALLS) / (slowest / 1000));
        perThread.push(median(us) / CALLS);
      }
      await Promise.all(workers.map((w) => w.terminate()));
      results[kind][String(P)] = { callsPerMs: median(rates), usPerCallPerThread: median(perThread) };
      console.log(
        `node ${kind} threads ${P}: ${median(rates).toFixed(1)} calls/ms in all, ` +
          `${median(perThread).toFixed(2)} µs per call per thread`,
      );
    }
  }
  const out = process.argv.indexOf("--json");
  if (out > 0) writeFileSync(process.argv[out + 1]!, `${JSON.stringify({ calls: CALLS, rounds: ROUNDS, results })}\n`);
}

if (isMainThread) await main();
else workerMain((workerData as { job: Job }).job);
