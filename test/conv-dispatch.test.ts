// The dispatch threads' protocol (src/conv/dispatch.ts) without a GPU: real worker threads run the
// protocol's loop with an issuer that records its calls (test/conv-dispatch-worker.ts), and the main thread posts
// jobs and waits as ConvThreads does. Checked: every part issued once, by the thread that owns it, in sample order per
// thread; the chain in order and each of its parts after the sample's lane part; a lane's part n after the chain's
// part n − L (the orders CUDA's event waits need from the host); a failure or a stall ending the wait with a message.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { MessageChannel, type MessagePort, receiveMessageOnPort, Worker } from "node:worker_threads";
import { awaitThreads, type ConvThreadRole, CTRL, controlBytes, postJob, stopThreads } from "../src/conv/dispatch.js";
import { MODULE_BOOTSTRAP, siblingModule } from "../src/util/worker-module.js";
import { JOBW, KIND } from "./conv-dispatch-worker.js";

const MAX_LANES = 32;
const MAX_DEPTH = 2;
const LOG_ENTRIES = 4096;

/** P sample threads, a chain thread and a side thread on the recording issuer. */
class Threads {
  readonly ctrl = new Int32Array(new SharedArrayBuffer(controlBytes(MAX_LANES, MAX_DEPTH)));
  readonly job = new Int32Array(new SharedArrayBuffer(4 * 8));
  readonly log = new Int32Array(new SharedArrayBuffer(4 * (1 + 3 * LOG_ENTRIES)));
  readonly workers: Worker[] = [];
  readonly ports: MessagePort[] = [];
  readonly roles: ConvThreadRole[];

  constructor(
    readonly P: number,
    timeoutMs: number,
  ) {
    this.roles = [
      ...Array.from({ length: P }, (_, t) => ({ kind: "samples" as const, t, P })),
      { kind: "chain" as const },
      { kind: "side" as const },
    ];
    const { entry, tsx } = siblingModule(import.meta.url, "conv-dispatch-worker");
    this.roles.forEach((role, id) => {
      const { port1, port2 } = new MessageChannel();
      const w = new Worker(MODULE_BOOTSTRAP, {
        eval: true,
        workerData: {
          entry,
          tsx,
          fatal: { port: port2, counter: this.ctrl.buffer, index: CTRL.ERROR },
          port: port2,
          ctrl: this.ctrl.buffer,
          job: this.job.buffer,
          log: this.log.buffer,
          role,
          id,
          timeoutMs,
        },
        transferList: [port2],
      });
      this.workers.push(w);
      this.ports.push(port1);
    });
    this.wait("start", 20_000);
  }

  /** Posts a job and waits for every thread; returns the calls (kind, sample, thread) in the order they happened. */
  run(
    o: {
      forward: boolean;
      samples: number;
      lanes: number;
      ordered?: boolean;
      depth?: number;
      failAt?: [number, number];
      stallMs?: number;
    },
    timeoutMs = 20_000,
  ): [number, number, number][] {
    const j = this.job;
    j[JOBW.FORWARD] = o.forward ? 1 : 0;
    j[JOBW.SAMPLES] = o.samples;
    j[JOBW.LANES] = o.lanes;
    j[JOBW.ORDERED] = (o.ordered ?? true) ? 1 : 0;
    j[JOBW.FAIL_KIND] = o.failAt?.[0] ?? 0;
    j[JOBW.FAIL_SAMPLE] = o.failAt?.[1] ?? -2;
    j[JOBW.STALL_MS] = o.stallMs ?? 0;
    j[JOBW.DEPTH] = o.depth ?? 1;
    Atomics.store(this.log, 0, 0);
    postJob(this.ctrl, o.lanes, o.depth ?? 1);
    this.wait(o.forward ? "forward" : "backward", timeoutMs);
    const n = Atomics.load(this.log, 0);
    return Array.from({ length: n }, (_, s) => [this.log[1 + 3 * s]!, this.log[2 + 3 * s]!, this.log[3 + 3 * s]!]);
  }

  wait(what: string, timeoutMs: number): void {
    awaitThreads(this.ctrl, this.workers.length, what, timeoutMs, () => {
      const messages: string[] = [];
      for (const p of this.ports) {
        for (let m = receiveMessageOnPort(p); m !== undefined; m = receiveMessageOnPort(p)) {
          messages.push((m.message as { message: string }).message);
        }
      }
      throw new Error(`dispatch failed: ${messages.join(" | ")}`);
    });
  }

  async stop(): Promise<void> {
    stopThreads(this.ctrl, this.workers.length, 5000);
    assert.equal(Atomics.load(this.ctrl, CTRL.STOPPED), this.workers.length, "every thread reports stopped");
    await Promise.all(this.workers.map((w) => w.terminate()));
  }
}

