// GLP4NN's kernel analyser: how many kernels to run at once, hence how many streams to give a layer (or a level of
// a graph), from the kernels' footprints (kernels.ts) and the device.
//
// The program, per kernel i with x_i instances resident at once (integer, 0 ≤ x_i ≤ u_i):
//
//   maximise   Σ x_i · tail_i · τ_i                            resident threads (the paper's objective, Eqs. 1–3)
//   subject to Σ x_i · tail_i · τ̂_i      ≤ #SM · τ_max         threads (Eq. 5)
//              Σ x_i · tail_i            ≤ #SM · β_max         blocks (β_max: defined by the paper, never used)
//              Σ x_i · tail_i · regs_i   ≤ #SM · registers/SM  registers (the paper's "soft" constraint, kept here)
//              Σ x_i · tail_i · sm_i     ≤ #SM · sm_max        shared memory (Eq. 4)
//              1 ≤ Σ x_i ≤ C                                   concurrency degree (Eq. 6)
//   u_i = min(instances_i, ⌈T′_i / T_launch⌉)                  (Eq. 7's launch term; T′: one wave's share of T_i)
//   C   = min(resident grids of the architecture, CUDA_DEVICE_MAX_CONNECTIONS, ⌈max_i T′_i / T_launch⌉)
//   pool size = Σ x_i                                          (Eq. 9)
//
// Ties (choices with as many resident threads) go to the smallest pool: the objective is (C + 1) · threads − Σ x_i.
//
// tail_i is the blocks of kernel i's last wave; τ̂, regs and sm are per block as the SM allocates them (whole warps,
// register allocation units, the driver's shared-memory reserve). As printed, the paper's program is not well posed
// (its objective holds #K_i only through Eq. 8, which divides a kernel count by #SM); this is the per-instance form
// its authors' code solves, with the register and block constraints added and the caps of C made explicit. See
// docs/GLP4NN.md.

import { type DeviceModel, maxResidentGrids } from "../cuda/hw/device-model.js";
import {
  footprint,
  gpuCapacity,
  type KernelFootprint,
  type KernelProfile,
  RESOURCES,
  type Resource,
  tailDemand,
} from "./kernels.js";
import { type IntegerProgram, type IntegerSolver, lpText } from "./solver.js";

/** CUDA's default for CUDA_DEVICE_MAX_CONNECTIONS, and the most it takes. */
export const DEFAULT_CONNECTIONS = 8;
export const MAX_CONNECTIONS = 32;

/**
 * The hardware work queues streams are mapped onto: CUDA_DEVICE_MAX_CONNECTIONS (1 … 32, default 8). More streams than
 * queues share queues, and kernels on a shared queue serialise behind one another.
 */
export function hardwareQueues(env: Readonly<Record<string, string | undefined>> = process.env): number {
  const raw = env.CUDA_DEVICE_MAX_CONNECTIONS;
  if (raw === undefined || raw.trim() === "") return DEFAULT_CONNECTIONS;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1 || n > MAX_CONNECTIONS) {
    throw new RangeError(
      `CUDA_DEVICE_MAX_CONNECTIONS is '${raw}'; CUDA takes an integer 1 … ${MAX_CONNECTIONS} (default ${DEFAULT_CONNECTIONS})`,
    );
  }
  return n;
}

/** What the analyser is asked. */
export interface ConcurrencyProblem {
  /** What the kernels belong to (a layer, a level), for the explanation. */
  readonly label: string;
  readonly kernels: readonly KernelProfile[];
  readonly device: DeviceModel;
  /** Host time per launch, µs (T_launch); 0: launches are free, no launch bound. */
  readonly launchUs: number;
  /** Hardware queues open (`hardwareQueues()`). */
  readonly connections: number;
  /** The paper's program: registers are not constrained (for comparison). Default false. */
  readonly ignoreRegisters?: boolean;
}

/** The cap C on the kernels resident at once, and its parts. */
export interface ConcurrencyCap {
  readonly value: number;
  readonly residentGrids: number;
  readonly connections: number;
  /** ⌈max T′ / T_launch⌉ (Infinity without a launch cost). */
  readonly launch: number;
}

/** The analyser's answer. */
export interface ConcurrencyChoice {
  readonly problem: ConcurrencyProblem;
  /** Streams to use: Σ x_i, at least 1. */
  readonly poolSize: number;
  readonly kernels: readonly KernelFootprint[];
  /** Upper bound u_i and chosen x_i per kernel, in the problem's order. */
  readonly bounds: readonly number[];
  readonly chosen: readonly number[];
  readonly cap: ConcurrencyCap;
  /** The GPU's capacity and the choice's use of each resource the program constrains. */
  readonly capacity: Readonly<Record<Resource, number>>;
  readonly used: Readonly<Record<Resource, number>>;
  /** What keeps the pool from being larger, in words. */
  readonly reason: string;
  /** The program as solved, in CPLEX LP format. */
  readonly program: string;
}

