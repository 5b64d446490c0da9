/**
 * What a launch of a dense persistent layer runs for a batch: the layout (of those rnnLayouts fits) and how many
 * replicas, chosen by a cost model of a step; and whether its tile loops are the pipelined ones.
 */
import { UserError } from "../../util/errors.js";
import { BATCH_TILE, type RnnKernelPlan, type RnnLayout } from "./dense.js";

/**
 * Whether a backward launch of `replicas` replicas over `batch` sequences runs the pipelined tile loop (one tile per
 * wait, the next tile's rows copied under this tile's product; docs/RNN.md): a single replica holding more than one
 * batch tile. Replicated launches keep the step loop (measured faster for them). The layer also needs the two tile
 * slots to fit in shared memory and the loop not turned off (`pipeline: false`, VPPS_RNN_PIPELINE=0).
 */
export function pipelinedBackward(replicas: number, batch: number): boolean {
  return replicas === 1 && batch > BATCH_TILE;
}

/**
 * Whether a forward launch of `replicas` replicas over `batch` sequences runs the forward's pipelined tile loop (one
 * tile per wait, the next tile's rows copied under this tile's product, each tile's cell deferred past the next
 * tile's wait; docs/RNN.md): a single replica holding more than two batch tiles, with the same conditions as
 * `pipelinedBackward`. With two tiles a step's first tile is copied before the deferred cell of the step before has
 * published it, so every copy would be re-fetched: measured slower than the step loop at batch 8 (LSTM 1152 on an
 * H100: 1.87 against 1.37 ms).
 */
export function pipelinedForward(replicas: number, batch: number): boolean {
  return replicas === 1 && batch > 2 * BATCH_TILE;
}

/**
 * Whether the pipelined tile loops are on: `option` (the layer's or backend's `pipeline`) where given, else
 * VPPS_RNN_PIPELINE (`0` off, `1` on), else on. Anything else is refused in one line.
 */
export function rnnPipelineSetting(option: unknown, env: string | undefined): boolean {
  if (option !== undefined) {
    if (typeof option !== "boolean") {
      throw new UserError(`persistent RNN: option 'pipeline' must be true or false; got ${String(option)}`);
    }
    return option;
  }
  if (env === undefined || env === "" || env === "1") return true;
  if (env === "0") return false;
  throw new UserError(
    `persistent RNN: VPPS_RNN_PIPELINE must be 0 (the step loops) or 1 (the pipelined tile loops); got '${env}'`,
  );
}

/**
 * Cost-model constants for choosing among layouts (cycles of an H100 SM, rough, after the per-step phases measured
 * with the instrumented build, VPPS_RNN_PHASES=1): the latency of a step's hand-over (publish, poll, the L2 round
 * trips), the per-tile overhead besides the mat-vec (barriers, reduction, the cell), and the L2 bandwidth every CTA's
 * poll shares (~2.5 TB/s measured for all SMs reading the same lines).
 */
const STEP_LATENCY_CYCLES = 2000;
const TILE_OVERHEAD_CYCLES = 800;
const L2_BYTES_PER_CYCLE = 1400;

/** The model's cycles of one step of one kernel over `batch` sequences with `replicas` replicas. */
export function stepCycles(plan: RnnKernelPlan, batch: number, replicas: number): number {
  const cols = Math.ceil(batch / replicas);
  const tiles = Math.max(1, Math.ceil(cols / BATCH_TILE));
  const pollBytes = plan.ctas * replicas * cols * plan.cols * 4;
  return STEP_LATENCY_CYCLES + pollBytes / L2_BYTES_PER_CYCLE + tiles * (plan.costCycles + TILE_OVERHEAD_CYCLES);
}

/** A layout and how many of its replicas a launch runs. */
export interface RnnLaunchChoice {
  readonly layout: RnnLayout;
  readonly replicas: number;
}

/**
 * The layout and replica count for a batch of `batch` sequences: the lowest modelled forward + backward step time;
 * ties go to the fewer replicas. `forced` (VPPS_RNN_REPLICAS, for comparisons) instead takes the widest layout that
 * can run that many replicas and runs min(forced, batch) of them; 1 is the layout before replicas existed.
 * `maxCtas` caps the grid (a launch sharing the GPU with a concurrent one, e.g. the other direction of a
 * bidirectional layer); undefined when no layout fits under it (`fitsWithin`).
 */
export function chooseRnnLaunch(
  layouts: readonly RnnLayout[],
  batch: number,
  forced?: number,
  maxCtas = Number.POSITIVE_INFINITY,
): RnnLaunchChoice {
  const within = layouts.filter((l) => l.forward.ctas <= maxCtas);
  if (within.length === 0) {
    throw new Error(`chooseRnnLaunch: no layout within ${maxCtas} CTAs (of ${layouts.length}); check fitsWithin`);
  }
  const most = (l: RnnLayout) => Math.min(l.forward.replicas, Math.floor(maxCtas / l.forward.ctas));
  if (forced !== undefined) {
    const layout = forced === 1 ? within[0]! : (within.find((l) => most(l) >= forced) ?? within.at(-1)!);
    return { layout, replicas: Math.max(1, Math.min(forced, most(layout), batch)) };
  }
  let best: RnnLaunchChoice = { layout: within[0]!, replicas: 1 };
  let bestCost = Number.POSITIVE_INFINITY;
  for (const layout of within) {
    const replicas = Math.max(1, Math.min(most(layout), batch));
    // one copy of a narrower layout: fewer CTAs poll less, but measured slower than the widest at batch 1 (H100)
    if (replicas === 1 && layout !== within[0]) continue;
    const cost = stepCycles(layout.forward, batch, replicas) + stepCycles(layout.backward, batch, replicas);
    if (cost < bestCost) {
      best = { layout, replicas };
      bestCost = cost;
    }
  }
  return best;
}

/** Whether some layout runs within `maxCtas` CTAs. */
export function fitsWithin(layouts: readonly RnnLayout[], maxCtas: number): boolean {
  return layouts.some((l) => l.forward.ctas <= maxCtas);
}
