// The host side of the VPPS runtime, without a GPU: double buffering of batches (which slot, whose loss fb
// returns, when the host waits), the kernel's error words, and `createEngine("vpps")` where no GPU can be used.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { cudaAvailable } from "../src/cuda/index.js";
import { createEngine, EngineUnavailableError } from "../src/engines/index.js";
import { KERNEL_ERRORS } from "../src/engines/vpps/codegen/interpreter.js";
import { hostTraceFromEnv } from "../src/engines/vpps/instrument/host-trace.js";
import {
  checkOptions,
  checkStepSettings,
  DEFAULT_PROFILE_NODES,
  resolveOptions,
  type VppsOptions,
} from "../src/engines/vpps/options.js";
import {
  BatchPipeline,
  decodeKernelStatus,
  PIPELINE_SLOTS,
  type SlotDevice,
  VppsKernelError,
} from "../src/engines/vpps/runtime/pipeline.js";
import { ParameterCollection } from "../src/model/parameters.js";

/**
 * A fake device: slot s holds the loss of the batch last queued in it; `finished` says which slots the GPU has
 * completed (a wait completes the slot); records every wait.
 */
function fakeDevice(slots = 4) {
  const losses = new Array<number>(slots).fill(0);
  const status = Array.from({ length: slots }, () => new Int32Array(6));
  const finished = new Array<boolean>(slots).fill(false);
  const waits: number[] = [];
  const retired: number[] = [];
  const device: SlotDevice = {
    wait: (s) => {
      waits.push(s);
      finished[s] = true;
    },
    done: (s) => finished[s]!,
    loss: (s) => losses[s]!,
    status: (s) => status[s]!,
    retired: (_s, batch) => retired.push(batch),
  };
  /** Queues one batch with loss `loss` (not finished yet); returns what end() returned. */
  const queue = (p: BatchPipeline, loss: number): number => {
    const s = p.begin();
    losses[s] = loss;
    finished[s] = false;
    return p.end(s);
  };
  return { device, losses, status, finished, waits, retired, queue };
}

describe("VPPS batch pipeline (batches in flight)", () => {
  test("slots fill in turn; launching never waits while a slot is free; the host waits only for a reused slot", () => {
    const f = fakeDevice();
    const p = new BatchPipeline(f.device, () => "k", 4);
    const returned: number[] = [];
    for (let k = 0; k < 4; k++) returned.push(f.queue(p, 100 + k));
    assert.deepEqual(f.waits, [], "no batch waited for while slots were free");
    assert.ok(returned.every(Number.isNaN), "nothing finished yet: NaN");
    // the fifth batch reuses slot 0: it waits for batch 0 (and only it)
    returned.push(f.queue(p, 104));
    assert.deepEqual(f.waits, [0]);
    assert.deepEqual(f.retired, [0]);
    assert.equal(returned[4], 100);
    assert.equal(p.drain(), 104);
    assert.deepEqual(f.retired, [0, 1, 2, 3, 4], "every batch retired once, in order");
  });

  test("finished batches retire in order without waiting, and fb returns the newest finished batch's loss", () => {
    const f = fakeDevice();
    const p = new BatchPipeline(f.device, () => "k", 4);
    assert.ok(Number.isNaN(f.queue(p, 10)));
    assert.ok(Number.isNaN(f.queue(p, 11)));
    // the GPU finishes batch 1 but not batch 0: nothing may retire out of order
    f.finished[1] = true;
    assert.ok(Number.isNaN(f.queue(p, 12)));
    assert.deepEqual(f.retired, []);
    f.finished[0] = true;
    assert.equal(f.queue(p, 13), 11, "batches 0 and 1 retired, 1 is the newest");
    assert.deepEqual(f.retired, [0, 1]);
    assert.deepEqual(f.waits, [0, 1], "retiring a finished batch reads its results (no blocking wait needed)");
    assert.equal(p.drain(), 13);
    assert.ok(Number.isNaN(new BatchPipeline(f.device, () => "k").drain()));
  });

  test("two slots: each launch waits for the batch two before it, as double buffering does", () => {
    const f = fakeDevice(2);
    const p = new BatchPipeline(f.device, () => "k", 2);
    for (let k = 0; k < 5; k++) f.queue(p, 100 + k);
    assert.deepEqual(f.waits, [0, 1, 0]);
    assert.equal(p.drain(), 104);
    assert.throws(() => new BatchPipeline(f.device, () => "k", 1), /slots must be >= 2/);
  });

  test("a kernel error surfaces when its batch is retired, naming kernel, batch, processor and barrier", () => {
    const f = fakeDevice();
    const p = new BatchPipeline(f.device, () => "vpps_m_cta1_rpw1", 4);
    f.queue(p, 1);
    f.status[0]!.set([KERNEL_ERRORS.barrierTimeout, 17, 42, 3, 4, 900]);
    f.finished[0] = true;
    assert.throws(
      () => f.queue(p, 2),
      (e: unknown) =>
        e instanceof VppsKernelError &&
        e.processor === 17 &&
        e.barrier === 42 &&
        /kernel vpps_m_cta1_rpw1, batch 0: processor \(CTA\) 17 timed out waiting on barrier 42 at script word 900: expected 4 signals, saw 3/.test(
          e.message,
        ),
    );
    assert.equal(p.drain(), 2, "the failed batch is skipped; the next one, still queued, is waited for");
  });
});

