/**
 * The BiLSTM tagger of the DyNet benchmark suite (`bilstm-tagger`): word embeddings → a forward and a backward LSTM
 * over the sentence → per word [f; b] → tanh MLP → tag scores, a softmax loss per word. The exact specification
 * (shared with the PyTorch reference, bench/pytorch/) is in docs/MODELS.md; the character model
 * (../bilstm-char/model.ts) extends this class.
 */
import { type ComputationGraph, Expression, ShapeError } from "../../graph/graph.js";
import { Op } from "../../graph/opcodes.js";
import type { LookupParameter, Parameter, ParameterShape } from "../../model/parameters.js";
import { ParameterCollection } from "../../model/parameters.js";
import { cellNode1 } from "../../ops/cells.js";
import { tanh, unaryNode } from "../../ops/elementwise.js";
import { flatten } from "../../ops/image.js";
import { affine5Node, affineNode } from "../../ops/linear.js";
import { pickNegLogSoftmaxNode } from "../../ops/loss.js";
import { affineRows, lookupRows, pickNegLogSoftmaxRows } from "../../ops/rows.js";
import { concat2Node, input, lookupNode, pickRange, pickRangeNode, sumNode } from "../../ops/structure.js";
import {
  type Packing,
  packedBiLstm,
  packLengths,
  packValues,
  pruneInitialWeights,
  TAGGER_RNNS,
  type TaggerRnn,
} from "./packed.js";

/** A sentence as the network reads it: each word's row of the word table, and each word's tag (to train on it). */
export interface EncodedSentence {
  readonly words: Int32Array;
  /** Tag indices; read only by the loss. */
  readonly tags: Int32Array;
}

/**
 * A sentence as either tagger reads it (`TaggerVocabulary.encode`): the character model also reads, per word, its
 * characters when it is spelled (null: looked up); the word-only tagger ignores them.
 */
export interface SpelledSentence extends EncodedSentence {
  /** Per word: the indices of its characters (code points) when the word is not in the word table, else null. */
  readonly spelled: readonly (Int32Array | null)[];
}

export interface BiLstmTaggerOptions {
  /** Rows of the word table (`<unk>` included). */
  vocabSize: number;
  /** Number of tags (the output classes). */
  tags: number;
  /** Word embedding size (DyNet benchmark: 256). */
  embed: number;
  /** LSTM hidden size per direction (256). */
  hidden: number;
  /** Width of the tanh layer (256). */
  mlp: number;
  seed?: number;
  /**
   * steps (default): an affine and a cell per word; persistent: each batch as a handful of row-batch nodes — the
   * words' rows looked up at once, the BiLSTM as one `rnn` op over the packed batch (gate rows in PyTorch's order,
   * ./packed.ts), the MLP and output layer as affines over all rows, one summed row loss (src/ops/rows.ts).
   */
  rnn?: TaggerRnn;
  /**
   * With `rnn: "persistent"`: the fraction of each BiLSTM's recurrent weights kept, 0 < d ≤ 1 (1, the default:
   * dense); row-balanced magnitude pruning, of the initial weights (the pruned ones are 0 from then on; ./packed.ts).
   */
  density?: number;
}

/** The shapes of a tagger's parameters, by name, in the order the constructor creates them (E_w is the lookup table). */
function taggerSizes(o: Omit<BiLstmTaggerOptions, "seed">) {
  const { embed: E, hidden: H, mlp: M, tags: T } = o;
  return {
    E_w: [o.vocabSize, E],
    Wx_f: [4 * H, E],
    Wh_f: [4 * H, H],
    b_f: [4 * H],
    Wx_b: [4 * H, E],
    Wh_b: [4 * H, H],
    b_b: [4 * H],
    W_mlp: [M, 2 * H],
    b_mlp: [M],
    W_out: [T, M],
    b_out: [T],
  } as const satisfies Record<string, readonly [number] | readonly [number, number]>;
}

/** Shapes by name (lookup tables named in `lookups`), as `ParameterShape`s in order. */
export function shapesOf(
  sizes: Record<string, readonly [number] | readonly [number, number]>,
  lookups: readonly string[],
): ParameterShape[] {
  return Object.entries(sizes).map(
    ([name, dims]): ParameterShape =>
      lookups.includes(name)
        ? { kind: "lookup", name, rows: dims[0], cols: dims[1]! }
        : { kind: "dense", name, rows: dims[0], cols: dims[1] ?? 1, isMatrix: dims.length === 2 },
  );
}

/** The parameters of a `BiLstmTagger` with these options, in its order, without allocating them (`vpps plan`). */
export function biLstmTaggerShapes(o: Omit<BiLstmTaggerOptions, "seed">): ParameterShape[] {
  return shapesOf(taggerSizes(o), ["E_w"]);
}

/** One LSTM direction's parameters: gates [i; o; u; f] = Wx·x + Wh·h + b ([i; f; g; o] with --rnn persistent). */
export interface LstmWeights {
  readonly Wx: Parameter;
  readonly Wh: Parameter;
  readonly b: Parameter;
  /** Its hidden size. */
  readonly hidden: number;
}

