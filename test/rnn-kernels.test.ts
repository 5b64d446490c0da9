// The persistent RNN kernels without a GPU: the planner derives layouts and the largest layer from the device model
// (not tables), and the generated CUDA of a sample of the tightest configurations (one of each kind; the rest in
// test/sweeps/rnn-kernels.test.ts, test/rnn-nvcc.ts) compiles with nvcc for sm_90 with no stack frame and no spill —
// the weights really stay in registers.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { KernelSpillError } from "../src/cuda/compile/ptxas-report.js";
import { H100_SXM, schedulerRegisterLimit } from "../src/cuda/hw/device-model.js";
import { backwardKernelSource, forwardKernelSource, sharedBytes } from "../src/rnn/codegen/index.js";
import {
  BATCH_TILE,
  chooseRnnLaunch,
  fitsWithin,
  largestPersistentHidden,
  paddedCols,
  pipelinedBackward,
  pipelinedForward,
  planRnnKernel,
  planRnnLayer,
  planUntilNoSpill,
  rnnLayouts,
  rnnPipelineSetting,
  stepCycles,
} from "../src/rnn/plan/index.js";
import { GpuRnnBackend } from "../src/rnn/runtime/index.js";
import { gatesOf, RNN_CELLS } from "../src/rnn/spec.js";
import { describeRnnCompile, rnnNvccCases } from "./rnn-nvcc.js";