describe("VPPS kernel status words", () => {
  test("zero is no error; every code decodes to a message naming the processor", () => {
    assert.equal(decodeKernelStatus([0, 0, 0, 0, 0, 0], "k", 0), undefined);
    const cases: [number, RegExp][] = [
      [KERNEL_ERRORS.badOpcode, /processor \(CTA\) 5 met unknown opcode 99 at script word 7/],
      [
        KERNEL_ERRORS.badLength,
        /processor \(CTA\) 5: the tile instruction at script word 7 is out of range: 99 entries/,
      ],
      [KERNEL_ERRORS.badMatrix, /names matrix 99, which this kernel does not hold/],
      [77, /unknown error code 77/],
    ];
    for (const [code, re] of cases) {
      const e = decodeKernelStatus([code, 5, 99, 0, 0, 7], "k", 3);
      assert.ok(e instanceof VppsKernelError);
      assert.match(e.message, re);
      assert.equal(e.processor, 5);
    }
    const past = decodeKernelStatus([KERNEL_ERRORS.badLength, 5, 0, 0, 0, 7], "k", 3);
    assert.match(past?.message ?? "", /processor \(CTA\) 5: the instruction at script word 7 runs past the script/);
  });
});

describe("the package's VPPS exports", () => {
  test("Vpps, VppsEngine and the pipelined-engine check are importable from the package root (docs/VPPS.md)", async () => {
    const api = await import("../src/index.js");
    assert.equal(typeof api.Vpps.create, "function");
    assert.equal(typeof api.VppsEngine, "function");
    assert.equal(api.isPipelined(new api.CpuEngine(new api.ParameterCollection())), false);
    assert.equal(new api.VppsKernelError("m", 1, 2, 3, []).processor, 2);
  });
});

