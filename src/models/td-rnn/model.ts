import type { Vocabulary } from "../../data/vocab.js";
import { type ComputationGraph, type Expression, ShapeError } from "../../graph/graph.js";
import { Op } from "../../graph/opcodes.js";
import type { LookupParameter, Parameter, ParameterShape } from "../../model/parameters.js";
import { ParameterCollection } from "../../model/parameters.js";
import { unaryNode } from "../../ops/elementwise.js";
import { affine5Node } from "../../ops/linear.js";
import { lookupNode } from "../../ops/structure.js";
import { shapesOf } from "../shared/parameter-sizes.js";
import { reducePyramid } from "../shared/pyramid.js";
import { RootLabelHead, rootHeadSizes, SST_LABELS } from "../shared/root-head.js";
import type { Sentence } from "../shared/sst-data.js";
import { WordIndexCache } from "../shared/word-indices.js";

export interface TdRnnOptions {
  vocabSize: number;
  /** Hidden size = word embedding size (the paper: 512). */
  hidden: number;
  /** Word embedding size; must equal `hidden` (one composition reads both). Default: `hidden`. */
  embed?: number;
  /** Number of sentence labels (SST: 5). */
  labels?: number;
  seed?: number;
}

/**
 * TD-RNN (VPPS paper §IV-E): the sentence's word embeddings are combined level by level, each adjacent pair by one
 * shared composition x' = tanh(W_L·x_i + W_R·x_{i+1} + b), until one vector remains (a pyramid: n words, n(n−1)/2
 * compositions, each inner vector read by two parents); an MLP on it predicts the sentence's label.
 */
export class TdRnnModel {
  readonly params: ParameterCollection;
  readonly E: LookupParameter;
  readonly W_L: Parameter;
  readonly W_R: Parameter;
  readonly b: Parameter;
  readonly head: RootLabelHead;
  readonly hidden: number;
  readonly embed: number;
  readonly labels: number;
  private readonly words = new WordIndexCache<Sentence>();
  /** The pyramid's current level (node ids), reused. */
  private readonly level: number[] = [];

  constructor(opts: TdRnnOptions) {
    this.hidden = opts.hidden;
    this.embed = opts.embed ?? opts.hidden;
    this.labels = opts.labels ?? SST_LABELS;
    const s = tdRnnSizes(opts.vocabSize, this.embed, this.hidden, this.labels);
    const pc = new ParameterCollection({ seed: opts.seed ?? 1 });
    this.params = pc;
    this.E = pc.addLookupParameters(s.E[0], s.E[1], undefined, "E");
    this.W_L = pc.addParameters(s.W_L, undefined, "W_L");
    this.W_R = pc.addParameters(s.W_R, undefined, "W_R");
    this.b = pc.addParameters(s.b, undefined, "b");
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

  /**
   * Adds a sentence's pyramid (node builders: every argument is a node made here or a parameter node) and returns
   * the root vector's node: the embedding itself for a one-word sentence.
   */
  addSentence(cg: ComputationGraph, sentence: Sentence, vocab: Vocabulary): number {
    const words = sentence.words;
    const indices = this.words.of(sentence, vocab);
    const level = this.level;
    level.length = 0;
    for (let i = 0; i < words.length; i++) level.push(lookupNode(cg, this.E, indices.index(i, words[i]!)));
    const b = cg.parameterNode(this.b);
    const WL = cg.parameterNode(this.W_L);
    const WR = cg.parameterNode(this.W_R);
    return reducePyramid(level, (l, r) => unaryNode(cg, Op.Tanh, affine5Node(cg, b, WL, l, WR, r)));
  }
}

/** The shape of every parameter, by name, in the order the constructor creates them (E is the lookup table). */
function tdRnnSizes(vocabSize: number, embed: number, hidden: number, labels: number) {
  if (embed !== hidden) {
    throw new ShapeError(
      `td-rnn: the embedding size (${embed}) must equal the hidden size (${hidden}): one composition reads the ` +
        "word embeddings at the first level and its own outputs above; give --embed and --hidden the same value",
    );
  }
  return {
    E: [vocabSize, embed],
    W_L: [hidden, hidden],
    W_R: [hidden, hidden],
    b: [hidden],
    ...rootHeadSizes(hidden, hidden, labels),
  } as const;
}

/** The shapes of a `TdRnnModel`'s parameters, in its order, without allocating them (`vpps plan`). */
export function tdRnnParameterShapes(opts: Omit<TdRnnOptions, "seed">): ParameterShape[] {
  return shapesOf(tdRnnSizes(opts.vocabSize, opts.embed ?? opts.hidden, opts.hidden, opts.labels ?? SST_LABELS));
}
