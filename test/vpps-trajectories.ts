/**
 * VPPS on its emulator against the CPU references (test/vpps-reference.ts) over several batches: shared by
 * test/vpps-emulator.test.ts (Tree-LSTM and random graphs) and test/sentence-engines.test.ts (the sentence models).
 */
import type { DeviceModel } from "../src/cuda/hw/device-model.js";
import { createModelLayout } from "../src/engines/vpps/plan/layout.js";
import { ADAM_DEFAULTS, adamStep, momentLayout, momentsOfParameters } from "../src/engines/vpps/plan/moments.js";
import { type PlanOptions, planVpps } from "../src/engines/vpps/plan/plan.js";
import { VppsScheduler } from "../src/engines/vpps/schedule/scheduler.js";
import { emulateBatch } from "../src/engines/vpps/script/emulate-batch.js";
import type { ComputationGraph, Expression } from "../src/graph/graph.js";
import { onChipMatrices, type ParameterCollection } from "../src/model/parameters.js";
import { AdamTrainer } from "../src/optim/trainers.js";
import { compareAdamBatch, type Looseness, referenceAdamBatch } from "./vpps-reference.js";

/**
 * Runs `batches` consecutive Adam batches through the CPU engine + AdamTrainer and, from the same start, through the
 * emulator (each on its own trajectory: weights and moments carried from batch to batch); per batch compares the
 * loss, every gradient, every moment and every step over two interleavings. Returns the mismatches.
 */
export function adamTrajectories(
  pc: ParameterCollection,
  graphs: (k: number) => { cg: ComputationGraph; loss: Expression },
  device: DeviceModel,
  plan: PlanOptions,
  clip: number,
  lr: number,
  batches: number,
  loose: Looseness,
  tileEntries?: number,
): string[] {
  const model = createModelLayout(pc.all, planVpps(onChipMatrices(pc), device, plan));
  const scheduler = new VppsScheduler(model, {
    exportGradients: true,
    optimizer: "adam",
    ...(tileEntries !== undefined ? { tileEntries } : {}),
  });
  const trainer = new AdamTrainer({ learningRate: lr, clipThreshold: clip });
  let values: Float32Array[] = pc.all.map((p) => Float32Array.from(p.value));
  let moments: Float32Array = new Float32Array(momentLayout(model).floats);
  const out: string[] = [];
  for (let k = 0; k < batches; k++) {
    const { cg, loss } = graphs(k);
    const ref = referenceAdamBatch(pc, trainer, loss);
    const sched = scheduler.schedule(cg, loss);
    const adam = adamStep(ADAM_DEFAULTS, k + 1);
    let next: { values: Float32Array[]; moments: Float32Array } | undefined;
    for (const [seed, interleaving] of [
      [k + 1, "random"],
      [k + 2, "greedy"],
    ] as const) {
      const got = emulateBatch(model, sched, cg, values, { seed, interleaving, learningRate: lr, clip, adam }, moments);
      next ??= { values: got.values, moments: got.moments! };
      const mine = { ...got, before: values, after: got.values, moments: momentsOfParameters(model, got.moments!) };
      const d = compareAdamBatch(pc.all, ref, mine, lr, k + 1, loose);
      if (d) out.push(`batch ${k + 1} (${interleaving} seed ${seed}): ${d}`);
    }
    values = next!.values;
    moments = next!.moments;
  }
  return out;
}