/** Adds the dense parameters named in `sizes` (in order) to `pc` and returns them by name. */
export function addDense<K extends string>(
  pc: ParameterCollection,
  sizes: Record<K, readonly [number] | readonly [number, number]>,
  names: readonly K[],
): Record<K, Parameter> {
  const out = {} as Record<K, Parameter>;
  for (const name of names) out[name] = pc.addParameters(sizes[name], undefined, name);
  return out;
}

/**
 * Zero vectors of a graph, one per length per build: the initial memory c₀ of every LSTM of the graph (an input
 * node, so c = σ(i)⊙tanh(u) + σ(f)⊙0 is the same cell op as every later step).
 */
export class ZeroInputs {
  private graph: ComputationGraph | undefined;
  private generation = -1;
  private readonly ids = new Map<number, number>();

  node(cg: ComputationGraph, n: number): number {
    if (cg !== this.graph || cg.generation !== this.generation) {
      this.graph = cg;
      this.generation = cg.generation;
      this.ids.clear();
    }
    let id = this.ids.get(n);
    if (id === undefined) {
      id = input(cg, new Float32Array(n)).id;
      this.ids.set(n, id);
    }
    return id;
  }
}

/**
 * The hidden states of one LSTM direction over the vectors `xs` (node ids), in the order of `xs`: left to right, or
 * right to left when `reverse` (then hs[0] is the state after reading the whole sequence backwards). h₀ = c₀ = 0,
 * so the first step's gates are Wx·x + b alone.
 */
export function lstmSequence(
  cg: ComputationGraph,
  w: LstmWeights,
  xs: ArrayLike<number>,
  reverse: boolean,
  zeros: ZeroInputs,
): number[] {
  const H = w.hidden;
  const n = xs.length;
  const hs = new Array<number>(n);
  const b = cg.parameterNode(w.b);
  const Wx = cg.parameterNode(w.Wx);
  let h = -1;
  let c = zeros.node(cg, H);
  for (let s = 0; s < n; s++) {
    const t = reverse ? n - 1 - s : s;
    const gates = h < 0 ? affineNode(cg, b, Wx, xs[t]!) : affine5Node(cg, b, Wx, xs[t]!, cg.parameterNode(w.Wh), h);
    const hc = cellNode1(cg, gates, c);
    h = pickRangeNode(cg, hc, 0, H);
    c = pickRangeNode(cg, hc, H, 2 * H);
    hs[t] = h;
  }
  return hs;
}

export class BiLstmTagger<S extends EncodedSentence = EncodedSentence> {
  readonly params: ParameterCollection;
  readonly E: LookupParameter;
  readonly forward: LstmWeights;
  readonly backward: LstmWeights;
  readonly W_mlp: Parameter;
  readonly b_mlp: Parameter;
  readonly W_out: Parameter;
  readonly b_out: Parameter;
  readonly embed: number;
  readonly hidden: number;
  readonly mlp: number;
  readonly tags: number;
  readonly rnn: TaggerRnn;
  /** The fraction of each BiLSTM's W_hh kept (1: dense). */
  readonly density: number;
  protected readonly zeros = new ZeroInputs();

  constructor(opts: BiLstmTaggerOptions) {
    for (const key of ["vocabSize", "tags", "embed", "hidden", "mlp"] as const) {
      const v = opts[key];
      if (!Number.isInteger(v) || v < 1)
        throw new ShapeError(`BiLstmTagger: '${key}' must be a positive integer; got ${v}`);
    }
    this.embed = opts.embed;
    this.hidden = opts.hidden;
    this.mlp = opts.mlp;
    this.tags = opts.tags;
    this.rnn = opts.rnn ?? "steps";
    if (!TAGGER_RNNS.includes(this.rnn)) {
      throw new ShapeError(`BiLstmTagger: 'rnn' must be one of ${TAGGER_RNNS.join(", ")}; got ${String(opts.rnn)}`);
    }
    const density = opts.density ?? 1;
    if (typeof density !== "number" || !(density > 0 && density <= 1)) {
      throw new ShapeError(`BiLstmTagger: --density must be a number in (0, 1]; got ${String(opts.density)}`);
    }
    if (density < 1 && this.rnn !== "persistent") {
      throw new ShapeError(
        `BiLstmTagger: --density ${density} needs --rnn persistent (the pruned recurrent weights are the rnn op's; ` +
          "--rnn steps has none)",
      );
    }
    this.density = density;
    const pc = new ParameterCollection({ seed: opts.seed ?? 1 });
    this.params = pc;
    const s = taggerSizes(opts);
    this.E = pc.addLookupParameters(s.E_w[0], s.E_w[1], undefined, "E_w");
    const p = addDense(pc, s, ["Wx_f", "Wh_f", "b_f", "Wx_b", "Wh_b", "b_b", "W_mlp", "b_mlp", "W_out", "b_out"]);
    this.forward = { Wx: p.Wx_f, Wh: p.Wh_f, b: p.b_f, hidden: opts.hidden };
    this.backward = { Wx: p.Wx_b, Wh: p.Wh_b, b: p.b_b, hidden: opts.hidden };
    pruneInitialWeights([this.forward, this.backward], density);
    this.W_mlp = p.W_mlp;
    this.b_mlp = p.b_mlp;
    this.W_out = p.W_out;
    this.b_out = p.b_out;
  }

