/**
 * Weight distribution for VPPS: which persistent CTA holds which rows of which weight matrix in its registers.
 *
 * Vocabulary (the paper's, §III-A1):
 * - A CTA of 256 threads (8 warps) is one virtual processor; the grid has `smCount * ctasPerSm` of them.
 * - A warp holds whole rows; a row of length L is spread over the 32 lanes, `ceil(L / 32)` registers ("chunks") per
 *   lane per row, lane l holding columns l, l + 32, l + 64, ...
 * - A partition is `rowsPerWarp` (rpw) rows per warp, i.e. `8 * rpw` consecutive rows of one matrix per CTA.
 * - Partitions of all matrices form one list that is dealt round-robin over the CTAs: partition k goes to CTA
 *   `k % ctas`, register slot `floor(k / ctas)`. Every CTA therefore holds the same number of partitions, give or
 *   take one, and every matrix is spread over as many CTAs as it has partitions.
 * - A slot is a register array that exists in every CTA (the kernel is one program); in CTAs where slot j holds a
 *   narrower matrix than the widest one dealt to slot j elsewhere, the extra registers stay unused. Sorting the
 *   matrices by row width before dealing keeps such mixed slots rare.
 */
import type { DeviceModel } from "../../../cuda/hw/device-model.js";

/** A 2-D weight matrix the kernel keeps on chip (biases, vectors and lookup tables stay in global memory). */
export interface MatrixSpec {
  readonly name: string;
  readonly rows: number;
  readonly cols: number;
}

/** Where a matrix's gradient is formed: in registers (outer products in the kernel) or by one GEMM after it. */
export type GradientStrategy = "registers" | "gemm";

/**
 * Where a plan matrix's gradient is formed: a GradientStrategy for a matrix held in registers, or "device" for a
 * matrix kept off chip, whose W̄ the tile.wbar instructions add into the gradient buffer in device memory.
 */
export type MatrixGradients = GradientStrategy | "device";

/**
 * Where a plan matrix lives during a launch: in the registers of its holders, or off chip — in global memory (the
 * master copy, read through L2 by the tile instructions, which any processor runs), with its gradient in the
 * gradient buffer. Lookup tables and vectors always stay in global memory and are not plan matrices.
 */
export type Placement = "registers" | "off-chip";

export interface PlanOptions {
  /** Persistent CTAs per SM; default: 2 when the whole model (with gradients) fits that way, else 1. */
  readonly ctasPerSm?: 1 | 2;
  /** Rows per warp per partition; default: the smallest valid value (a profile of real batches may pick another). */
  readonly rowsPerWarp?: number;
  /** Gradient placement; `auto` keeps gradients in registers where they fit, largest matrices go to GEMM first. */
  readonly gradients?: GradientStrategy | "auto";
  /**
   * Keep a transposed copy of register-gradient matrices where registers allow (default false; see `transposed`
   * below): short backward lists then form x̄ = Wᵀȳ as a forward-style product on the copy's holders.
   */
  readonly transposed?: boolean;
  /**
   * Matrices forced off chip (names, or "all"); default none. The planner adds to them the fewest matrices without
   * which the rest does not fit (plan.ts chooseOffChip).
   */
  readonly offChip?: readonly string[] | "all";
  /**
   * Registers per thread kept free beyond the interpreter's reserve (default 0): the JIT plans a variant again with
   * some when ptxas spilled its kernel (codegen/compile.ts), so that fewer gradients (or weights) are held and the
   * kernel's staging choices (codegen/staging.ts) are more frugal.
   */
  readonly headroom?: number;
}

/**
 * Registers per thread a plan keeps free when it adds transposed copies: the interpreter's reserve measured for the
 * unstaged routines (64) plus 32 for the staged list routines, grouped waits (codegen/staging.ts stagingHeadroom
 * wants 24) and load.t's loads in flight (measured: 24 left a Tree-LSTM H=512 plan spilling). A copy that would take
 * the kernel below that is not added: it would slow every list down.
 */
export const TRANSPOSED_RESERVE = 64 + 32;

/** Threads per persistent CTA: 8 warps, enough for one CTA to use the whole register file (paper §III-A1). */
export const THREADS_PER_CTA = 256;
export const WARPS_PER_CTA = THREADS_PER_CTA / 32;

/**
 * Registers per thread kept free of parameters for the interpreter loop, addressing, the operand-list walk of the
 * matrix instructions, the vectors a matrix routine holds while multiplying (x chunks, ȳ rows, 8 partial sums) and
 * ptxas' temporaries: the most the Tree-LSTM kernels were found to need (64, with four slots of register gradients;
 * docs/journal/vpps.md) plus a margin. test/vpps-codegen.test.ts checks zero spills on every plan the
 * planner offers, and the JIT refuses a kernel that spills (codegen/compile.ts).
 */
export const INTERPRETER_RESERVED_REGS = 72;

/** Larger rpw only makes the load granularity coarser; the paper found six or fewer useful values. */
export const MAX_ROWS_PER_WARP = 8;

