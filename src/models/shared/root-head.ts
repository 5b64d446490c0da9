/**
 * The root-label head of the sentence models (TD-RNN, TD-LSTM, RvNN): the root's vector h goes through one MLP layer
 * and an output layer, scores = W_out·tanh(W_mlp·h + b_mlp) + b_out, and the loss is the negative log-softmax of
 * the gold label — one loss per sentence, at the root only (docs/MODELS.md).
 */
import { type ComputationGraph, Expression, ShapeError } from "../../graph/graph.js";
import { Op } from "../../graph/opcodes.js";
import type { Parameter, ParameterCollection } from "../../model/parameters.js";
import { unaryNode } from "../../ops/elementwise.js";
import { affineNode } from "../../ops/linear.js";
import { pickNegLogSoftmaxNode } from "../../ops/loss.js";
import { sumNode } from "../../ops/structure.js";

/** Sentiment classes of the Stanford Sentiment Treebank (0–4): the default number of labels. */
export const SST_LABELS = 5;

/** The head's parameters by name, in creation order (`mlp`: the MLP's width, = the hidden size in these models). */
export function rootHeadSizes(hidden: number, mlp: number, labels: number) {
  return {
    W_mlp: [mlp, hidden],
    b_mlp: [mlp],
    W_out: [labels, mlp],
    b_out: [labels],
  } as const satisfies Record<string, readonly [number] | readonly [number, number]>;
}

export class RootLabelHead {
  readonly W_mlp: Parameter;
  readonly b_mlp: Parameter;
  readonly W_out: Parameter;
  readonly b_out: Parameter;
  /** The root losses of the batch being built (reused). */
  private readonly losses: number[] = [];

  /** Adds the head's parameters to `pc` (after the model's own, so their order is the size table's). */
  constructor(
    pc: ParameterCollection,
    hidden: number,
    readonly labels: number,
  ) {
    const s = rootHeadSizes(hidden, hidden, labels);
    this.W_mlp = pc.addParameters(s.W_mlp, undefined, "W_mlp");
    this.b_mlp = pc.addParameters(s.b_mlp, undefined, "b_mlp");
    this.W_out = pc.addParameters(s.W_out, undefined, "W_out");
    this.b_out = pc.addParameters(s.b_out, undefined, "b_out");
  }

  /** The class scores (before the softmax) of root vector node h: the id of the new node. */
  scores(cg: ComputationGraph, h: number): number {
    const m = affineNode(cg, cg.parameterNode(this.b_mlp), cg.parameterNode(this.W_mlp), h);
    const t = unaryNode(cg, Op.Tanh, m);
    return affineNode(cg, cg.parameterNode(this.b_out), cg.parameterNode(this.W_out), t);
  }

  /** `scores` as an expression (forward-only passes: `buildScores`). */
  scoresExpression(cg: ComputationGraph, h: number): Expression {
    return new Expression(cg, this.scores(cg, h), cg.generation);
  }

  /**
   * The summed loss of a batch: for each example, `root(example)` adds its nodes and returns its root vector's node,
   * and the head adds the loss of the example's label there.
   */
  batchLoss<E extends { readonly label: number }>(
    cg: ComputationGraph,
    examples: readonly E[],
    root: (example: E) => number,
  ): Expression {
    const losses = this.losses;
    losses.length = 0;
    for (let k = 0; k < examples.length; k++) {
      const e = examples[k]!;
      losses.push(pickNegLogSoftmaxNode(cg, this.scores(cg, root(e)), e.label));
    }
    const n = losses.length;
    // (the message sum([]) gives)
    if (n === 0) throw new ShapeError("sum: needs at least one argument");
    return new Expression(cg, n === 1 ? losses[0]! : sumNode(cg, losses, n), cg.generation);
  }
}
