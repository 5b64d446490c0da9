/**
 * The CUDA of the recurrent kernels. The persistent ones are generated per (cell, hidden, kind, precision) from a plan
 * (plan/). One launch runs a whole layer direction: each CTA loads its block of the recurrent matrix into
 * registers once and keeps it for every step.
 *
 * Steps hand data to each other without a grid barrier: the vector a step reads (h(t−1) forward, the gate gradients
 * of the step processed before backward) is written by the other CTAs into a buffer the host filled with −0.0, and a
 * reader polls each value until it is not −0.0 (the sparse persistent RNN paper's Lamport-style flags, DESIGN §7);
 * writers turn a −0.0 result into +0.0. That saves the barrier's two extra L2 round trips per step. Polls are
 * bounded: a value that never arrives (a failed CTA, CTAs that are not co-resident) ends the launch with an error in
 * the status block (src/codegen/grid-barrier.ts) instead of a hang.
 *
 * Layouts (docs/RNN.md): packed batches (PyTorch PackedSequence: batchSizes non-increasing, rows of step t at
 * offsets[t] … offsets[t] + batchSizes[t] − 1); PyTorch gate order (LSTM i, f, g, o; GRU r, z, n); W_hh [G·H, H]
 * row-major. `xw` is the input projection of every row, x·W_ihᵀ + b_ih + b_hh (GRU: without b_hn, which stays
 * inside r ⊙ (W_hn h + b_hn)).
 */
// This room: cells/ (each cell's pointwise math, one file per cell, and what a kernel renders it through),
// params.ts (each kernel's parameter table), kernel-options.ts and prelude.ts (what every module shares),
// vector-loads.ts (the polled loads of a step's vector, whatever holds the matrix), dense-*.ts (the dense persistent
// kernels: register mat-vec, forward, backward, their pipelined loops, shared memory), stepwise.ts (the
// non-persistent path's element-wise kernels), sparse-*.ts (the sparse persistent kernels: pairs in registers, the
// shared product and its ladder of build options in sparse-product.ts), rendering the same cells.
export { CELLS, type CellCode, savedFloats } from "./cells/index.js";
export { backwardKernelSource } from "./dense-backward.js";
export { forwardKernelSource } from "./dense-forward.js";
export { groupRows, sharedBytes } from "./dense-shared-memory.js";
export {
  clustered,
  clusterSize,
  MULTICAST_MIN_WEIGHT_REGISTERS,
  multicastPays,
  PENDING_BITS,
  PHASE_GLOBAL,
  PHASE_MAX_CTAS,
  PHASE_NAMES,
  POLL_SPIN_LIMIT,
  RNN_ERRORS,
  RNN_KERNEL_NAMES,
  type RnnKernelOptions,
} from "./kernel-options.js";
export {
  type KernelArgRecord,
  kernelArgs,
  type ParamTable,
  PERSISTENT_BACKWARD_PARAMS,
  PERSISTENT_FORWARD_PARAMS,
  SPARSE_BACKWARD_PARAMS,
  SPARSE_FORWARD_PARAMS,
  STEPWISE_BACKWARD_PARAMS,
  STEPWISE_FORWARD_PARAMS,
} from "./params.js";
export { TMA_CUDA } from "./prelude.js";
export { sparseBackwardSource } from "./sparse-backward.js";
export { sparseForwardSource } from "./sparse-forward.js";
export {
  exchangeShape,
  indexWords,
  SPARSE_KERNEL_NAMES,
  SPARSE_LADDER,
  type SparseKernelOptions,
  type SparseRung,
  type SparseSync,
  sparseSharedBytes,
} from "./sparse-product.js";
export { STEPWISE_KERNEL_NAMES, stepwiseKernelSource } from "./stepwise.js";