describe("Vpps options", () => {
  test("good values pass; bad ones are refused before anything is opened, naming the option by its path", () => {
    const good: VppsOptions[] = [
      {},
      { variants: { transposed: true } },
      { variants: { transposed: false } },
      { variants: { transposed: "profile" } },
    ];
    good.push(
      { variants: { profileNodes: 0 } },
      { host: { pipelineSlots: 2 } },
      { host: { scheduleAhead: 1 } },
      { host: { scheduleWorkers: 0 } },
      { instrument: { timing: 16 } },
      { instrument: { timing: true } },
      { training: { optimizer: "adam", beta1: 0, beta2: 0.5, epsilon: 1e-6 } },
    );
    for (const o of good) {
      assert.doesNotThrow(() => checkOptions(o));
    }
    const bad: [VppsOptions, RegExp][] = [
      [
        { variants: { transposed: "yes" as unknown as boolean } },
        /variants\.transposed must be true, false or "profile"; got "yes"/,
      ],
      [{ variants: { profileBatches: 0 } }, /variants\.profileBatches must be a whole number >= 1; got 0/],
      [{ variants: { profileBatches: 2.5 } }, /variants\.profileBatches must be a whole number >= 1; got 2.5/],
      [{ variants: { profileNodes: -1 } }, /variants\.profileNodes must be a whole number >= 0; got -1/],
      [{ variants: { profileNodes: Number.NaN } }, /variants\.profileNodes must be a whole number >= 0; got NaN/],
      [{ host: { pipelineSlots: 1 } }, /host\.pipelineSlots must be a whole number >= 2; got 1/],
      [{ host: { scheduleAhead: 0 } }, /host\.scheduleAhead must be a whole number >= 1; got 0/],
      [
        { host: { scheduleWorkers: -1 } },
        /host\.scheduleWorkers must be a whole number >= 0 \(0: schedule in fb\); got -1/,
      ],
      [
        { instrument: { timing: 1 } },
        /instrument\.timing must be true, false or a whole number >= 2 \(one batch pair in N\); got 1/,
      ],
      [
        { training: { optimizer: "rmsprop" as unknown as "sgd" } },
        /training\.optimizer must be "sgd" or "adam"; got 'rmsprop'/,
      ],
      [{ training: { beta1: 1 } }, /training\.beta1 must be in \[0, 1\); got 1/],
      [{ training: { epsilon: 0 } }, /training\.epsilon must be positive; got 0/],
      [
        { training: { learningRate: Number.NaN } },
        /Vpps: training\.learningRate must be a finite number >= 0 \(0: forward and backward only\); got NaN$/,
      ],
      [{ training: { learningRate: -0.1 } }, /training\.learningRate must be a finite number >= 0 .*; got -0\.1$/],
      [{ training: { learningRate: Infinity } }, /training\.learningRate must be .*; got Infinity$/],
      [
        { training: { clip: Number.NaN } },
        /Vpps: training\.clip must be a finite number >= 0 \(0: no clipping\); got NaN$/,
      ],
      [{ training: { clip: -1 } }, /training\.clip must be a finite number >= 0 .*; got -1$/],
    ];
    for (const [o, message] of bad) assert.throws(() => checkOptions(o), message);
    // fb reads the settings again (they are properties a caller may set between batches)
    assert.throws(() => checkStepSettings("Vpps.fb: ", Number.NaN, 5), /Vpps\.fb: learningRate must be a finite/);
    assert.throws(() => checkStepSettings("Vpps.fb: ", 0.1, -2), /Vpps\.fb: clip must be a finite number >= 0/);
    checkStepSettings("Vpps.fb: ", 0, 0);
  });

  test("defaults: resolveOptions fills every group as Vpps.create did with the flat options", () => {
    const r = resolveOptions({});
    assert.equal(r.device, "auto");
    assert.equal(r.name, "model");
    assert.equal(r.exportGradients, false);
    assert.deepEqual(r.training, {
      learningRate: 0.1,
      optimizer: "sgd",
      beta1: 0.9,
      beta2: 0.999,
      epsilon: 1e-8,
      clip: 5,
    });
    assert.equal(r.variants.rowsPerWarp, "profile");
    assert.equal(r.variants.transposed, "profile");
    assert.equal(r.variants.gradients, "auto");
    assert.equal(r.variants.profileBatches, 4);
    assert.equal(r.variants.profileNodes, DEFAULT_PROFILE_NODES);
    assert.equal(r.host.pipelineSlots, PIPELINE_SLOTS);
    assert.equal(r.host.scheduleAhead, undefined); // twice the workers the pool has
    // the host timeline follows VPPS_DP_TRACE unless the option says otherwise
    const hostTrace = hostTraceFromEnv();
    assert.deepEqual(r.instrument, { timing: false, profileKernel: false, traceKernel: false, hostTrace });
    assert.equal(resolveOptions({ instrument: { hostTrace: !hostTrace } }).instrument.hostTrace, !hostTrace);
    // a fixed rpw fixes the variant: no transposed profile unless asked for
    assert.equal(resolveOptions({ variants: { rowsPerWarp: 2 } }).variants.transposed, false);
    assert.equal(
      resolveOptions({ variants: { rowsPerWarp: 2, transposed: "profile" } }).variants.transposed,
      "profile",
    );
  });
});

describe("createEngine('vpps')", () => {
  const available = cudaAvailable();
  test("refuses --device cpu with an EngineUnavailableError", () => {
    const pc = new ParameterCollection({ seed: 1 });
    pc.addParameters([4, 4], undefined, "W");
    assert.throws(() => createEngine("vpps", pc, { device: "cpu" }), EngineUnavailableError);
  });
  test("without a GPU: an EngineUnavailableError that says what is missing", { skip: available.ok }, () => {
    const pc = new ParameterCollection({ seed: 1 });
    pc.addParameters([4, 4], undefined, "W");
    assert.throws(
      () => createEngine("vpps", pc),
      (e: unknown) => e instanceof EngineUnavailableError && /'vpps' engine needs a CUDA GPU/.test(e.message),
    );
  });
});
