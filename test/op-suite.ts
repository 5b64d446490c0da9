/**
 * The op × engine suite: every case of test/op-cases.ts (keyed by op) on an engine, against the CPU engine — the
 * loss, then node by node (ids in order: the first differing node is the one reported) each value and gradient, the
 * dropout masks bit for bit, then every parameter's gradient and each lookup table's touched rows. Engines are
 * adapters (`EngineUnderTest`) with their own tolerances: the CPU-side ones are here (the batched CPU engine, the
 * GPU autobatch engine on its emulated device, VPPS on its emulator); test/gpu/op-engines.test.ts adds the real GPU
 * engines. Also used by the engine tests for their random graphs (`compareWithCpu`).
 */

import assert from "node:assert/strict";
import { H100_SXM } from "../src/cuda/hw/device-model.js";
import { AutobatchCpuEngine } from "../src/engines/autobatch/cpu-batched.js";
import { AutobatchGpuEngine } from "../src/engines/autobatch/gpu-engine.js";
import { refusesOp } from "../src/engines/autobatch/kernel-table.js";
import type { BatchStrategy } from "../src/engines/autobatch/plan.js";
import { CpuEngine } from "../src/engines/cpu.js";
import type { Engine } from "../src/engines/engine.js";
import { createModelLayout } from "../src/engines/vpps/plan/layout.js";
import { planVpps } from "../src/engines/vpps/plan/plan.js";
import { refusedOps } from "../src/engines/vpps/schedule/kernel-table.js";
import { VppsScheduler } from "../src/engines/vpps/schedule/scheduler.js";
import { emulateBatch } from "../src/engines/vpps/script/emulate-batch.js";
import { ComputationGraph, type Expression } from "../src/graph/graph.js";
import { Op, UnsupportedOpError } from "../src/graph/opcodes.js";
import type { ParameterCollection } from "../src/model/parameters.js";
import { EmulatedAutobatchDevice } from "./autobatch-emulator.js";
import type { CaseGraph, OpCase } from "./op-cases.js";

/** How close an engine's numbers must be to the CPU engine's. */
export interface Tolerance {
  readonly loss: (actual: number, expected: number) => boolean;
  /** Index of the first element of `actual` too far from `expected`, or −1 (values). */
  readonly values: (actual: Float32Array, expected: Float32Array) => number;
  /** The same for gradients. */
  readonly gradients: (actual: Float32Array, expected: Float32Array) => number;
}

/** What an engine computed for one graph (node values and gradients where the engine keeps them). */
export interface EngineRun {
  readonly loss: number;
  value?(i: number): Float32Array;
  gradient?(i: number): Float32Array;
  parameterGradient(index: number): Float32Array;
  /** A lookup table's touched rows, where the engine reports them. */
  touchedRows?(index: number): readonly number[];
  dispose(): void;
}

export interface EngineUnderTest {
  readonly name: string;
  readonly tolerance: Tolerance;
  /** Touched rows are compared in order of first touch (else as sets). */
  readonly touchedInOrder?: boolean;
  /** Why this engine does not run the case, or undefined. */
  skip?(c: OpCase): string | undefined;
  /** The op of the case's graph this engine refuses (its run must fail naming it), or undefined. */
  refuses?(c: OpCase): Op | undefined;
  /** Forward and backward of `loss` on a fresh engine over `params`. */
  run(params: ParameterCollection, cg: ComputationGraph, loss: Expression): EngineRun | Promise<EngineRun>;
}

// ---- tolerances ------------------------------------------------------------------------------------------------------

function firstBeyond(actual: Float32Array, expected: Float32Array, tol: (e: number, scale: number) => number): number {
  if (actual.length !== expected.length) return 0;
  let scale = 0;
  for (const x of expected) scale = Math.max(scale, Math.abs(x));
  for (let k = 0; k < expected.length; k++) {
    const e = expected[k]!;
    if (!(Math.abs(actual[k]! - e) <= tol(e, scale))) return k;
  }
  return -1;
}

/** |a − e| ≤ r·(1 + |e|) per element, the loss too (the eager engine's rule). */
export function elementTolerance(r: number): Tolerance {
  const t = (a: Float32Array, e: Float32Array) => firstBeyond(a, e, (x) => r * (1 + Math.abs(x)));
  return { loss: (a, e) => Math.abs(a - e) <= r * (1 + Math.abs(e)), values: t, gradients: t };
}

/**
 * |a − e| ≤ r · max(|e|, the array's largest |e|, 1e-3): relative at the array's scale (sums in another order); the
 * loss relative to max(1, |loss|).
 */
export function scaleTolerance(r: number): Tolerance {
  const t = (a: Float32Array, e: Float32Array) => firstBeyond(a, e, (x, s) => r * Math.max(Math.abs(x), s, 1e-3));
  return { loss: (a, e) => Math.abs(a - e) <= r * Math.max(1, Math.abs(e)), values: t, gradients: t };
}

