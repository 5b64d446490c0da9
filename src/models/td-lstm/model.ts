import type { Vocabulary } from "../../data/vocab.js";
import type { ComputationGraph, Expression } from "../../graph/graph.js";
import type { LookupParameter, Parameter, ParameterShape } from "../../model/parameters.js";
import { ParameterCollection } from "../../model/parameters.js";
import { cellNode0, cellNode2 } from "../../ops/cells.js";
import { affine5Node, affineNode } from "../../ops/linear.js";
import { lookupNode, pickRangeNode } from "../../ops/structure.js";
import { shapesOf } from "../shared/parameter-sizes.js";
import { reducePyramid } from "../shared/pyramid.js";
import { RootLabelHead, rootHeadSizes, SST_LABELS } from "../shared/root-head.js";
import type { Sentence } from "../shared/sst-data.js";
import { WordIndexCache } from "../shared/word-indices.js";

export interface TdLstmOptions {
  vocabSize: number;
  /** Word embedding size (the paper: 256). */
  embed: number;
  /** Hidden size (the paper: 256). */
  hidden: number;
  /** Number of sentence labels (SST: 5). */
  labels?: number;
  seed?: number;
}

/**
 * TD-LSTM (VPPS paper §IV-E): the TD-RNN's pyramid with the binary Tree-LSTM cell as its composition. A leaf is
 * [h; c] = lstmCell(W_leaf·e + b_leaf) (gates [i; o; u]); the node over adjacent nodes l, r of the level below has
 * gates U_l·h_l + U_r·h_r + b_node ([i; o; u; f_l; f_r], one forget gate per side) and memories c_l, c_r. An MLP on
 * the root's h predicts the sentence's label.
 */
export class TdLstmModel {
  readonly params: ParameterCollection;
  readonly E: LookupParameter;
  readonly W_leaf: Parameter;
  readonly b_leaf: Parameter;
  readonly U_l: Parameter;
  readonly U_r: Parameter;
  readonly b_node: Parameter;
  readonly head: RootLabelHead;
  readonly hidden: number;
  readonly embed: number;
  readonly labels: number;
  private readonly words = new WordIndexCache<Sentence>();
  /** Every node's h and c (node ids) by handle, and the pyramid's current level (handles); reused. */
  private readonly hs: number[] = [];
  private readonly cs: number[] = [];
  private readonly level: number[] = [];

  constructor(opts: TdLstmOptions) {
    this.hidden = opts.hidden;
    this.embed = opts.embed;
    this.labels = opts.labels ?? SST_LABELS;
    const s = tdLstmSizes(opts.vocabSize, this.embed, this.hidden, this.labels);
    const pc = new ParameterCollection({ seed: opts.seed ?? 1 });
    this.params = pc;
    this.E = pc.addLookupParameters(s.E[0], s.E[1], undefined, "E");
    this.W_leaf = pc.addParameters(s.W_leaf, undefined, "W_leaf");
    this.b_leaf = pc.addParameters(s.b_leaf, undefined, "b_leaf");
    this.U_l = pc.addParameters(s.U_l, undefined, "U_l");
    this.U_r = pc.addParameters(s.U_r, undefined, "U_r");
    this.b_node = pc.addParameters(s.b_node, undefined, "b_node");
    this.head = new RootLabelHead(pc, this.hidden, this.labels);
  }

  /** The summed root loss of a batch of sentences (one graph, renewed by the caller). */
  buildBatchLoss(cg: ComputationGraph, sentences: readonly Sentence[], vocab: Vocabulary): Expression {
    return this.head.batchLoss(cg, sentences, (s) => this.addSentence(cg, s, vocab));
  }

  /** The root's class scores of one sentence (forward only). */
  buildScores(cg: ComputationGraph, sentence: Sentence, vocab: Vocabulary): Expression {
    return this.head.scoresExpression(cg, this.addSentence(cg, sentence, vocab));
  }

  /** Adds a sentence's pyramid (node builders) and returns the root's h node: the leaf's for a one-word sentence. */
  addSentence(cg: ComputationGraph, sentence: Sentence, vocab: Vocabulary): number {
    const H = this.hidden;
    const words = sentence.words;
    const indices = this.words.of(sentence, vocab);
    const { hs, cs, level } = this;
    hs.length = 0;
    cs.length = 0;
    level.length = 0;
    const bLeaf = cg.parameterNode(this.b_leaf);
    const WLeaf = cg.parameterNode(this.W_leaf);
    for (let i = 0; i < words.length; i++) {
      const x = lookupNode(cg, this.E, indices.index(i, words[i]!));
      const hc = cellNode0(cg, affineNode(cg, bLeaf, WLeaf, x));
      level.push(hs.length);
      hs.push(pickRangeNode(cg, hc, 0, H));
      cs.push(pickRangeNode(cg, hc, H, 2 * H));
    }
    const b = cg.parameterNode(this.b_node);
    const Ul = cg.parameterNode(this.U_l);
    const Ur = cg.parameterNode(this.U_r);
    const root = reducePyramid(level, (l, r) => {
      const hc = cellNode2(cg, affine5Node(cg, b, Ul, hs[l]!, Ur, hs[r]!), cs[l]!, cs[r]!);
      hs.push(pickRangeNode(cg, hc, 0, H));
      cs.push(pickRangeNode(cg, hc, H, 2 * H));
      return hs.length - 1;
    });
    return hs[root]!;
  }
}

/** The shape of every parameter, by name, in the order the constructor creates them (E is the lookup table). */
function tdLstmSizes(vocabSize: number, embed: number, hidden: number, labels: number) {
  return {
    E: [vocabSize, embed],
    W_leaf: [3 * hidden, embed],
    b_leaf: [3 * hidden],
    U_l: [5 * hidden, hidden],
    U_r: [5 * hidden, hidden],
    b_node: [5 * hidden],
    ...rootHeadSizes(hidden, hidden, labels),
  } as const;
}

/** The shapes of a `TdLstmModel`'s parameters, in its order, without allocating them (`vpps plan`). */
export function tdLstmParameterShapes(opts: Omit<TdLstmOptions, "seed">): ParameterShape[] {
  return shapesOf(tdLstmSizes(opts.vocabSize, opts.embed, opts.hidden, opts.labels ?? SST_LABELS));
}