/**
 * An rpw is worth compiling only while at least this fraction of the CTAs holds a partition; beyond that, growing
 * rpw idles processors without saving registers.
 */
export const MIN_BUSY_CTA_FRACTION = 0.5;

/** One partition: `8 * rpw` consecutive rows of one matrix, held by one CTA in one register slot. */
export interface PartitionAssignment {
  /** Index of the matrix in `VppsPlan.matrices`. */
  readonly matrix: number;
  /** Index of this partition within its matrix (partition p holds rows from `p * 8 * rpw`). */
  readonly partition: number;
  /** Position in the global round-robin list. */
  readonly globalPartition: number;
  readonly cta: number;
  readonly slot: number;
  /** Rows `[firstRow, firstRow + rowCount)` of the matrix; the last partition of a matrix may be short. */
  readonly firstRow: number;
  readonly rowCount: number;
  /** Per warp, the rows it holds (`rowCount` 0 for warps past the end of a short partition). */
  readonly warps: readonly { readonly warp: number; readonly firstRow: number; readonly rowCount: number }[];
}

/** Rows of a matrix dealt over the CTAs' register slots: a plan matrix, or a transposed copy of one. */
export interface HeldMatrix {
  /** The instruction's matrix number n (plan matrices first, then the transposed copies). */
  readonly index: number;
  readonly name: string;
  readonly rows: number;
  readonly cols: number;
  /** Registers per lane per row: `ceil(cols / 32)`. */
  readonly chunks: number;
  /** First partition in the round-robin list and how many there are. */
  readonly firstPartition: number;
  readonly partitionCount: number;
  /** Register slots that hold rows of this matrix in some CTA. */
  readonly slots: readonly number[];
  /** Offset in floats of the row-major master copy (a transposed copy: its source's, read column by column). */
  readonly masterOffset: number;
  readonly partitions: readonly PartitionAssignment[];
}

/**
 * A read-only transposed copy Wᵀ of a register-gradient plan matrix W (rows = W's columns), loaded from W's master
 * copy by the holders' `load.t` where their backward work begins, and never updated (the next launch loads the
 * updated W again). Its holders run `matvec.acc` lists (x̄ += Wᵀȳ) for short backward lists of W, whose holders
 * then only accumulate W̄, after the backward pass — off the critical path.
 */
export interface TransposedPlan extends HeldMatrix {
  /** Index of W in `VppsPlan.matrices`. */
  readonly source: number;
}

export interface MatrixPlan extends HeldMatrix {
  readonly gradients: MatrixGradients;
  /** Registers (then `partitions` says where) or off chip (no partitions: every product runs as tiles). */
  readonly placement: Placement;
  /** Why it lives there, for `vpps plan` ("forced by offChip", "the rest fits only without it", ...). */
  readonly placementReason: string;
}

export interface SlotLayout {
  readonly index: number;
  /** Matrices dealt to this slot in some CTA, widest first (matrix numbers: transposed copies after the plan's). */
  readonly matrices: readonly number[];
  /** Chunks per row of the widest matrix in the slot: the slot's register array is `rpw x chunks`. */
  readonly chunks: number;
  readonly weightRegs: number;
  /** Chunks per row of the widest matrix in the slot whose gradient lives in registers (0 when none does). */
  readonly gradientChunks: number;
  readonly gradientRegs: number;
}

export interface RegisterBudget {
  /** What one thread may use (src/cuda/hw/device-model.ts registersPerThread: 255 at 1 CTA/SM, 128 at 2). */
  readonly limitPerThread: number;
  readonly interpreterReserve: number;
  /** Registers kept free beyond the interpreter's reserve (PlanOptions.headroom; 0 unless a kernel spilled). */
  readonly headroom: number;
  /** `limitPerThread - interpreterReserve - headroom`: what weights and gradients may fill. */
  readonly forParameters: number;
}

export interface VppsPlan {
  readonly device: DeviceModel;
  readonly ctasPerSm: 1 | 2;
  readonly rowsPerWarp: number;
  /** Number of persistent CTAs (the grid): `smCount * ctasPerSm`. */
  readonly ctas: number;
  readonly threadsPerCta: number;
  readonly budget: RegisterBudget;
  /** Registers per thread holding weights, and gradients, over all slots. */
  readonly weightRegs: number;
  readonly gradientRegs: number;
  /** rpw values worth compiling for this `ctasPerSm` and gradient option (fit, and keep enough CTAs busy). */
  readonly validRowsPerWarp: readonly number[];
  readonly matrices: readonly MatrixPlan[];
  /** Transposed copies (matrix numbers `matrices.length + k`), dealt after every plan matrix; empty when none fit. */
  readonly transposed: readonly TransposedPlan[];
  readonly slots: readonly SlotLayout[];
  /** Plan matrices kept off chip (placement "off-chip"), by index; empty when every matrix is in registers. */
  readonly offChip: readonly number[];
  /** Floats in the parameter buffer (master copies of all matrices, each aligned to 32 floats). */
  readonly masterFloats: number;
}