/** The batched CPU engine: loss and values bit for bit (products accumulate as the reference does), gradients 1e-5. */
const batchedCpuTolerance: Tolerance = {
  loss: (a, e) => a === e,
  values: (a, e) => firstBeyond(a, e, () => 0),
  gradients: (a, e) => firstBeyond(a, e, (_, s) => 1e-5 * s + 1e-30),
};

/**
 * VPPS (test/vpps-reference.ts): gradients 2e-4 of the tensor's largest magnitude (plus `floor`); the loss `lossR`
 * relative.
 */
export function vppsTolerance(lossR: number, floor = 1e-12): Tolerance {
  const t = (a: Float32Array, e: Float32Array) => firstBeyond(a, e, (_, s) => floor + 2e-4 * s);
  return { loss: (a, e) => Math.abs(a - e) <= lossR * Math.max(1, Math.abs(e)), values: t, gradients: t };
}

// ---- the comparison --------------------------------------------------------------------------------------------------

/** The CPU engine's run of a graph: the reference. */
function cpuRun(params: ParameterCollection, cg: ComputationGraph, loss: Expression): EngineRun {
  return engineRun(new CpuEngine(params), cg, loss, hostParameters(params));
}

/** Reads parameter gradients and touched rows from the collection (engines that keep parameters on the host). */
function hostParameters(params: ParameterCollection) {
  return {
    parameterGradient: (index: number) => Float32Array.from(params.all[index]!.grad),
    touchedRows: (index: number) => {
      const p = params.all[index]!;
      return p.kind === "lookup" ? [...p.touchedRows] : [];
    },
  };
}

/** Forward and backward of `loss` on an Engine; node values and gradients read back on demand. */
export function engineRun(
  engine: Engine,
  cg: ComputationGraph,
  loss: Expression,
  params: Pick<EngineRun, "parameterGradient" | "touchedRows">,
): EngineRun {
  const value = engine.forwardScalar(loss);
  engine.backward(loss);
  return {
    loss: value,
    value: (i) => engine.value(cg.expression(i)),
    gradient: (i) => engine.gradient(cg.expression(i)),
    ...params,
    dispose: () => engine.dispose(),
  };
}

const sorted = (rows: readonly number[]) => [...rows].sort((a, b) => a - b);

/**
 * Runs `make`'s graph on the CPU engine and on `engine`; returns the first difference, or "". Node by node (unless
 * `everyNode` is false): values, gradients (parameter nodes' as parameter gradients), dropout masks exactly.
 */
export async function compareWithCpu(
  make: () => CaseGraph,
  engine: EngineUnderTest,
  opts: { everyNode?: boolean } = {},
): Promise<string> {
  const ref = make();
  const got = make();
  const cgR = new ComputationGraph();
  const cgG = new ComputationGraph();
  const lossR = ref.build(cgR);
  const lossG = got.build(cgG);
  if (cgR.size !== cgG.size) return `the two builds made ${cgR.size} and ${cgG.size} nodes`;
  const cpu = cpuRun(ref.params, cgR, lossR);
  const run = await engine.run(got.params, cgG, lossG);
  try {
    const tol = engine.tolerance;
    if (!tol.loss(run.loss, cpu.loss)) return `loss is ${run.loss}, CPU ${cpu.loss}`;
    const at = (what: string, k: number, a: Float32Array, e: Float32Array) =>
      k < 0 ? "" : `${what}: element ${k} is ${a[k]}, CPU ${e[k]}${a.length !== e.length ? " (lengths differ)" : ""}`;
    for (let i = 0; opts.everyNode !== false && i <= lossR.id; i++) {
      const node = cgR.describe(i);
      if (run.value) {
        const e = cpu.value!(i);
        const a = run.value(i);
        const d = at(`value of node ${node}`, tol.values(a, e), a, e) || dropoutMask(cgR, i, a, e);
        if (d) return d;
      }
      if (run.gradient && cgR.op[i] !== Op.Parameter) {
        const e = cpu.gradient!(i);
        const a = run.gradient(i);
        const d = at(`gradient of node ${node}`, tol.gradients(a, e), a, e);
        if (d) return d;
      }
    }
    for (const p of ref.params.all) {
      const e = cpu.parameterGradient(p.index);
      const a = run.parameterGradient(p.index);
      const d = at(`gradient of parameter '${p.name}'`, tol.gradients(a, e), a, e);
      if (d) return d;
      if (p.kind !== "lookup" || !run.touchedRows) continue;
      const [rr, rg] = [cpu.touchedRows!(p.index), run.touchedRows(p.index)];
      const same = engine.touchedInOrder ? `${rr}` === `${rg}` : `${sorted(rr)}` === `${sorted(rg)}`;
      if (!same) return `touched rows of '${p.name}' are [${rg}], CPU [${rr}]`;
    }
    return "";
  } finally {
    run.dispose();
  }
}

/** A dropout node's mask must be the CPU's bit for bit: an element is zero on both engines or on neither. */
function dropoutMask(g: ComputationGraph, i: number, actual: Float32Array, expected: Float32Array): string {
  if (g.op[i] !== Op.Dropout) return "";
  for (let k = 0; k < expected.length; k++) {
    if ((actual[k] === 0) !== (expected[k] === 0)) {
      return `dropout mask of node ${g.describe(i)}: element ${k} is ${actual[k]}, CPU ${expected[k]}`;
    }
  }
  return "";
}

