// A convolution dispatch thread (the thread's side of conv-threads.ts): makes the device's primary context current,
// wraps the pool's streams, creates cuBLAS handles for the lanes it issues to, then runs the protocol's loop
// (conv-dispatch.ts) with ConvRunner's parts on the parent runner's buffers.

import { workerData } from "node:worker_threads";
import { CudaKernel, CudaStream, getCublas, getDriver, gridFor, openDevice } from "../../cuda/index.js";
import {
  type ConvHost,
  type ConvLane,
  type ConvLanes,
  ConvRunner,
  convDepth,
  isOneByOne,
  PRODUCT_SLOTS,
} from "./conv.js";
import { type DispatchIssuer, reportStopped, runDispatchThread } from "./conv-dispatch.js";
import { type ConvThreadData, JOB, readGeometry, readPointers } from "./conv-threads.js";
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
  // forwardAt, the only user of the origin, runs on the main thread
  origin: laneObjects[M + 1]!.stream,
  lane: (n) => laneObjects[n % L]!,
  side: () => laneObjects[M]!,
  chain: () => laneObjects[M + 1]!,
  // the main thread forks and joins
  fork: () => {},
  join: () => {},
  columnsReady: (lane, r) => driver.eventRecord(d.columns[r]![lane.index]!, lane.stream.handle),
  chainAwaitColumns: (lane, r) => driver.streamWaitEvent(chainStream, d.columns[r]![lane.index]!),
  weightsDone: (lane, r) => driver.eventRecord(d.weights[r]![lane.index]!, chainStream),
  awaitWeights: (lane, r) => driver.streamWaitEvent(lane.stream.handle, d.weights[r]![lane.index]!),
});
const counts = { kernels: 0, cublas: 0 };
const host: ConvHost = {
  k: {
    vp_im2col: new CudaKernel(driver, "vp_im2col", d.kernels.im2col),
    vp_col2im_add: new CudaKernel(driver, "vp_col2im_add", d.kernels.col2im),
    vp_conv_bias_add: new CudaKernel(driver, "vp_conv_bias_add", d.kernels.bias),
    vp_add_clear: new CudaKernel(driver, "vp_add_clear", d.kernels.addClear),
  },
  counts,
  launch(kernel, n, args, stream) {
    kernel.launch({ grid: gridFor(n), block: EAGER_BLOCK, stream }, args);
    counts.kernels++;
  },
};

let runner: ConvRunner | undefined;
let G: ReturnType<typeof readGeometry>;
let p: ReturnType<typeof readPointers>;
const issuer: DispatchIssuer = {
  begin() {
    G = readGeometry(job);
    p = readPointers(job);
    const L = job[JOB.LANES]!;
    const cols = Array.from({ length: L }, (_, k) => job[JOB.COLS + k]!);
    const colsB = Array.from({ length: L }, (_, k) => job[JOB.COLS + M + k]!);
    const products = job[JOB.SUMS] === 1;
    const slots = products ? Array.from({ length: PRODUCT_SLOTS * L }, (_, k) => job[JOB.COLS + 2 * M + k]!) : [];
    runner = new ConvRunner(driver, cublas, lanesOf(L), {
      weightSums: products ? "products" : "chain",
      shared: { cols, colsB, slots, ones: job[JOB.ONES]! },
    });
    // with product sums a 1×1 layer's lanes and chain share the slots, ordered as the columns are otherwise
    return {
      forward: job[JOB.KIND] === 0,
      samples: G.n,
      lanes: L,
      ordered: products || !isOneByOne(G),
      depth: convDepth(runner.weightSums),
    };
  },
  forwardSample: (n) => runner!.forwardSample(host, G, p, n),
  backwardLanePart: (n) => runner!.backwardLanePart(host, G, p, n),
  backwardChainPart: (n) => runner!.backwardChainPart(host, G, p, n),
  backwardBias: () => runner!.backwardBias(host, G, p),
};

runDispatchThread({
  ctrl,
  role,
  issuer,
  timeoutMs: d.timeoutMs,
  report: (message) => d.port.postMessage({ kind: "error", message }),
});
for (const h of handles.values()) cublas.destroy(h);
device.close();
reportStopped(ctrl);
d.port.close();
