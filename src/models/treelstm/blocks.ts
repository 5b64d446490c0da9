/**
 * The fused-cell Tree-LSTM's nodes of one tree node, written straight into the graph's arrays: a leaf's 7 nodes or
 * an internal node's 10, the very nodes (op, shape, arguments, attributes, depth, value offset) the node builders
 * write (test/treelstm-blocks.test.ts compares the two node for node). A batch of 128 SST trees has about 43,000
 * nodes; through the builders each costs a call, its shape checks and a load of every graph array, while here the
 * arrays are loaded once per block and every shape is a constant of the model (the model's parameters fit each
 * other by construction). What varies per tree node — the word's row, the label — the caller checks before it
 * writes a tree this way (TreeLstmModel.addTree), and it uses the builders, with their messages, where a check
 * fails.
 */
import type { ComputationGraph } from "../../graph/graph.js";
import { Op } from "../../graph/opcodes.js";

/** The model's sizes and the nodes of its parameters in the graph being built (all present in its generation). */
export interface BlockParams {
  /** Hidden size H, embedding size D, number of labels, and the lookup table's parameter index. */
  readonly H: number;
  readonly D: number;
  readonly labels: number;
  readonly table: number;
  readonly bIou: number;
  readonly WIou: number;
  readonly UIou: number;
  readonly bF: number;
  readonly UF1: number;
  readonly UF2: number;
  readonly bOut: number;
  readonly WOut: number;
}

/**
 * A leaf: x = lookup(E, row); g = affine(b_iou, W_iou, x); hc = lstmCell(g); h = hc[0:H]; c = hc[H:2H];
 * s = affine(b_out, W_out, h); loss = pickNegLogSoftmax(s, label). Leaves h and c at hs[sp] and cs[sp]; returns
 * the loss node (s is the node before it).
 */
export function leafBlock(
  cg: ComputationGraph,
  p: BlockParams,
  row: number,
  label: number,
  hs: Int32Array,
  cs: Int32Array,
  sp: number,
): number {
  cg.ensureRoom(7, 10);
  const { op, rows, cols, argStart, argCount, aux, aux2, auxF, depth, valueOffset, args } = cg;
  const H = p.H;
  const start = cg.size;
  let id = start;
  let a = cg.argsSize;
  let v = cg.valueSize;
  // the arrays are written node by node in the builders' order (node ids are consecutive from `id`)
  // x = lookup(E, row): depth 0
  op[id] = Op.Lookup;
  rows[id] = p.D;
  argStart[id] = a;
  argCount[id] = 0;
  aux[id] = p.table;
  aux2[id] = row;
  depth[id] = 0;
  valueOffset[id] = v;
  v += p.D;
  // g = affine(b_iou, W_iou, x): depth 1
  args[a] = p.bIou;
  args[a + 1] = p.WIou;
  args[a + 2] = id;
  op[++id] = Op.Affine;
  rows[id] = 3 * H;
  argStart[id] = a;
  argCount[id] = 3;
  aux[id] = 0;
  aux2[id] = 0;
  depth[id] = 1;
  valueOffset[id] = v;
  v += 3 * H;
  a += 3;
  // hc = lstmCell(g), no children: depth 2
  args[a] = id;
  op[++id] = Op.LstmCell;
  rows[id] = 2 * H;
  argStart[id] = a;
  argCount[id] = 1;
  aux[id] = 0;
  aux2[id] = 0;
  depth[id] = 2;
  valueOffset[id] = v;
  v += 2 * H;
  a += 1;
  const hc = id;
  // h = hc[0:H], c = hc[H:2H]: depth 3
  args[a] = hc;
  op[++id] = Op.PickRange;
  rows[id] = H;
  argStart[id] = a;
  argCount[id] = 1;
  aux[id] = 0;
  aux2[id] = H;
  depth[id] = 3;
  valueOffset[id] = v;
  v += H;
  a += 1;
  hs[sp] = id;
  args[a] = hc;
  op[++id] = Op.PickRange;
  rows[id] = H;
  argStart[id] = a;
  argCount[id] = 1;
  aux[id] = H;
  aux2[id] = 2 * H;
  depth[id] = 3;
  valueOffset[id] = v;
  v += H;
  a += 1;
  cs[sp] = id;
  // s = affine(b_out, W_out, h), loss = pickNegLogSoftmax(s, label)
  args[a] = p.bOut;
  args[a + 1] = p.WOut;
  args[a + 2] = id - 1;
  op[++id] = Op.Affine;
  rows[id] = p.labels;
  argStart[id] = a;
  argCount[id] = 3;
  aux[id] = 0;
  aux2[id] = 0;
  depth[id] = 4;
  valueOffset[id] = v;
  v += p.labels;
  a += 3;
  args[a] = id;
  op[++id] = Op.PickNegLogSoftmax;
  rows[id] = 1;
  argStart[id] = a;
  argCount[id] = 1;
  aux[id] = label;
  aux2[id] = 0;
  depth[id] = 5;
  valueOffset[id] = v;
  v += 1;
  a += 1;
  for (let k = start; k <= id; k++) {
    cols[k] = 1;
    auxF[k] = 0;
  }
  cg.size = id + 1;
  cg.argsSize = a;
  cg.valueSize = v;
  return id;
}

