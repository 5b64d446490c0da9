import { type ComputationGraph, Expression, ShapeError } from "../graph/graph.js";
import { Op } from "../graph/opcodes.js";
import {
  argBuffer,
  type Buf,
  type ExprLike,
  exprNode,
  nodeOf,
  notExpression,
  type OpDefinition,
  type OpFamily,
  requireArray,
  requireVector,
} from "./common.js";
import {
  addMasked,
  applyMask,
  keptPerRow,
  PRUNING_MODES,
  type PruningMode,
  pruneKeeping,
  type WeightMask,
} from "./prune.js";
import {
  checkBatchSizes,
  gatesOf,
  inputProjection,
  inputProjectionBackward,
  RNN_CELLS,
  type RnnCell,
  recurrentBackward,
  recurrentForward,
  savedPerUnit,
} from "./recurrent.js";

/*
 * The recurrent layer as one graph op over a packed batch (PyTorch's PackedSequence, enforce_sorted):
 *   y = [h_fwd | h_bwd] (the matrix [N, D·H], row n = packed row n: the rows the row-batch ops of rows.ts take;
 *   `flatten` makes it the vector of N·D·H values),
 * one layer of `cell` in one or two directions from zero initial states, over x (the matrix [N, in], or the same
 * values as a vector of N·in, the rows of step t contiguous, sequence b's row at step t = offset(t) + b). The math is src/ops/recurrent.ts (the
 * same code as the persistent layer's CPU reference, src/rnn/reference/reference.ts).
 *
 * Node layout: args [x, batchSizes (an input node of T values), then per direction W_ih, W_hh, b_ih and optionally
 * b_hh]; aux = the cell's index in RNN_CELLS + RNN_CELLS.length × the pruning's index in PRUNING_MODES; aux2 = D;
 * auxF = the weights each row of W_hh keeps (0: dense). Without b_hh (cuDNN's single-bias mode) the op reads it
 * as zero: a model whose LSTM has one bias per gate (the taggers) keeps its parameters.
 *
 * Pruned (sparse) W_hh: with `density` d < 1 each direction's recurrent product uses W_hh ⊙ M, M the magnitude
 * pruning of W_hh's current values (src/ops/prune.ts: k = max(1, round(d·H)) per row, or k·G·H in all for `plain`),
 * and dW_hh = M ⊙ (the dense gradient). The mask is a function of the weights, re-derived at every forward: W_hh stays
 * the dense master copy (pruned weights keep their values and take no part), every engine derives the same mask, and
 * a checkpoint needs nothing besides the weights. The gradient is that of the function almost everywhere (M is
 * constant wherever no two |w| at a row's boundary are equal).
 */

/** One direction's weights (PyTorch's shapes): W_ih [G·H, in], W_hh [G·H, H], b_ih [G·H], b_hh [G·H] (optional). */
export interface RnnOpWeights {
  readonly W_ih: ExprLike;
  readonly W_hh: ExprLike;
  readonly b_ih: ExprLike;
  readonly b_hh?: ExprLike;
}

/** The op's pruning of W_hh: `density` in (0, 1] (default 1: dense), `pruning` row-balanced (default) or plain. */
export interface RnnOpSparsity {
  readonly density?: number;
  readonly pruning?: PruningMode;
}

const OP = "rnn";

/**
 * y = the hidden states [N, D·H] of one recurrent layer (D = directions.length, 1 or 2: forward, then backward) over
 * the packed batch x ([N, in], or its N·in values as a vector) with these batch sizes, from zero initial states;
 * with `sparsity.density` < 1, each W_hh pruned by magnitude (see the top of this file).
 */
