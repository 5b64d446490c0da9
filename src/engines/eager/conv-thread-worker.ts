// A convolution dispatch thread (the thread's side of conv-threads.ts): makes the device's primary context current,
// wraps the pool's streams, creates cuBLAS handles for the lanes it issues to, then waits for jobs in shared memory
// and issues its share of each with ConvRunner's parts on the parent runner's buffers.

import { workerData } from "node:worker_threads";
import { CudaKernel, CudaStream, getCublas, getDriver, openDevice } from "../../cuda/index.js";
import { gridFor } from "../gpu/parameters.js";
import { type ConvHost, type ConvLane, type ConvLanes, ConvRunner, isOneByOne } from "./conv.js";
import { type ConvThreadData, CTRL, JOB, readGeometry, readPointers } from "./conv-threads.js";
import { EAGER_BLOCK } from "./kernels.js";

const d = workerData as ConvThreadData;
const ctrl = new Int32Array(d.ctrl);
const job = new Float64Array(d.job);
const device = openDevice(d.device);
const driver = getDriver();
const cublas = getCublas();
const M = d.maxLanes;
const role = d.role;

/** Lanes this thread issues to (whatever a job's L): sample lanes k ≡ t mod P, or the side lane (M) or chain (M + 1). */
const owned = new Set<number>(
  role.kind === "samples"
    ? Array.from({ length: M }, (_, k) => k).filter((k) => k % role.P === role.t)
    : [role.kind === "chain" ? M + 1 : M],
);
const handles = new Map<number, bigint>();
for (const k of owned) {
  const h = cublas.create();
  cublas.setStream(h, d.streams[k]!);
  handles.set(k, h);
}
const laneObjects: ConvLane[] = d.streams.map((s, k) => ({
  index: k,
  stream: CudaStream.wrap(s, driver),
  blas: handles.get(k) ?? 0n,
}));
const chainStream = d.streams[M + 1]!;
/** The lanes of a job of L sample lanes. */
const lanesOf = (L: number): ConvLanes => ({
  count: L,
  lane: (n) => laneObjects[n % L]!,
  side: () => laneObjects[M]!,
  chain: () => laneObjects[M + 1]!,
  // the main thread forks and joins
  fork: () => {},
  join: () => {},
  columnsReady: (lane) => driver.eventRecord(d.columns[lane.index]!, lane.stream.handle),
  chainAwaitColumns: (lane) => driver.streamWaitEvent(chainStream, d.columns[lane.index]!),
  weightsDone: (lane) => driver.eventRecord(d.weights[lane.index]!, chainStream),
  awaitWeights: (lane) => driver.streamWaitEvent(lane.stream.handle, d.weights[lane.index]!),
});
const counts = { kernels: 0, cublas: 0 };
const host: ConvHost = {
  k: {
    vp_im2col: new CudaKernel(driver, "vp_im2col", d.kernels.im2col),
    vp_col2im_add: new CudaKernel(driver, "vp_col2im_add", d.kernels.col2im),
  },
  counts,
  launch(kernel, n, args, stream) {
    kernel.launch({ grid: gridFor(n), block: EAGER_BLOCK, stream }, args);
    counts.kernels++;
  },
};

/**
 * How long a thread spins on a control word before it sleeps (ms). The counters it waits on and the next job (a
 * layer's backward follows its forward, the next layer's forward follows within the same step) usually change within
 * this; a sleeping thread's wake-up costs tens of µs and varies by more, which showed as ±10% between pool sizes.
 */
const SPIN_MS = 1;

/** Spins until ctrl[i] satisfies `ok` or `ms` have passed (reading the clock every 256 polls); true if it did. */
function spin(i: number, ok: (v: number) => boolean, ms: number): boolean {
  const t0 = performance.now();
  for (let n = 1; ; n++) {
    if (ok(Atomics.load(ctrl, i))) return true;
    if ((n & 255) === 0 && (Atomics.load(ctrl, CTRL.ERROR) > 0 || performance.now() - t0 > ms)) return false;
  }
}

/** Waits until ctrl[i] satisfies `ok`, spinning first; gives up when another thread failed or after the timeout. */
function waitFor(i: number, ok: (v: number) => boolean, what: () => string): void {
  if (spin(i, ok, SPIN_MS)) return;
  const deadline = performance.now() + d.timeoutMs;
  for (;;) {
    const v = Atomics.load(ctrl, i);
    if (ok(v)) return;
    if (Atomics.load(ctrl, CTRL.ERROR) > 0) throw new Error("another dispatch thread failed");
    if (performance.now() > deadline) throw new Error(`waited ${d.timeoutMs / 1000} s for ${what()}`);
    Atomics.wait(ctrl, i, v, 2);
  }
}

function runJob(): void {
  const G = readGeometry(job);
  const p = readPointers(job);
  const L = job[JOB.LANES]!;
  const cols = Array.from({ length: L }, (_, k) => job[JOB.COLS + k]!);
  const colsB = Array.from({ length: L }, (_, k) => job[JOB.COLS + M + k]!);
  const runner = new ConvRunner(driver, cublas, lanesOf(L), { cols, colsB, ones: job[JOB.ONES]! });
  const forward = job[JOB.KIND] === 0;
  const direct = isOneByOne(G);
  if (role.kind === "samples") {
    for (let n = 0; n < G.n; n++) {
      if (!owned.has(n % L)) continue;
      if (forward) {
        runner.forwardSample(host, G, p, n);
        continue;
      }
      // the lane's column buffer is free once the chain has issued sample n − L's part (the wait it records for)
      if (!direct && n >= L)
        waitFor(
          CTRL.CHAIN,
          (v) => v > n - L,
          () => `the chain to reach sample ${n - L}`,
        );
      runner.backwardLanePart(host, G, p, n);
      Atomics.store(ctrl, CTRL.RING + (n % L), n + 1);
      Atomics.notify(ctrl, CTRL.RING + (n % L));
    }
  } else if (!forward && role.kind === "chain") {
    for (let n = 0; n < G.n; n++) {
      if (!direct)
        waitFor(
          CTRL.RING + (n % L),
          (v) => v === n + 1,
          () => `sample ${n}'s columns`,
        );
      runner.backwardChainPart(host, G, p, n);
      Atomics.store(ctrl, CTRL.CHAIN, n + 1);
      Atomics.notify(ctrl, CTRL.CHAIN);
    }
  } else if (!forward) {
    runner.backwardBias(host, G, p);
  }
}

Atomics.add(ctrl, CTRL.DONE, 1);
Atomics.notify(ctrl, CTRL.DONE);
let generation = 0;
for (;;) {
  // the next job usually comes within SPIN_MS (see there); else sleep until the main thread posts one
  if (!spin(CTRL.GEN, (v) => v !== generation, SPIN_MS)) Atomics.wait(ctrl, CTRL.GEN, generation);
  const g = Atomics.load(ctrl, CTRL.GEN);
  if (g < 0) break;
  if (g === generation) continue;
  generation = g;
  try {
    runJob();
  } catch (e) {
    d.port.postMessage({ kind: "error", message: e instanceof Error ? e.message : String(e) });
    Atomics.add(ctrl, CTRL.ERROR, 1);
  }
  Atomics.add(ctrl, CTRL.DONE, 1);
  Atomics.notify(ctrl, CTRL.DONE);
}
for (const h of handles.values()) cublas.destroy(h);
device.close();
Atomics.add(ctrl, CTRL.STOPPED, 1);
Atomics.notify(ctrl, CTRL.STOPPED);
d.port.close();
