// A rank of a test job (test/parallel.test.ts starts it as a child process with the torchrun environment): joins the
// process group, runs the collectives `argv[2]` names, prints what it got as one JSON line on stdout.
import { openDevice } from "../src/cuda/runtime/device.js";
import { rankEnvFrom } from "../src/parallel/env.js";
import { ProcessGroup } from "../src/parallel/group.js";

const mode = process.argv[2] ?? "collectives";
const env = rankEnvFrom()!;
const group = ProcessGroup.start(env);
if (mode === "collectives") {
  const r = env.rank;
  // values whose float32 sum depends on the order: every rank must still get the same bits
  const f32 = Float32Array.from([0.1 * (r + 1), 1e8 * (r % 2 === 0 ? 1 : -1), 1 / (r + 3), r]);
  group.allReduceHost(f32);
  const f64 = Float64Array.from([r, 0.1 * r]);
  group.allReduceHost(f64);
  const gathered = group.allGatherHost(Int32Array.from({ length: r + 1 }, (_, k) => 10 * r + k));
  const id = group.broadcastBytes(Uint8Array.from([r + 7, 42]));
  // gathers started without waiting, several at once and with a blocking collective between them, waited for out of
  // order: each gets its own result
  const p1 = group.startAllGatherHost(Int32Array.of(100 + r));
  const p2 = group.startAllGatherHost(Int32Array.from({ length: r }, (_, k) => 200 + 10 * r + k));
  const mid = Float64Array.of(r + 1);
  group.allReduceHost(mid);
  const p3 = group.startAllGatherHost(Int32Array.of(300 + r));
  const started = [p3.wait(), p1.wait(), p2.wait()];
  if (!(p1.ready() && p2.ready() && p3.ready())) throw new Error("a waited-for gather is not ready");
  group.barrier();
  group.close();
  process.stdout.write(
    `${JSON.stringify({
      rank: r,
      f32: Array.from(new Uint32Array(f32.buffer)),
      f64: Array.from(f64),
      gathered: gathered.map((g) => Array.from(g)),
      id: Array.from(id),
      started: started.map((g) => g.map((x) => Array.from(x))),
      mid: mid[0],
    })}\n`,
  );
} else if (mode === "hang") {
  // rank 1 dies in the middle; the others wait in a collective that never completes
  if (env.rank === 1) process.kill(process.pid, "SIGKILL");
  // a synchronous wait that runs no JavaScript, as a rank blocked in a CUDA call
  group.allReduceHost(new Float32Array(4));
  process.stdout.write("not reached\n");
} else if (mode === "device") {
  // NCCL on this rank's GPU (test/gpu/parallel.test.ts): sums of float32 device arrays, bucketed and timed
  const device = openDevice(env.localRank);
  const driver = device.driver;
  const n = 1 << 20;
  const host = new Float32Array(n);
  for (let i = 0; i < n; i++) host[i] = (env.rank + 1) * (i % 7);
  const ptr = driver.memAlloc(4 * n);
  driver.memcpyHtoD(ptr, host);
  group.startTiming();
  group.allReduceDevice(ptr, n / 2, 0n);
  group.allReduceDevice(ptr + 2 * n, n / 2, 0n);
  const ms = group.takeAllReduceMs();
  driver.memcpyDtoH(host, ptr);
  const factor = (env.worldSize * (env.worldSize + 1)) / 2;
  let wrong = 0;
  for (let i = 0; i < n; i++) if (host[i] !== factor * (i % 7)) wrong++;
  driver.memFree(ptr);
  group.close();
  process.stdout.write(`${JSON.stringify({ rank: env.rank, wrong, ms })}\n`);
}