/** Builds the program for `problem`. */
export function concurrencyProgram(problem: ConcurrencyProblem): {
  program: IntegerProgram;
  kernels: KernelFootprint[];
  cap: ConcurrencyCap;
  bounds: number[];
  capacity: Record<Resource, number>;
  constrained: Resource[];
} {
  const { device, kernels: profiles, launchUs, connections } = problem;
  if (profiles.length === 0) throw new RangeError(`concurrency analysis of ${problem.label}: no kernels given`);
  if (!(Number.isFinite(launchUs) && launchUs >= 0)) {
    throw new RangeError(`concurrency analysis of ${problem.label}: launchUs must be a time ≥ 0 µs; got ${launchUs}`);
  }
  if (!Number.isInteger(connections) || connections < 1 || connections > MAX_CONNECTIONS) {
    throw new RangeError(
      `concurrency analysis of ${problem.label}: connections must be an integer 1 … ${MAX_CONNECTIONS}; got ${connections}`,
    );
  }
  const kernels = profiles.map((k) => footprint(k, device, launchUs));
  const launch = launchUs > 0 ? Math.ceil(Math.max(...kernels.map((k) => k.tailUs)) / launchUs) : Infinity;
  const residentGrids = maxResidentGrids(device.arch);
  const cap: ConcurrencyCap = {
    value: Math.min(residentGrids, connections, launch),
    residentGrids,
    connections,
    launch,
  };
  const bounds = kernels.map((k) => Math.min(k.profile.instances ?? Infinity, k.launchBound, cap.value));
  const capacity = gpuCapacity(device);
  const constrained = RESOURCES.filter((r) => !(r === "registers" && problem.ignoreRegisters));
  const demand = kernels.map(tailDemand);
  const n = kernels.length;
  const program: IntegerProgram = {
    variables: kernels.map((_, i) => `x${i}`),
    // resident threads first; among choices with as many threads, the fewest streams (each weighs less than a thread)
    objective: kernels.map((k) => k.tailBlocks * k.profile.threadsPerBlock * (cap.value + 1) - 1),
    rows: [
      ...constrained.map((r) => ({
        name: r.replace(" ", "_"),
        coefficients: demand.map((d) => d[r]),
        sense: "<=" as const,
        bound: capacity[r],
      })),
      { name: "at_least_one", coefficients: new Array<number>(n).fill(1), sense: ">=" as const, bound: 1 },
      { name: "cap", coefficients: new Array<number>(n).fill(1), sense: "<=" as const, bound: cap.value },
    ],
    lower: new Array<number>(n).fill(0),
    upper: bounds,
  };
  return { program, kernels, cap, bounds, capacity, constrained };
}

/** Solves the program (docs at the top of this file) and says why the pool has the size it has. */
export function analyseConcurrency(problem: ConcurrencyProblem, solver: IntegerSolver): ConcurrencyChoice {
  const { program, kernels, cap, bounds, capacity, constrained } = concurrencyProgram(problem);
  const { values: chosen } = solver.maximise(program);
  const poolSize = Math.max(
    1,
    chosen.reduce((a, b) => a + b, 0),
  );
  const used = Object.fromEntries(RESOURCES.map((r) => [r, 0])) as Record<Resource, number>;
  kernels.forEach((k, i) => {
    const d = tailDemand(k);
    for (const r of RESOURCES) used[r] += chosen[i]! * d[r];
  });
  return {
    problem,
    poolSize,
    kernels,
    bounds,
    chosen,
    cap,
    capacity,
    used,
    reason: reasonFor(kernels, bounds, chosen, cap, capacity, used, constrained, poolSize),
    program: lpText(program),
  };
}

/** Why one more kernel does not run at once: the cap, every kernel's own bound, or the resource an addition exceeds. */
function reasonFor(
  kernels: readonly KernelFootprint[],
  bounds: readonly number[],
  chosen: readonly number[],
  cap: ConcurrencyCap,
  capacity: Record<Resource, number>,
  used: Record<Resource, number>,
  constrained: readonly Resource[],
  poolSize: number,
): string {
  if (poolSize >= cap.value) {
    const parts: [number, string][] = [
      [cap.residentGrids, "the architecture's resident kernels"],
      [cap.connections, "the hardware queues (CUDA_DEVICE_MAX_CONNECTIONS)"],
      [cap.launch, "the launch cost: one host thread launches no more while the longest kernel's last wave runs"],
    ];
    const [, why] = parts.find(([v]) => v === cap.value)!;
    return `the cap C = ${cap.value}: ${why}`;
  }
  const open = kernels.map((_, i) => i).filter((i) => chosen[i]! < bounds[i]!);
  if (open.length === 0) {
    const why = kernels.map((k, i) => {
      const b = bounds[i]!;
      const by = b === k.profile.instances ? "instances available" : "launch cost, ⌈T′/T_launch⌉";
      return `${k.profile.name} ${b} (${by})`;
    });
    return `every kernel is at its own bound: ${why.join(", ")}`;
  }
  // the open kernel with the most threads per instance, and the resources one more of it would exceed
  const i = open.reduce((a, b) =>
    kernels[b]!.tailBlocks * kernels[b]!.threadsPerBlock > kernels[a]!.tailBlocks * kernels[a]!.threadsPerBlock ? b : a,
  );
  const d = tailDemand(kernels[i]!);
  const over = constrained.filter((r) => used[r] + d[r] > capacity[r]);
  if (over.length === 0) return "the optimum of the program (no single instance more fits with the others)";
  const what = over.map((r) => `${r} (needs ${d[r]}, ${capacity[r] - used[r]} free)`).join(", ");
  return `one more ${kernels[i]!.profile.name} exceeds the GPU's ${what}`;
}
