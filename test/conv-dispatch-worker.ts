// A dispatch thread for test/conv-dispatch.test.ts: the protocol's loop (src/conv/dispatch.ts) with an
// issuer that records each part it is asked to issue, in the order the calls happen across threads, instead of
// queueing CUDA work. Job words (Int32Array): [forward, samples, lanes, ordered, fail sample, fail kind, stall ms,
// depth];
// the log: [count, then (kind, sample, thread) per call].

import { workerData } from "node:worker_threads";
import { type ConvThreadRole, reportStopped, runDispatchThread } from "../src/conv/dispatch.js";

export const KIND = { forward: 1, lane: 2, chain: 3, bias: 4 } as const;
export const JOBW = {
  FORWARD: 0,
  SAMPLES: 1,
  LANES: 2,
  ORDERED: 3,
  FAIL_SAMPLE: 4,
  FAIL_KIND: 5,
  STALL_MS: 6,
  DEPTH: 7,
} as const;

interface Data {
  readonly ctrl: SharedArrayBuffer;
  readonly job: SharedArrayBuffer;
  readonly log: SharedArrayBuffer;
  readonly role: ConvThreadRole;
  readonly id: number;
  readonly timeoutMs: number;
  readonly port: import("node:worker_threads").MessagePort;
}

if (workerData?.role !== undefined) {
  const d = workerData as Data;
  const ctrl = new Int32Array(d.ctrl);
  const job = new Int32Array(d.job);
  const log = new Int32Array(d.log);
  let seed = d.id * 7919 + 1;
  /** Busy-waits 0–30 µs (a pseudo-random share per call), so that the threads' calls interleave differently. */
  const jitter = () => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    const until = performance.now() + (seed % 31) / 1000;
    while (performance.now() < until) {}
  };
  const record = (kind: number, n: number) => {
    jitter();
    if (job[JOBW.FAIL_KIND] === kind && job[JOBW.FAIL_SAMPLE] === n) throw new Error(`test failure at ${kind}/${n}`);
    const stall = job[JOBW.STALL_MS]!;
    if (stall > 0 && kind === KIND.lane && n === 0) {
      const until = performance.now() + stall;
      while (performance.now() < until) {}
    }
    const slot = Atomics.add(log, 0, 1);
    log[1 + 3 * slot] = kind;
    log[2 + 3 * slot] = n;
    log[3 + 3 * slot] = d.id;
  };
  runDispatchThread({
    ctrl,
    role: d.role,
    timeoutMs: d.timeoutMs,
    report: (message) => d.port.postMessage({ kind: "error", message }),
    issuer: {
      begin: () => ({
        forward: job[JOBW.FORWARD] === 1,
        samples: job[JOBW.SAMPLES]!,
        lanes: job[JOBW.LANES]!,
        ordered: job[JOBW.ORDERED] === 1,
        depth: job[JOBW.DEPTH]!,
      }),
      forwardSample: (n) => record(KIND.forward, n),
      backwardLanePart: (n) => record(KIND.lane, n),
      backwardChainPart: (n) => record(KIND.chain, n),
      backwardBias: () => record(KIND.bias, -1),
    },
  });
  reportStopped(ctrl);
  d.port.close();
}