export function rnn(
  x: Expression,
  batchSizes: ArrayLike<number>,
  cell: RnnCell,
  directions: readonly RnnOpWeights[],
  sparsity: RnnOpSparsity = {},
): Expression {
  if (!(x instanceof Expression)) throw notExpression(OP, "x", x);
  const g = x.graph;
  const xi = exprNode(g, x, OP, "x");
  if (typeof cell !== "string" || !(RNN_CELLS as readonly string[]).includes(cell)) {
    throw new ShapeError(`${OP}: argument 'cell' must be one of ${RNN_CELLS.join(", ")}; got ${String(cell)}`);
  }
  requireArray(directions, OP, "directions", "one or two {W_ih, W_hh, b_ih, b_hh?}");
  const D = directions.length;
  if (D !== 1 && D !== 2) throw new ShapeError(`${OP}: argument 'directions' must hold 1 or 2 directions; got ${D}`);
  let n: number;
  try {
    n = checkBatchSizes(batchSizes, OP);
  } catch (e) {
    throw new ShapeError((e as Error).message);
  }
  const P = directions[0]!.b_hh === undefined ? 3 : 4;
  const args = argBuffer(2 + D * P);
  args[0] = xi;
  const G = gatesOf(cell);
  let H = -1;
  let inputSize = -1;
  for (let d = 0; d < D; d++) {
    const w = directions[d]!;
    const at = (name: string) => `directions[${d}].${name}`;
    if ((w.b_hh === undefined ? 3 : 4) !== P) {
      throw new ShapeError(`${OP}: argument '${at("b_hh")}' must be given for every direction or for none`);
    }
    const wih = nodeOf(g, w.W_ih, OP, at("W_ih"));
    const whh = nodeOf(g, w.W_hh, OP, at("W_hh"));
    if (H < 0) {
      H = g.cols[whh]!;
      inputSize = g.cols[wih]!;
    }
    const shape = (id: number, name: string, rows: number, cols: number): void => {
      if (g.rows[id] !== rows || g.cols[id] !== cols) {
        throw new ShapeError(
          `${OP}: argument '${at(name)}' has shape ${g.shapeOf(id)}; a ${cell} of hidden size ${H} over inputs of ` +
            `${inputSize} needs [${rows},${cols}]`,
        );
      }
    };
    shape(whh, "W_hh", G * H, H);
    shape(wih, "W_ih", G * H, inputSize);
    args[2 + d * P] = wih;
    args[3 + d * P] = whh;
    const bias = (b: ExprLike, name: string, k: number): void => {
      const id = nodeOf(g, b, OP, at(name));
      const len = requireVector(g, id, OP, at(name));
      if (len !== G * H)
        throw new ShapeError(`${OP}: argument '${at(name)}' has length ${len}; expected G·H = ${G * H}`);
      args[2 + d * P + k] = id;
    };
    bias(w.b_ih, "b_ih", 2);
    if (w.b_hh !== undefined) bias(w.b_hh, "b_hh", 3);
  }
  if (g.cols[xi] === 1) {
    const len = g.rows[xi]!;
    if (len !== n * inputSize) {
      throw new ShapeError(
        `${OP}: argument 'x' has length ${len}; batchSizes give N = ${n} rows of ${inputSize} inputs = ${n * inputSize}`,
      );
    }
  } else if (g.rows[xi] !== n || g.cols[xi] !== inputSize) {
    throw new ShapeError(
      `${OP}: argument 'x' has shape ${g.shapeOf(xi)}; batchSizes give N = ${n} rows of ${inputSize} inputs: ` +
        `[${n},${inputSize}] (or a vector of ${n * inputSize} values)`,
    );
  }
  const { kept, pruning } = sparsityOf(sparsity, H);
  const off = g.addInputData(Float32Array.from(batchSizes));
  args[1] = g.addNode0(Op.Input, batchSizes.length, 1, off);
  const aux = RNN_CELLS.indexOf(cell) + RNN_CELLS.length * PRUNING_MODES.indexOf(pruning);
  const id = g.addNode(Op.Rnn, n, D * H, args, aux, D, kept, 2 + D * P);
  return new Expression(g, id, g.generation);
}

