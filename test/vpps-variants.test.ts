// How many plan variants `Vpps.create` compiles: at most MAX_PROFILED_VARIANTS, spread over the valid list, so that the
// first JIT of a model stays within the 30 s a user waits (TD-LSTM has 19 valid variants on an H100).
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { H100_SXM, H200 } from "../src/cuda/hw/device-model.js";
import { MAX_PROFILED_VARIANTS, plansFor, spread } from "../src/engines/vpps/codegen/compile.js";
import { kernelName } from "../src/engines/vpps/codegen/template.js";
import { resolveOptions } from "../src/engines/vpps/options.js";
import { enumeratePlans } from "../src/engines/vpps/plan/plan.js";
import { onChipMatrices } from "../src/model/parameters.js";
import { MODELS } from "../src/models/registry.js";

describe("VPPS plan variants compiled per model", () => {
  test("spread keeps the first and the last, in order, and never more than asked", () => {
    for (let n = 1; n <= 40; n++) {
      for (let most = 2; most <= 10; most++) {
        const xs = Array.from({ length: n }, (_, i) => i);
        const kept = spread(xs, most);
        assert.equal(kept.length, Math.min(n, most), `n ${n}, most ${most}`);
        assert.equal(kept[0], 0);
        assert.equal(kept.at(-1), n - 1);
        for (let i = 1; i < kept.length; i++) assert.ok(kept[i]! > kept[i - 1]!, `in order: ${kept.join()}`);
      }
    }
  });

  for (const device of [H100_SXM, H200]) {
    test(`every model at the paper's sizes compiles at most ${MAX_PROFILED_VARIANTS} variants on ${device.name}, the first plan among them`, () => {
      let capped = 0;
      for (const task of MODELS.filter((t) => t.name !== "cnn")) {
        const shapes = task.parameterShapes(task.defaults, 1000);
        const matrices = onChipMatrices(shapes);
        const variants = resolveOptions({}).variants;
        const plans = plansFor(matrices, device, variants);
        assert.ok(plans.length >= 1 && plans.length <= MAX_PROFILED_VARIANTS, `${task.name}: ${plans.length}`);
        const all = [false, true].flatMap((t) => enumeratePlans(matrices, device, "auto", t));
        if (all.length > MAX_PROFILED_VARIANTS) capped++;
        // the finest plan (one CTA per SM, one row per warp, no copies) is always among them
        assert.equal(plans[0]!.ctasPerSm, all[0]!.ctasPerSm, task.name);
        assert.equal(plans[0]!.rowsPerWarp, all[0]!.rowsPerWarp, task.name);
      }
      assert.ok(capped >= 1, "some model has more valid variants than the cap (TD-LSTM: 19 on an H100)");
    });
  }

  test("where the planner keeps matrices off chip, the plans with every matrix off chip are profiled beside them", () => {
    const treelstm = MODELS.find((t) => t.name === "treelstm")!;
    const sizes = [
      { hidden: 1024, embed: 1024 },
      { hidden: 1536, embed: 256 },
    ];
    for (const size of sizes) {
      const shapes = treelstm.parameterShapes({ ...treelstm.defaults, ...size } as never, 1000);
      const matrices = onChipMatrices(shapes);
      const plans = plansFor(matrices, H100_SXM, resolveOptions({}).variants);
      assert.ok(plans.length <= MAX_PROFILED_VARIANTS, `${size.hidden}: ${plans.length}`);
      const everyOff = plans.filter((p) => p.offChip.length === p.matrices.length);
      assert.deepEqual(
        everyOff.map((p) => p.ctasPerSm),
        [1, 2],
        `${size.hidden}: one of each CTAs per SM`,
      );
      assert.ok(
        plans.some((p) => p.offChip.length > 0 && p.offChip.length < p.matrices.length),
        "the planner's own placement stays",
      );
      const names = plans.map((p) => kernelName(p, { model: "m" }));
      assert.equal(new Set(names).size, names.length, `names apart: ${names.join(", ")}`);
      // a placement the user forces (U_iou, and what must join it) is compiled alone: no every-matrix plan added
      const forced = plansFor(matrices, H100_SXM, resolveOptions({ variants: { offChip: ["U_iou"] } }).variants);
      assert.ok(forced.every((p) => p.offChip.length > 0 && p.offChip.length < p.matrices.length));
    }
    // at the paper's size everything is in registers: no off-chip variant
    const small = onChipMatrices(treelstm.parameterShapes(treelstm.defaults, 1000));
    assert.ok(plansFor(small, H100_SXM, resolveOptions({}).variants).every((p) => p.offChip.length === 0));
  });
});