describe("the persistent RNN planner", () => {
  test("the largest fp32 layers on an H100 are the paper's sizes (RNN 2304, LSTM 1152)", () => {
    assert.equal(largestPersistentHidden("rnn-tanh", H100_SXM), 2304);
    assert.equal(largestPersistentHidden("rnn-relu", H100_SXM), 2304);
    assert.equal(largestPersistentHidden("lstm", H100_SXM), 1152);
    assert.equal(largestPersistentHidden("gru", H100_SXM), 1312);
  });

  test("the largest fp16 layers on an H100 (two weights per register)", () => {
    assert.equal(largestPersistentHidden("rnn-tanh", H100_SXM, "fp16"), 3168);
    assert.equal(largestPersistentHidden("rnn-relu", H100_SXM, "fp16"), 3168);
    assert.equal(largestPersistentHidden("lstm", H100_SXM, "fp16"), 1568);
    assert.equal(largestPersistentHidden("gru", H100_SXM, "fp16"), 1792);
  });

  test("fewer SMs or registers mean a smaller largest layer (derived from the device, not a table)", () => {
    const small = { ...H100_SXM, name: "half", smCount: 66 };
    assert.ok(largestPersistentHidden("lstm", small) < largestPersistentHidden("lstm", H100_SXM));
    const fewer = { ...H100_SXM, name: "fewer registers", regsPerSm: 32_768 };
    assert.ok(largestPersistentHidden("rnn-tanh", fewer) < largestPersistentHidden("rnn-tanh", H100_SXM));
  });

  test("every plan covers its block: rows and columns padded, registers within the per-scheduler limit", () => {
    for (const cell of RNN_CELLS) {
      for (const hidden of [4, 64, 100, 512, 1152]) {
        for (const kind of ["forward", "backward"] as const) {
          const r = planRnnKernel(cell, hidden, kind, H100_SXM);
          assert.ok(r.fits, `${cell} ${hidden} ${kind}`);
          const p = r.plan;
          assert.ok(p.ctas <= H100_SXM.smCount);
          assert.ok(p.ctas * p.unitsPerCta >= hidden && (p.ctas - 1) * p.unitsPerCta < hidden);
          assert.equal(p.rows, kind === "forward" ? p.unitsPerCta * gatesOf(cell) : p.unitsPerCta);
          assert.ok(p.rowGroups * p.rowsPerThread >= p.rows);
          assert.ok(paddedCols(p) >= p.cols);
          assert.equal(p.threads % 32, 0);
          assert.ok(p.registersEstimate <= schedulerRegisterLimit(H100_SXM, p.threads));
          assert.ok(p.unitsPerCta * BATCH_TILE <= p.threads);
          assert.ok(sharedBytes(p, 64) <= H100_SXM.sharedPerBlock);
        }
      }
    }
  });

  test("headroom keeps registers free beyond the estimate (the JIT re-plans with it where ptxas spilled)", () => {
    for (const cell of RNN_CELLS) {
      for (const hidden of [64, 512, 1024]) {
        for (const headroom of [8, 16, 24]) {
          const r = planRnnLayer(cell, hidden, H100_SXM, "fp32", 1, 0, headroom);
          assert.ok(r.fits, `${cell} ${hidden} headroom ${headroom}`);
          for (const p of [r.forward, r.backward]) {
            const limit = schedulerRegisterLimit(H100_SXM, p.threads);
            assert.ok(p.registersEstimate + headroom <= limit, `${cell} ${hidden} ${p.kind}: ${p.registersEstimate}`);
          }
        }
      }
    }
    // LSTM 1024: forward 256 threads (the 512-thread layout, estimate 120, is inside the margin at 128 registers);
    // backward 384 threads (168 registers, estimate 160 + the margin 8) without headroom, 256 threads with 8 or 16
    const at = (headroom: number) => {
      const r = planRnnLayer("lstm", 1024, H100_SXM, "fp32", 1, 0, headroom);
      assert.ok(r.fits);
      return r.fits ? [r.forward.threads, r.backward.threads] : [];
    };
    assert.deepEqual(
      [at(0), at(8), at(16)],
      [
        [256, 384],
        [256, 256],
        [256, 256],
      ],
    );
    // the registers full: LSTM 1152 has no room for 8 more
    const full = planRnnLayer("lstm", 1152, H100_SXM, "fp32", 1, 0, 8);
    assert.equal(full.fits, false);
    // every replicated layout keeps it too
    const layouts = rnnLayouts("gru", 256, H100_SXM, "fp32", 16);
    assert.ok(layouts.length > 1);
    for (const l of layouts) {
      for (const p of [l.forward, l.backward]) {
        assert.ok(p.registersEstimate + 16 <= schedulerRegisterLimit(H100_SXM, p.threads), `gru 256 u${p.unitsPerCta}`);
      }
    }
  });

  test("a layer whose kernels spill is planned again with 8, 16, 24 registers kept free, then given up", () => {
    const spill = () => new KernelSpillError("spilled", "rnn_forward", 168, 8);
    const run = (spillsBelow: number, base = 0) => {
      const tried: number[] = [];
      const notices: string[] = [];
      const result = planUntilNoSpill({
        base,
        what: "persistent lstm 1024",
        attempt: (h) => {
          tried.push(h);
          if (h < spillsBelow) throw spill();
          return `layout planned with ${h}`;
        },
        notice: (l) => notices.push(l),
        giveUp: (h) => new RangeError(`gave up at ${h}`),
      });
      return { result, tried, notices };
    };
    const once = run(16);
    assert.equal(once.result, "layout planned with 16");
    assert.deepEqual(once.tried, [0, 8, 16]);
    assert.deepEqual(once.notices, [
      "vpps: persistent lstm 1024: the planned layout spills (8 bytes per thread); planned again with 8 registers per thread kept free",
      "vpps: persistent lstm 1024: the planned layout spills (8 bytes per thread); planned again with 16 registers per thread kept free",
    ]);
    assert.deepEqual(run(0).tried, [0]);
    assert.deepEqual(run(0, 4).tried, [4]);
    assert.deepEqual(run(20, 4).tried, [4, 12, 20]);
    assert.throws(() => run(Number.POSITIVE_INFINITY), /gave up at 24/);
    // any other error (a layer that does not fit at all, a driver error) ends the tries at once
    const tried: number[] = [];
    assert.throws(
      () =>
        planUntilNoSpill({
          base: 0,
          what: "x",
          attempt: (h) => {
            tried.push(h);
            throw new TypeError("not a spill");
          },
          notice: () => assert.fail("no notice"),
          giveUp: () => new Error("unreachable"),
        }),
      /not a spill/,
    );
    assert.deepEqual(tried, [0]);
  });

  test("a layer too large is refused with the reason, never planned", () => {
    const r = planRnnLayer("lstm", 2304, H100_SXM);
    assert.equal(r.fits, false);
    if (!r.fits) assert.match(r.reason, /lstm layer of hidden 2304 needs 165,888 fp32 weight registers per CTA/);
  });

  test("replicated layouts: more units per CTA, fewer CTAs, as many copies as the SMs hold, all fitting", () => {
    for (const cell of RNN_CELLS) {
      for (const hidden of [64, 256, 512]) {
        const ls = rnnLayouts(cell, hidden, H100_SXM);
        assert.ok(ls.length > 1, `${cell} ${hidden}: only ${ls.length} layout`);
        const widest = planRnnLayer(cell, hidden, H100_SXM);
        assert.ok(widest.fits);
        if (widest.fits) assert.deepEqual(ls[0]!.forward, widest.forward);
        for (let i = 0; i < ls.length; i++) {
          const { forward: f, backward: b } = ls[i]!;
          assert.equal(f.unitsPerCta, b.unitsPerCta);
          assert.equal(f.ctas, b.ctas);
          assert.ok(f.ctas * f.unitsPerCta >= hidden && (f.ctas - 1) * f.unitsPerCta < hidden);
          assert.equal(f.replicas, Math.floor(H100_SXM.smCount / f.ctas));
          assert.ok(f.replicas * f.ctas <= H100_SXM.smCount);
          for (const p of [f, b])
            assert.ok(p.registersEstimate <= p.registerLimit && p.unitsPerCta * BATCH_TILE <= p.threads);
          if (i > 0)
            assert.ok(f.unitsPerCta > ls[i - 1]!.forward.unitsPerCta && f.replicas >= ls[i - 1]!.forward.replicas);
        }
      }
    }
    // a layer that fills the register file has one layout: the widest
    assert.equal(rnnLayouts("lstm", 1152, H100_SXM).length, 1);
    assert.equal(rnnLayouts("rnn-tanh", 2304, H100_SXM).length, 1);
    assert.equal(rnnLayouts("lstm", 2304, H100_SXM).length, 0);
  });

  test("more units per CTA on request: LSTM 1152 in 116 CTAs (clusters of 4 divide it) with the same registers", () => {
    const wide = planRnnLayer("lstm", 1152, H100_SXM);
    const quad = planRnnLayer("lstm", 1152, H100_SXM, "fp32", 1, 10);
    assert.ok(wide.fits && quad.fits);
    if (!wide.fits || !quad.fits) return;
    assert.equal(quad.forward.unitsPerCta, 10);
    assert.equal(quad.forward.ctas, 116);
    assert.equal(quad.backward.ctas, 116);
    assert.equal(quad.forward.weightRegisters, wide.forward.weightRegisters);
    assert.equal(quad.backward.weightRegisters, wide.backward.weightRegisters);
    // never fewer units than the SM count implies
    const p = planRnnLayer("lstm", 1152, H100_SXM, "fp32", 1, 2);
    assert.ok(p.fits && p.forward.unitsPerCta === 9);
  });

  test("the launch choice: one replica for one sequence, replicas for a large batch of a small layer", () => {
    const ls = rnnLayouts("lstm", 256, H100_SXM);
    assert.equal(chooseRnnLaunch(ls, 1).replicas, 1);
    const big = chooseRnnLaunch(ls, 128);
    assert.ok(big.replicas >= 8, `${big.replicas} replicas`);
    assert.ok(Math.ceil(128 / big.replicas) <= 4 * BATCH_TILE);
    // the model's step at batch 128 is several times shorter than the widest layout's single replica
    const one = stepCycles(ls[0]!.forward, 128, 1);
    assert.ok(stepCycles(big.layout.forward, 128, big.replicas) * 3 < one);
    // forced: 1 is the widest layout alone; N takes the widest layout that holds N replicas, never more than the batch
    assert.deepEqual(chooseRnnLaunch(ls, 128, 1), { layout: ls[0], replicas: 1 });
    const f8 = chooseRnnLaunch(ls, 128, 8);
    assert.equal(f8.replicas, 8);
    assert.equal(
      f8.layout,
      ls.find((l) => l.forward.replicas >= 8),
    );
    assert.equal(chooseRnnLaunch(ls, 3, 8).replicas, 3);
    // capped at half the SMs (a concurrent launch beside it): every choice fits the cap
    for (const batch of [1, 4, 32, 128]) {
      const c = chooseRnnLaunch(ls, batch, undefined, 66);
      assert.ok(c.layout.forward.ctas * c.replicas <= 66, `batch ${batch}: ${c.layout.forward.ctas} × ${c.replicas}`);
    }
    assert.ok(chooseRnnLaunch(ls, 128, undefined, 66).replicas >= 4);
    assert.ok(fitsWithin(ls, 66));
    assert.equal(fitsWithin(rnnLayouts("lstm", 1152, H100_SXM), 66), false);
    assert.throws(() => chooseRnnLaunch(rnnLayouts("lstm", 1152, H100_SXM), 4, undefined, 66), /no layout within 66/);
    // a layer with one layout runs it alone
    assert.deepEqual(chooseRnnLaunch(rnnLayouts("lstm", 1152, H100_SXM), 64).replicas, 1);
  });

  test("the loops with deferred cells are builds of their own; each kernel holds one pipelined loop at most", () => {
    // in the same kernel as the step loop they slowed it (GRU 1152 forward at batch 4, 0.69 → 0.89 ms)
    const plan = planRnnLayer("lstm", 1152, H100_SXM);
    assert.ok(plan.fits);
    if (!plan.fits) return;
    const calls = (src: string) => src.split("settle_tile(slot,").length - 1;
    const forward = forwardKernelSource(plan.forward);
    const forwardPipelined = forwardKernelSource(plan.forward, { pipelinedForward: true });
    assert.equal(calls(forward), 0);
    assert.equal(calls(forwardPipelined), 1);
    assert.match(forwardPipelined, /run_cell\(parts \+ \(c_i & 1\)/, "the previous tile's cell after the wait");
    const backward = backwardKernelSource(plan.backward);
    const deferred = backwardKernelSource(plan.backward, { deferredBackward: true });
    assert.equal(calls(backward), 1);
    assert.equal(calls(deferred), 1);
    assert.doesNotMatch(backward, /d_i & 1/);
    assert.match(deferred, /const float\* part = parts \+ \(d_i & 1\)/, "the previous tile's sums");
    // every generated cell reads its sums from an explicit buffer (never a pointer initialised from itself)
    for (const src of [forwardPipelined, backward, deferred]) assert.doesNotMatch(src, /const float\* part = part;/);
  });

  test("the pipelined tile loops: where they run, and their switch refused in one line when bad", () => {
    assert.equal(pipelinedBackward(1, BATCH_TILE), false);
    assert.equal(pipelinedBackward(1, BATCH_TILE + 1), true);
    assert.equal(pipelinedBackward(2, 64), false);
    // the forward's defers each tile's cell past the next tile's wait: it needs three tiles or more
    assert.equal(pipelinedForward(1, 2 * BATCH_TILE), false);
    assert.equal(pipelinedForward(1, 2 * BATCH_TILE + 1), true);
    assert.equal(pipelinedForward(2, 64), false);
    assert.equal(rnnPipelineSetting(undefined, undefined), true);
    assert.equal(rnnPipelineSetting(undefined, "0"), false);
    assert.equal(rnnPipelineSetting(undefined, "1"), true);
    assert.equal(rnnPipelineSetting(false, "1"), false);
    assert.equal(rnnPipelineSetting(true, "0"), true);
    assert.throws(
      () => rnnPipelineSetting(undefined, "off"),
      /^UserError: persistent RNN: VPPS_RNN_PIPELINE must be 0 \(the step loops\) or 1 \(the pipelined tile loops\); got 'off'$/,
    );
    assert.throws(() => rnnPipelineSetting("yes", undefined), /option 'pipeline' must be true or false; got yes$/);
    // the backend checks it before opening the device, so the refusal is the same on a machine without a GPU
    assert.throws(
      () => new GpuRnnBackend(0, { pipeline: 1 as unknown as boolean }),
      /option 'pipeline' must be true or false; got 1$/,
    );
  });

  test("the per-scheduler register limit: 9 warps get 168 registers, 8 warps 255", () => {
    assert.equal(schedulerRegisterLimit(H100_SXM, 288), 168);
    assert.equal(schedulerRegisterLimit(H100_SXM, 256), 255);
    assert.equal(schedulerRegisterLimit(H100_SXM, 512), 128);
  });
});

describe("npm test's nvcc sample of the sweep", () => {
  test("one case of each kind: fp32 at the largest hidden, clustered, the 168-register margin, fp16", () => {
    const cases = rnnNvccCases();
    const sample = cases.filter((c) => c.sample).map((c) => `${c.cell} ${c.what}`);
    assert.deepEqual(sample, [
      "lstm at the largest hidden (1152)",
      "rnn-tanh at hidden 1792 (clustered)",
      "lstm at hidden 640, 15 units per CTA (a margin at 168 registers)",
      "gru with fp16 weights at the largest hidden (1792)",
    ]);
    assert.equal(cases.length, 16, "the sweep compiles the other 12");
  });
});

describeRnnCompile(
  "the tightest persistent RNN kernels under nvcc: a sample",
  rnnNvccCases().filter((c) => c.sample),
);