/** The node's attributes `density` and `pruning` checked: the weights kept per row (0: dense) and the pruning. */
function sparsityOf(sparsity: RnnOpSparsity, H: number): { kept: number; pruning: PruningMode } {
  if (typeof sparsity !== "object" || sparsity === null) {
    throw new ShapeError(`${OP}: argument 'sparsity' must be an object {density?, pruning?}; got ${String(sparsity)}`);
  }
  const { density = 1, pruning = "row-balanced" } = sparsity;
  if (typeof density !== "number" || !(density > 0 && density <= 1)) {
    throw new ShapeError(
      `${OP}: argument 'density' must be a number in (0, 1] (the fraction of W_hh kept; 1 = dense); got ${String(density)}`,
    );
  }
  if (!(PRUNING_MODES as readonly string[]).includes(pruning)) {
    throw new ShapeError(
      `${OP}: argument 'pruning' must be one of ${PRUNING_MODES.join(", ")}; got ${JSON.stringify(pruning) ?? String(pruning)}`,
    );
  }
  const kept = keptPerRow(density, H);
  return { kept: kept === H ? 0 : kept, pruning };
}

/** The decoded attributes of an rnn node. */
export interface RnnNode {
  readonly cell: RnnCell;
  readonly directions: number;
  readonly hidden: number;
  readonly inputSize: number;
  /** N. */
  readonly rows: number;
  readonly batchSizes: Int32Array;
  /** Per direction, the node ids of W_ih, W_hh, b_ih and b_hh (−1 when absent). */
  readonly weights: readonly {
    readonly W_ih: number;
    readonly W_hh: number;
    readonly b_ih: number;
    readonly b_hh: number;
  }[];
  /** W_hh's pruning: the weights kept per row (row-balanced; k·G·H in all for plain), or null when dense. */
  readonly sparsity: { readonly kept: number; readonly pruning: PruningMode; readonly density: number } | null;
}

/** Node i's attributes (engines read the op through this, never through its argument positions). */
export function rnnNode(g: ComputationGraph, i: number): RnnNode {
  const D = g.aux2[i]!;
  const P = (g.argCount[i]! - 2) / D;
  const sizes = g.arg(i, 1);
  const T = g.rows[sizes]!;
  const off = g.aux[sizes]!;
  const batchSizes = Int32Array.from(g.inputData.subarray(off, off + T));
  const weights = [];
  for (let d = 0; d < D; d++) {
    const a = 2 + d * P;
    weights.push({
      W_ih: g.arg(i, a),
      W_hh: g.arg(i, a + 1),
      b_ih: g.arg(i, a + 2),
      b_hh: P === 4 ? g.arg(i, a + 3) : -1,
    });
  }
  const whh = weights[0]!.W_hh;
  const H = g.cols[whh]!;
  const aux = g.aux[i]!;
  const kept = g.auxF[i]!;
  return {
    cell: RNN_CELLS[aux % RNN_CELLS.length]!,
    directions: D,
    hidden: H,
    inputSize: g.cols[weights[0]!.W_ih]!,
    rows: g.rows[i]!,
    batchSizes,
    weights,
    sparsity:
      kept > 0 ? { kept, pruning: PRUNING_MODES[Math.floor(aux / RNN_CELLS.length)]!, density: kept / H } : null,
  };
}

/** The mask of an rnn node's W_hh values `w` ([G·H, H]), or null when the node is dense. */
export function rnnNodeMask(r: RnnNode, w: Buf): WeightMask | null {
  if (!r.sparsity) return null;
  return pruneKeeping(w, gatesOf(r.cell) * r.hidden, r.hidden, r.sparsity.kept, r.sparsity.pruning);
}

const view = <T extends Buf>(b: T, at: number, n: number): T => b.subarray(at, at + n) as T;
const zerosLike = <T extends Buf>(b: T, n: number): T => new (b.constructor as new (n: number) => T)(n);

/**
 * One direction's forward into scratch (or into y's columns), returning its input projection, saved values, and
 * the W_hh it multiplied by with its mask (W_hh ⊙ mask when pruned).
 */