/** The first op of the case's graph, in node order, that `refused` says an engine refuses; undefined if none. */
export function firstRefused(c: OpCase, refused: (op: Op) => boolean): Op | undefined {
  const cg = new ComputationGraph();
  c.make().build(cg);
  for (let i = 0; i < cg.size; i++) if (refused(cg.op[i] as Op)) return cg.op[i] as Op;
  return undefined;
}

/** What an engine that refuses an op in a graph must do: fail with one UnsupportedOpError naming that op. */
export async function assertRefuses(c: OpCase, engine: EngineUnderTest, op: Op): Promise<void> {
  await assert.rejects(compareWithCpu(c.make, engine), (e: unknown) => {
    assert.ok(e instanceof UnsupportedOpError, `expected an UnsupportedOpError, got ${String(e)}`);
    assert.equal(e.op, op, e.message);
    assert.ok(!e.message.includes("\n"), "one line");
    return true;
  });
}

// ---- the engines available without a GPU ----------------------------------------------------------------------------

const STRATEGIES: readonly BatchStrategy[] = ["depth", "agenda"];

/** AutobatchCpuEngine with one strategy. */
export function batchedCpuEngine(strategy: BatchStrategy): EngineUnderTest {
  return {
    name: `autobatch CPU (${strategy})`,
    tolerance: batchedCpuTolerance,
    touchedInOrder: false,
    run: (params, cg, loss) =>
      engineRun(new AutobatchCpuEngine(params, { strategy }), cg, loss, hostParameters(params)),
  };
}

/**
 * The GPU autobatch engine on the emulated device (test/autobatch-emulator.ts): every table, record and launch.
 * `onEngine` sees each engine made (tests that inspect its device's log).
 */
export function emulatedAutobatchEngine(
  strategy: BatchStrategy,
  onEngine?: (e: AutobatchGpuEngine) => void,
): EngineUnderTest {
  return {
    name: `autobatch GPU (${strategy}, emulated device)`,
    tolerance: scaleTolerance(1e-4),
    refuses: (c) => firstRefused(c, refusesOp),
    run: (params, cg, loss) => {
      const e = new AutobatchGpuEngine(params, { strategy }, new EmulatedAutobatchDevice(params));
      onEngine?.(e);
      return engineRun(e, cg, loss, {
        parameterGradient: (i) => e.device.readGradient(i),
        touchedRows: (i) => e.device.touchedRows(i),
      });
    },
  };
}

/** A small GPU: few CTAs, so matrices spread over several slots of each CTA and processors share work. */
const SMALL_GPU = { ...H100_SXM, name: "small test GPU", smCount: 3 };

/**
 * VPPS on its emulator, one plan, the processors interleaved `interleaving`ly (test/vpps-emulator.test.ts runs
 * many): loss and parameter gradients (VPPS keeps no node values to read).
 */
export function emulatedVpps(interleaving: "random" | "greedy"): EngineUnderTest {
  return {
    name: `VPPS (emulated, ${interleaving} interleaving)`,
    tolerance: vppsTolerance(1e-5),
    skip: (c) => c.notOnVpps,
    refuses: vppsRefuses,
    run(params, cg, loss) {
      const specs = vppsMatrices(params).map((p) => ({ name: p.name, rows: p.rows, cols: p.cols }));
      const model = createModelLayout(params.all, planVpps(specs, SMALL_GPU, { ctasPerSm: 1, rowsPerWarp: 1 }));
      const schedule = new VppsScheduler(model, { exportGradients: true }).schedule(cg, loss);
      const values = params.all.map((p) => p.value);
      const got = emulateBatch(model, schedule, cg, values, { seed: 1, interleaving, learningRate: 0.1, clip: 0 });
      return { loss: got.loss, parameterGradient: (i) => got.gradients[i]!, dispose: () => {} };
    },
  };
}

/** The op of a case VPPS refuses (its kernel table's `unsupported` entries). */
export function vppsRefuses(c: OpCase): Op | undefined {
  const refused = refusedOps();
  return firstRefused(c, (op) => refused[op] === 1);
}

/** The matrices VPPS keeps on chip; a model without one gets an unused 1×2 matrix (VPPS plans at least one). */
export function vppsMatrices(params: ParameterCollection) {
  const matrices = () => params.all.filter((p) => p.kind === "dense" && p.isMatrix);
  if (matrices().length === 0) params.addParameters([1, 2], undefined, "vpps_unused");
  return matrices();
}

/** Every engine this machine runs without a GPU, with the CPU engine as the reference. */
export const CPU_SIDE_ENGINES: readonly EngineUnderTest[] = [
  ...STRATEGIES.map((s) => batchedCpuEngine(s)),
  ...STRATEGIES.map((s) => emulatedAutobatchEngine(s)),
  emulatedVpps("random"),
  emulatedVpps("greedy"),
];
