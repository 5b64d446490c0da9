// The host side of the VPPS runtime, without a GPU: double buffering of batches (which slot, whose loss fb
// returns, when the host waits), the kernel's error words, and `createEngine("vpps")` where no GPU can be used.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { cudaAvailable } from "../src/cuda/index.js";
import { createEngine, EngineUnavailableError } from "../src/engines/index.js";
import { KERNEL_ERRORS } from "../src/engines/vpps/kernel-static.js";
import { BatchPipeline, decodeKernelStatus, type SlotDevice, VppsKernelError } from "../src/engines/vpps/pipeline.js";
import { ParameterCollection } from "../src/model/parameters.js";

/** A fake device: slot s holds the loss of the batch last queued in it; records every wait. */
function fakeDevice() {
  const losses = [0, 0];
  const status = [new Int32Array(6), new Int32Array(6)];
  const waits: number[] = [];
  const retired: number[] = [];
  const device: SlotDevice = {
    wait: (s) => waits.push(s),
    loss: (s) => losses[s]!,
    status: (s) => status[s]!,
    retired: (_s, batch) => retired.push(batch),
  };
  return { device, losses, status, waits, retired };
}

describe("VPPS batch pipeline (double buffering)", () => {
  test("slots alternate, fb returns the previous batch's loss, NaN first", () => {
    const f = fakeDevice();
    const p = new BatchPipeline(f.device, () => "k");
    const returned: number[] = [];
    for (let k = 0; k < 5; k++) {
      const s = p.begin();
      assert.equal(s, k % 2, `batch ${k} fills slot ${k % 2}`);
      f.losses[s] = 100 + k; // what the kernel will write
      returned.push(p.end(s));
    }
    assert.ok(Number.isNaN(returned[0]!));
    assert.deepEqual(returned.slice(1), [100, 101, 102, 103]);
    // each batch is waited for exactly once, right after its successor is queued, in order
    assert.deepEqual(f.retired, [0, 1, 2, 3]);
    assert.deepEqual(f.waits, [0, 1, 0, 1]);
    assert.equal(p.drain(), 104);
    assert.deepEqual(f.retired, [0, 1, 2, 3, 4]);
  });

  test("drain between batches: the next fb still returns the previous loss", () => {
    const f = fakeDevice();
    const p = new BatchPipeline(f.device, () => "k");
    let s = p.begin();
    f.losses[s] = 1;
    p.end(s);
    assert.equal(p.drain(), 1);
    s = p.begin();
    f.losses[s] = 2;
    assert.equal(p.end(s), 1);
    assert.equal(p.drain(), 2);
    assert.ok(Number.isNaN(new BatchPipeline(f.device, () => "k").drain()));
  });

  test("a kernel error surfaces when its batch is retired, naming kernel, batch, processor and barrier", () => {
    const f = fakeDevice();
    const p = new BatchPipeline(f.device, () => "vpps_m_cta1_rpw1");
    const s0 = p.begin();
    p.end(s0);
    f.status[s0]!.set([KERNEL_ERRORS.barrierTimeout, 17, 42, 3, 4, 900]);
    const s1 = p.begin();
    assert.throws(
      () => p.end(s1),
      (e: unknown) =>
        e instanceof VppsKernelError &&
        e.processor === 17 &&
        e.barrier === 42 &&
        /kernel vpps_m_cta1_rpw1, batch 0: processor \(CTA\) 17 timed out waiting on barrier 42 at script word 900: expected 4 signals, saw 3/.test(
          e.message,
        ),
    );
  });
});

describe("VPPS kernel status words", () => {
  test("zero is no error; every code decodes to a message naming the processor", () => {
    assert.equal(decodeKernelStatus([0, 0, 0, 0, 0, 0], "k", 0), undefined);
    const cases: [number, RegExp][] = [
      [KERNEL_ERRORS.badOpcode, /processor \(CTA\) 5 met unknown opcode 99 at script word 7/],
      [KERNEL_ERRORS.badLength, /processor \(CTA\) 5: the instruction at script word 7 runs past/],
      [KERNEL_ERRORS.badMatrix, /names matrix 99, which this kernel does not hold/],
      [77, /unknown error code 77/],
    ];
    for (const [code, re] of cases) {
      const e = decodeKernelStatus([code, 5, 99, 0, 0, 7], "k", 3);
      assert.ok(e instanceof VppsKernelError);
      assert.match(e.message, re);
      assert.equal(e.processor, 5);
    }
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