function runDirection<T extends Buf>(g: ComputationGraph, i: number, r: RnnNode, d: number, v: T, y: T) {
  const { hidden: H, rows: N, inputSize: S } = r;
  const w = r.weights[d]!;
  const GH = gatesOf(r.cell) * H;
  const whh = view(v, g.valueOffset[w.W_hh]!, GH * H);
  const mask = rnnNodeMask(r, whh);
  const wRec = mask ? applyMask(whh, mask) : whh;
  const xW = zerosLike(v, N * GH);
  inputProjection(
    view(v, g.valueOffset[g.arg(i, 0)]!, N * S),
    S,
    N,
    S,
    view(v, g.valueOffset[w.W_ih]!, GH * S),
    view(v, g.valueOffset[w.b_ih]!, GH),
    xW,
  );
  const bHh = w.b_hh >= 0 ? view(v, g.valueOffset[w.b_hh]!, GH) : zerosLike(v, GH);
  const B = r.batchSizes[0]!;
  const out = {
    y,
    yStride: r.directions * H,
    hn: zerosLike(v, B * H),
    cn: r.cell === "lstm" ? zerosLike(v, B * H) : null,
    saved: zerosLike(v, N * savedPerUnit(r.cell) * H),
  };
  const layer = { cell: r.cell, hidden: H, batchSizes: r.batchSizes, reverse: d === 1 };
  recurrentForward(layer, xW, wRec, bHh, null, null, out);
  return { layer, xW, saved: out.saved, wRec, mask };
}

const rnnOp: OpDefinition = {
  // every rnn node is a batch of its own (a whole packed batch already)
  signature(_g, i, key) {
    key[1] = i;
    return 2;
  },
  forward(g, i, v) {
    const r = rnnNode(g, i);
    const y = g.valueOffset[i]!;
    for (let d = 0; d < r.directions; d++) runDirection(g, i, r, d, v, v.subarray(y + d * r.hidden) as typeof v);
  },
  // the forward is recomputed (the graph keeps only y); the recomputed y equals the stored one bit for bit
  backward(g, i, v, dv) {
    const r = rnnNode(g, i);
    const { hidden: H, rows: N, inputSize: S, directions: D } = r;
    const GH = gatesOf(r.cell) * H;
    const y = g.valueOffset[i]!;
    const x = g.valueOffset[g.arg(i, 0)]!;
    const B = r.batchSizes[0]!;
    for (let d = 0; d < D; d++) {
      const w = r.weights[d]!;
      const scratchY = zerosLike(v, N * D * H);
      const f = runDirection(g, i, r, d, v, scratchY.subarray(d * H) as typeof v);
      const dxW = zerosLike(v, N * GH);
      const dWhh = view(dv, g.valueOffset[w.W_hh]!, GH * H);
      // a pruned W_hh's gradient goes through scratch, then only its kept entries into the node's gradient
      const dWrec = f.mask ? zerosLike(v, GH * H) : dWhh;
      recurrentBackward(
        f.layer,
        f.wRec,
        {
          y: v.subarray(y + d * H) as typeof v,
          yStride: D * H,
          saved: f.saved,
          h0: null,
          c0: null,
          dy: dv.subarray(y + d * H) as typeof v,
          dyStride: D * H,
          dhn: null,
          dcn: null,
        },
        {
          dxW,
          dWhh: dWrec,
          dbHh: w.b_hh >= 0 ? view(dv, g.valueOffset[w.b_hh]!, GH) : zerosLike(v, GH),
          dh0: zerosLike(v, B * H),
          dc0: r.cell === "lstm" ? zerosLike(v, B * H) : null,
        },
      );
      if (f.mask) addMasked(dWhh, dWrec, f.mask);
      inputProjectionBackward(
        dxW,
        view(v, x, N * S),
        S,
        N,
        S,
        view(v, g.valueOffset[w.W_ih]!, GH * S),
        view(dv, x, N * S),
        S,
        view(dv, g.valueOffset[w.W_ih]!, GH * S),
        view(dv, g.valueOffset[w.b_ih]!, GH),
      );
    }
  },
};

/** The recurrent op's definition (its part of the registry, src/ops/registry.ts). */
export const RECURRENT_OPS = { [Op.Rnn]: rnnOp } satisfies OpFamily;