/** Checks a backward job's calls against the protocol (see the top of this file). */
function checkBackward(
  calls: [number, number, number][],
  P: number,
  L: number,
  N: number,
  ordered: boolean,
  depth = 1,
): void {
  const chainId = P;
  const sideId = P + 1;
  const at = (kind: number, n: number) => calls.findIndex(([k, s]) => k === kind && s === n);
  for (let n = 0; n < N; n++) {
    const lanes = calls.filter(([k, s]) => k === KIND.lane && s === n);
    assert.equal(lanes.length, 1, `sample ${n}'s lane part issued once`);
    assert.equal(lanes[0]![2], (n % L) % P, `sample ${n}'s lane part by thread (n mod L) mod P`);
    const chains = calls.filter(([k, s]) => k === KIND.chain && s === n);
    assert.equal(chains.length, 1, `sample ${n}'s chain part issued once`);
    assert.equal(chains[0]![2], chainId, "by the chain thread");
    if (ordered) {
      assert.ok(at(KIND.chain, n) > at(KIND.lane, n), `chain part ${n} after its lane part`);
      const d = depth * L;
      if (n >= d) assert.ok(at(KIND.lane, n) > at(KIND.chain, n - d), `lane part ${n} after chain part ${n - d}`);
    }
  }
  const chainOrder = calls.filter(([k]) => k === KIND.chain).map(([, s]) => s);
  assert.deepEqual(
    chainOrder,
    Array.from({ length: N }, (_, n) => n),
    "the chain in sample order",
  );
  for (let t = 0; t < P; t++) {
    const mine = calls.filter(([k, , id]) => k === KIND.lane && id === t).map(([, s]) => s);
    assert.deepEqual(
      mine,
      [...mine].sort((a, b) => a - b),
      `thread ${t} issues in sample order`,
    );
  }
  const bias = calls.filter(([k]) => k === KIND.bias);
  assert.equal(bias.length, 1, "the bias once");
  assert.equal(bias[0]![2], sideId, "by the side thread");
  assert.equal(calls.length, 2 * N + 1, "nothing else");
}

describe("dispatch threads' protocol (src/conv/dispatch.ts), on recording threads", () => {
  let four: Threads;
  before(() => {
    four = new Threads(4, 10_000);
  });
  after(async () => {
    await four.stop();
  });

  test("forward: each sample once, by thread (n mod L) mod P; nothing from the chain or the side", () => {
    for (const [L, N] of [
      [4, 100],
      [8, 37],
      [5, 33],
      [3, 20],
      [32, 64],
    ] as const) {
      const calls = four.run({ forward: true, samples: N, lanes: L });
      assert.equal(calls.length, N, `L ${L}, N ${N}: N calls`);
      for (let n = 0; n < N; n++) {
        const c = calls.filter(([k, s]) => k === KIND.forward && s === n);
        assert.equal(c.length, 1, `L ${L}: sample ${n} once`);
        assert.equal(c[0]![2], (n % L) % 4, `L ${L}: sample ${n}'s thread`);
      }
    }
  });

  test("backward: lane parts, the chain in order after them, lanes L behind the chain, the bias; jobs back to back", () => {
    for (const [L, N, ordered] of [
      [4, 100, true],
      [8, 37, true],
      [5, 33, true],
      [3, 20, true],
      [1, 12, true],
      [7, 50, false],
      [32, 64, true],
    ] as const) {
      for (let rep = 0; rep < 2; rep++) {
        checkBackward(four.run({ forward: false, samples: N, lanes: L, ordered }), 4, L, N, ordered);
        four.run({ forward: true, samples: N, lanes: L });
      }
    }
  });

  test("backward with depth 2 (product slots): a lane up to 2·L samples ahead of the chain, never more", () => {
    let ahead = 0;
    for (const [L, N] of [
      [4, 100],
      [5, 33],
      [1, 12],
      [32, 100],
    ] as const) {
      for (let rep = 0; rep < 2; rep++) {
        const calls = four.run({ forward: false, samples: N, lanes: L, depth: 2 });
        checkBackward(calls, 4, L, N, true, 2);
        // how far the lanes got ahead of the chain: depth 2 lets a lane issue sample n + L before chain part n
        const at = (kind: number, n: number) => calls.findIndex(([k, s]) => k === kind && s === n);
        for (let n = 0; n + L < N; n++) if (at(KIND.lane, n + L) < at(KIND.chain, n)) ahead++;
      }
    }
    assert.ok(ahead > 0, "some lane part n + L was issued before chain part n (the second slot was used)");
  });

  test("a part that throws ends the wait with its message, and the threads waiting on it give up instead of hanging", () => {
    assert.throws(
      () => four.run({ forward: false, samples: 40, lanes: 4, failAt: [KIND.lane, 5] }),
      /dispatch failed: .*test failure at 2\/5/,
    );
    // every thread finishes the job: the chain (waiting for sample 5's columns) and the lanes behind it see the error
    const deadline = performance.now() + 5000;
    while (Atomics.load(four.ctrl, CTRL.DONE) < four.workers.length && performance.now() < deadline) {}
    assert.equal(Atomics.load(four.ctrl, CTRL.DONE), four.workers.length, "all threads done within 5 s");
    assert.ok(Atomics.load(four.ctrl, CTRL.ERROR) >= 2, "the failed thread and at least the chain waiting on it");
  });

  test("a thread that stalls past the main thread's timeout: the wait throws, naming how many did not finish", async () => {
    const one = new Threads(1, 10_000);
    try {
      assert.throws(
        () => one.run({ forward: false, samples: 8, lanes: 2, stallMs: 400 }, 100),
        /3 of 3 did not finish the backward in 0.1 s|[12] of 3 did not finish the backward in 0.1 s/,
      );
      one.wait("backward", 10_000); // the stalled job completes
    } finally {
      await one.stop();
    }
  });
});