/**
 * An internal node whose children's (h, c) are at hs/cs[sp] (left) and [sp + 1] (right): h12 = [h₁; h₂];
 * iou = affine(b_iou, U_iou, h12); f₁ = affine(b_f, U_f1, h₁); f₂ = affine(b_f, U_f2, h₂);
 * hc = lstmCell([iou; f₁; f₂], c₁, c₂); h = hc[0:H]; c = hc[H:2H]; then its loss as a leaf's. Leaves h and c at
 * hs[sp] and cs[sp]; returns the loss node (its scores are the node before it).
 */
export function nodeBlock(
  cg: ComputationGraph,
  p: BlockParams,
  label: number,
  hs: Int32Array,
  cs: Int32Array,
  sp: number,
): number {
  cg.ensureRoom(10, 23);
  const { op, rows, cols, argStart, argCount, aux, aux2, auxF, depth, valueOffset, args } = cg;
  const H = p.H;
  const h1 = hs[sp]!;
  const h2 = hs[sp + 1]!;
  const c1 = cs[sp]!;
  const c2 = cs[sp + 1]!;
  const d1 = depth[h1]!;
  const d2 = depth[h2]!;
  const dm = Math.max(d1, d2);
  const start = cg.size;
  let id = start;
  let a = cg.argsSize;
  let v = cg.valueSize;
  // h12 = [h1; h2]
  args[a] = h1;
  args[a + 1] = h2;
  op[id] = Op.Concat;
  rows[id] = 2 * H;
  argStart[id] = a;
  argCount[id] = 2;
  depth[id] = dm + 1;
  valueOffset[id] = v;
  v += 2 * H;
  a += 2;
  // iou = affine(b_iou, U_iou, h12)
  args[a] = p.bIou;
  args[a + 1] = p.UIou;
  args[a + 2] = id;
  op[++id] = Op.Affine;
  rows[id] = 3 * H;
  argStart[id] = a;
  argCount[id] = 3;
  depth[id] = dm + 2;
  valueOffset[id] = v;
  v += 3 * H;
  a += 3;
  // f1 = affine(b_f, U_f1, h1), f2 = affine(b_f, U_f2, h2)
  args[a] = p.bF;
  args[a + 1] = p.UF1;
  args[a + 2] = h1;
  op[++id] = Op.Affine;
  rows[id] = H;
  argStart[id] = a;
  argCount[id] = 3;
  depth[id] = d1 + 1;
  valueOffset[id] = v;
  v += H;
  a += 3;
  args[a] = p.bF;
  args[a + 1] = p.UF2;
  args[a + 2] = h2;
  op[++id] = Op.Affine;
  rows[id] = H;
  argStart[id] = a;
  argCount[id] = 3;
  depth[id] = d2 + 1;
  valueOffset[id] = v;
  v += H;
  a += 3;
  // gates = [iou; f1; f2] (iou is the deepest of the three)
  args[a] = id - 2;
  args[a + 1] = id - 1;
  args[a + 2] = id;
  op[++id] = Op.Concat;
  rows[id] = 5 * H;
  argStart[id] = a;
  argCount[id] = 3;
  depth[id] = dm + 3;
  valueOffset[id] = v;
  v += 5 * H;
  a += 3;
  // hc = lstmCell(gates, c1, c2)
  let dc = dm + 3;
  const e1 = depth[c1]!;
  const e2 = depth[c2]!;
  if (e1 > dc) dc = e1;
  if (e2 > dc) dc = e2;
  dc++;
  args[a] = id;
  args[a + 1] = c1;
  args[a + 2] = c2;
  op[++id] = Op.LstmCell;
  rows[id] = 2 * H;
  argStart[id] = a;
  argCount[id] = 3;
  depth[id] = dc;
  valueOffset[id] = v;
  v += 2 * H;
  a += 3;
  const hc = id;
  // h = hc[0:H], c = hc[H:2H]
  args[a] = hc;
  op[++id] = Op.PickRange;
  rows[id] = H;
  argStart[id] = a;
  argCount[id] = 1;
  depth[id] = dc + 1;
  valueOffset[id] = v;
  v += H;
  a += 1;
  hs[sp] = id;
  args[a] = hc;
  op[++id] = Op.PickRange;
  rows[id] = H;
  argStart[id] = a;
  argCount[id] = 1;
  depth[id] = dc + 1;
  valueOffset[id] = v;
  v += H;
  a += 1;
  cs[sp] = id;
  // s = affine(b_out, W_out, h), loss = pickNegLogSoftmax(s, label)
  args[a] = p.bOut;
  args[a + 1] = p.WOut;
  args[a + 2] = id - 1;
  op[++id] = Op.Affine;
  rows[id] = p.labels;
  argStart[id] = a;
  argCount[id] = 3;
  depth[id] = dc + 2;
  valueOffset[id] = v;
  v += p.labels;
  a += 3;
  args[a] = id;
  op[++id] = Op.PickNegLogSoftmax;
  rows[id] = 1;
  argStart[id] = a;
  argCount[id] = 1;
  depth[id] = dc + 3;
  valueOffset[id] = v;
  v += 1;
  a += 1;
  for (let k = start; k <= id; k++) {
    cols[k] = 1;
    aux[k] = 0;
    aux2[k] = 0;
    auxF[k] = 0;
  }
  aux[hc] = 2; // two children
  aux2[hc + 1] = H;
  aux[hc + 2] = H;
  aux2[hc + 2] = 2 * H;
  aux[id] = label;
  cg.size = id + 1;
  cg.argsSize = a;
  cg.valueSize = v;
  return id;
}

/**
 * sum(losses) of one tree, its `n` loss nodes at `ids[from…from + n)` in post-order (the root's last): the node
 * `sumNode` writes, without reading each loss node's shape and depth back from the graph (1×1 pickNegLogSoftmax
 * nodes by construction; the root's is the deepest, its tree node's h being deeper than every other's). In a batch
 * written by height those nodes are scattered over the graph, and the reads were a cache miss each.
 */
export function lossSumBlock(cg: ComputationGraph, ids: Int32Array, from: number, n: number): number {
  cg.ensureRoom(1, n);
  const id = cg.size;
  const a = cg.argsSize;
  cg.args.set(ids.subarray(from, from + n), a);
  cg.op[id] = Op.Sum;
  cg.rows[id] = 1;
  cg.cols[id] = 1;
  cg.argStart[id] = a;
  cg.argCount[id] = n;
  cg.aux[id] = 0;
  cg.aux2[id] = 0;
  cg.auxF[id] = 0;
  cg.depth[id] = cg.depth[ids[from + n - 1]!]! + 1;
  cg.valueOffset[id] = cg.valueSize;
  cg.size = id + 1;
  cg.argsSize = a + n;
  cg.valueSize += 1;
  return id;
}