  /** The summed loss (one softmax loss per word) of a batch of sentences, in one graph renewed by the caller. */
  buildBatchLoss(cg: ComputationGraph, sentences: readonly S[]): Expression {
    if (sentences.length === 0) throw new ShapeError("sum: needs at least one argument");
    if (this.rnn === "persistent") {
      const { scores, packing } = this.packedScores(cg, sentences);
      return pickNegLogSoftmaxRows(
        scores,
        packValues(packing, (s, t) => sentences[s]!.tags[t]!),
      );
    }
    const losses: number[] = [];
    const perSentence: number[] = [];
    for (let j = 0; j < sentences.length; j++) {
      losses.length = 0;
      this.addSentence(cg, sentences[j]!, losses);
      perSentence.push(sumNode(cg, losses, losses.length));
    }
    const n = perSentence.length;
    return new Expression(cg, n === 1 ? perSentence[0]! : sumNode(cg, perSentence, n), cg.generation);
  }

  /** Forward only: each word's tag scores (before the softmax). */
  buildScores(cg: ComputationGraph, s: S): Expression[] {
    if (this.rnn === "persistent") {
      const { scores, packing } = this.packedScores(cg, [s]);
      const flat = flatten(scores);
      const T = this.tags;
      // views of the scores' rows (no copy on the GPU engines)
      return Array.from(packing.rows[0]!, (r) => pickRange(flat, r * T, (r + 1) * T));
    }
    return this.addSentence(cg, s, null).map((id) => new Expression(cg, id, cg.generation));
  }

  /**
   * `--rnn persistent`: the class scores of every word of the batch as the rows [N, tags] of a handful of nodes —
   * the words' inputs [N, embed] (`packedInputs`), one rnn op ([N, 2H], both directions), then the MLP and the output
   * layer as affines over all rows — in packed order (`packing`: sorted by length, time-major, as PyTorch packs).
   */
  protected packedScores(cg: ComputationGraph, sentences: readonly S[]): { scores: Expression; packing: Packing } {
    for (const s of sentences) {
      if (s.words.length === 0) throw new ShapeError("BiLstmTagger: a sentence needs at least one word");
    }
    const packing = packLengths(sentences.map((s) => s.words.length));
    const x = this.packedInputs(cg, sentences, packing);
    const y = packedBiLstm(x, packing.batchSizes, this.forward, this.backward, this.density);
    const hidden = tanh(affineRows(this.b_mlp, this.W_mlp, y));
    return { scores: affineRows(this.b_out, this.W_out, hidden), packing };
  }

  /** The packed words' input vectors: their rows of the word table, one lookupRows node [N, embed]. */
  protected packedInputs(cg: ComputationGraph, sentences: readonly S[], packing: Packing): Expression {
    return lookupRows(
      cg,
      this.E,
      packValues(packing, (s, t) => sentences[s]!.words[t]!),
    );
  }

  /**
   * Adds one sentence; returns its words' score nodes and, unless `losses` is null, appends each word's loss node.
   */
  protected addSentence(cg: ComputationGraph, s: S, losses: number[] | null): number[] {
    const n = s.words.length;
    if (n === 0) throw new ShapeError("BiLstmTagger: a sentence needs at least one word");
    const xs = new Array<number>(n);
    for (let k = 0; k < n; k++) xs[k] = this.wordVector(cg, s, k);
    const fs = lstmSequence(cg, this.forward, xs, false, this.zeros);
    const bs = lstmSequence(cg, this.backward, xs, true, this.zeros);
    const bm = cg.parameterNode(this.b_mlp);
    const Wm = cg.parameterNode(this.W_mlp);
    const bo = cg.parameterNode(this.b_out);
    const Wo = cg.parameterNode(this.W_out);
    const scores = new Array<number>(n);
    for (let k = 0; k < n; k++) {
      const hidden = unaryNode(cg, Op.Tanh, affineNode(cg, bm, Wm, concat2Node(cg, fs[k]!, bs[k]!)));
      const o = affineNode(cg, bo, Wo, hidden);
      scores[k] = o;
      if (losses !== null) losses.push(pickNegLogSoftmaxNode(cg, o, s.tags[k]!));
    }
    return scores;
  }

  /** Word k's input vector: its row of the word table (the character model spells rare words instead). */
  protected wordVector(cg: ComputationGraph, s: S, k: number): number {
    return lookupNode(cg, this.E, s.words[k]!);
  }
}
