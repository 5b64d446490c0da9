/**
 * How the matrix instructions stage their operands in shared memory (the buffers' sizes), and what a plan's free
 * registers let the kernel afford: entries staged per round, loads in flight, grouped waits, the tile routines'
 * mode. Every choice is a compile-time constant of the generated kernel.
 */
import type { HeldMatrix, MatrixPlan, VppsPlan } from "../plan/plan.js";

/** Columns one column block of the x̄ reduction covers: 8 chunks of 32 lanes = the 256 threads of the CTA. */
export const REDUCE_BLOCK_COLS = 256;
/** Register chunks (of 32 columns) in one column block of the x̄ reduction. */
export const BLOCK_CHUNKS = REDUCE_BLOCK_COLS / 32;

/**
 * Floats of shared memory the matrix instructions stage their x vectors in. A warp walking entries one at a time
 * waits a full L2 round trip per entry for its x (and 8 warps each fetch the same x); staging up to
 * `MAX_STAGE_ENTRIES` entries' vectors with the whole CTA puts all those loads in flight at once and reads each x
 * from L2 once per CTA.
 */
export const STAGE_FLOATS = 4096;
export const MAX_STAGE_ENTRIES = 8;
/** Floats of shared memory for the staged ȳ rows of matvec.bwd (per entry and slot: the CTA's 8·rpw rows). */
export const STAGE_YBAR_FLOATS = 1024;
/** Words of the staged operand-list entries (4 words per entry at most). */
export const STAGE_ENTRY_WORDS = 4 * MAX_STAGE_ENTRIES;

/**
 * Registers a plan leaves free beyond what the unstaged routines were measured to need: the staged forward product
 * keeps one bias per staged entry and a group of x loads in flight in registers, so tight plans stage fewer. Rows
 * wider than 16 chunks (512 columns) cost one more register each per chunk beyond (measured: a Tree-LSTM of hidden
 * and embedding 1024, rows of 32 chunks, spilled 8 bytes with 31 registers of headroom counted without them). The
 * headroom a spill re-plan keeps free (plan/types.ts PlanOptions.headroom) counts as used here too, so a re-planned
 * kernel also stages more frugally.
 */
function stagingHeadroom(plan: VppsPlan): number {
  let widest = 0;
  for (const m of [...plan.matrices, ...plan.transposed]) if (m.partitionCount > 0) widest = Math.max(widest, m.chunks);
  return (
    plan.budget.limitPerThread -
    plan.budget.headroom -
    plan.weightRegs -
    plan.gradientRegs -
    64 -
    Math.max(0, widest - 16)
  );
}

/**
 * Whether the interpreter polls a run of consecutive waits at once (a lane each; interpreter.ts): the lanes' poll
 * state costs registers that the tightest plans (hidden 512) do not have (measured: a spill), so they poll one
 * wait at a time.
 */
export function groupWaits(plan: VppsPlan): boolean {
  return stagingHeadroom(plan) >= 24;
}

/**
 * Whether lstm.bwd has its own loop for two children with every load issued first: measured, it spilled the
 * tightest plan (hidden 512, rpw 1), so it needs the same headroom as grouped waits. (lstm's forward one needs
 * fewer registers and is always there.)
 */
export function binaryCellBackward(plan: VppsPlan): boolean {
  return stagingHeadroom(plan) >= 24;
}

/** x loads in flight per thread while staging (registers), by headroom. */
export function stageLoads(plan: VppsPlan): number {
  return stagingHeadroom(plan) >= 24 ? 8 : 4;
}

/**
 * How a plan's tile routines trade registers for speed, by the registers the plan leaves free:
 * - `passes`: passes of the product over each staged chunk, 1 (the thread's 16 accumulators at once) or 2 (8 at a
 *   time, twice the shared-memory reads), where one pass made ptxas spill (plans too tight to stage);
 * - `fast`: unroll the product loop (its shared loads overlap the FMAs) and load the next chunk while multiplying
 *   this one (16 more registers), where there is room.
 * test/vpps-codegen.test.ts compiles every Tree-LSTM plan, which covers all three kinds.
 */
export function tileMode(plan: VppsPlan): { readonly passes: 1 | 2; readonly fast: boolean } {
  const headroom = stagingHeadroom(plan);
  return { passes: headroom >= 24 ? 1 : 2, fast: headroom >= 48 };
}

/** Entries a matvec of `m` stages per round (0: too wide to stage; the unstaged path walks entries per warp). */
export function forwardStage(m: HeldMatrix, plan: VppsPlan): number {
  if (m.cols > STAGE_FLOATS) return 0;
  const cap = stagingHeadroom(plan) >= 24 ? MAX_STAGE_ENTRIES : 0;
  return Math.min(cap, Math.floor(STAGE_FLOATS / m.cols));
}

/** Entries a matvec.bwd of `m` stages per round: also bounded by the ȳ buffer (8·rpw rows per slot holding m). */
export function backwardStage(m: MatrixPlan, plan: VppsPlan): number {
  if (m.cols > STAGE_FLOATS || stagingHeadroom(plan) < 24) return 0;
  const perEntry = m.slots.length * 8 * plan.rowsPerWarp;
  return Math.min(MAX_STAGE_ENTRIES, Math.floor(STAGE_FLOATS / m.cols), Math.floor(STAGE_YBAR_FLOATS / perEntry));
}
