/**
 * The BiLSTM tagger with character features (DyNet benchmark `bilstm-tagger-withchar`): the BiLSTM tagger
 * (../bilstm/model.ts), except that a rare word — one not in the word table, which holds only the words seen at
 * least `--min-count` times in training — gets its embedding from a character BiLSTM: the final states of a forward
 * and a backward LSTM over its characters' embeddings, concatenated ([f_last; b_last], embed/2 each).
 */
import { type ComputationGraph, type Expression, ShapeError } from "../../graph/graph.js";
import type { LookupParameter, ParameterShape } from "../../model/parameters.js";
import { flatten } from "../../ops/image.js";
import { lookupRows } from "../../ops/rows.js";
import { concat, concat2Node, lookupNode, pickRangeNode } from "../../ops/structure.js";
import {
  addDense,
  BiLstmTagger,
  type BiLstmTaggerOptions,
  biLstmTaggerShapes,
  type LstmWeights,
  lstmSequence,
  type SpelledSentence,
  shapesOf,
} from "../bilstm/model.js";
import {
  type Packing,
  packedBiLstm,
  packedNodes,
  packLengths,
  packValues,
  pruneInitialWeights,
} from "../bilstm/packed.js";

export interface CharTaggerOptions extends BiLstmTaggerOptions {
  /** Rows of the character table: the characters and the unknown character (index 0). */
  charCount: number;
  /** Character embedding size (64). */
  charEmbed: number;
}

/** The character parameters' shapes by name, in order (C is the lookup table). */
function charSizes(o: Omit<CharTaggerOptions, "seed">) {
  const H = charHidden(o.embed);
  const D = o.charEmbed;
  return {
    C: [o.charCount, D],
    Wx_cf: [4 * H, D],
    Wh_cf: [4 * H, H],
    b_cf: [4 * H],
    Wx_cb: [4 * H, D],
    Wh_cb: [4 * H, H],
    b_cb: [4 * H],
  } as const satisfies Record<string, readonly [number] | readonly [number, number]>;
}

/** Each character LSTM's hidden size: half the word embedding, so that [f_last; b_last] is a word embedding. */
export function charHidden(embed: number): number {
  if (embed % 2 !== 0) {
    throw new ShapeError(
      `bilstm-char: --embed ${embed} must be even: a spelled word's embedding is the two character LSTMs' final ` +
        "states, embed/2 each",
    );
  }
  return embed / 2;
}

/** The parameters of a `CharBiLstmTagger` with these options, in its order, without allocating them. */
export function charTaggerShapes(o: Omit<CharTaggerOptions, "seed">): ParameterShape[] {
  return [...biLstmTaggerShapes(o), ...shapesOf(charSizes(o), ["C"])];
}

export class CharBiLstmTagger extends BiLstmTagger<SpelledSentence> {
  readonly C: LookupParameter;
  readonly charForward: LstmWeights;
  readonly charBackward: LstmWeights;
  readonly charEmbed: number;

  constructor(opts: CharTaggerOptions) {
    const s = charSizes(opts); // checks the embedding size before anything is allocated
    super(opts);
    for (const key of ["charCount", "charEmbed"] as const) {
      const v = opts[key];
      if (!Number.isInteger(v) || v < 1) {
        throw new ShapeError(`CharBiLstmTagger: '${key}' must be a positive integer; got ${v}`);
      }
    }
    this.charEmbed = opts.charEmbed;
    const pc = this.params;
    this.C = pc.addLookupParameters(s.C[0], s.C[1], undefined, "C");
    const p = addDense(pc, s, ["Wx_cf", "Wh_cf", "b_cf", "Wx_cb", "Wh_cb", "b_cb"]);
    const H = charHidden(opts.embed);
    this.charForward = { Wx: p.Wx_cf, Wh: p.Wh_cf, b: p.b_cf, hidden: H };
    this.charBackward = { Wx: p.Wx_cb, Wh: p.Wh_cb, b: p.b_cb, hidden: H };
    pruneInitialWeights([this.charForward, this.charBackward], this.density);
  }

  /**
   * `--rnn persistent`: the spelled words of the whole batch go through the character BiLSTM as one rnn op over
   * their packed characters (looked up as one lookupRows node); each spelled word's vector is two slices of its rows,
   * the other words are looked up; the words' vectors are concatenated in packed order (the rnn reads them as rows).
   */
  protected override packedInputs(
    cg: ComputationGraph,
    sentences: readonly SpelledSentence[],
    packing: Packing,
  ): Expression {
    const spelled: Int32Array[] = [];
    const index = sentences.map((s) => new Int32Array(s.words.length).fill(-1));
    sentences.forEach((s, j) => {
      for (let k = 0; k < s.words.length; k++) {
        const chars = s.spelled[k];
        if (chars === null || chars === undefined) continue;
        if (chars.length === 0) throw new ShapeError(`CharBiLstmTagger: word ${k} is spelled with no characters`);
        index[j]![k] = spelled.length;
        spelled.push(chars);
      }
    });
    if (spelled.length === 0) return super.packedInputs(cg, sentences, packing);
    const chars = packLengths(spelled.map((c) => c.length));
    const H = this.charForward.hidden;
    const x = lookupRows(
      cg,
      this.C,
      packValues(chars, (w, t) => spelled[w]![t]!),
    );
    const y = flatten(packedBiLstm(x, chars.batchSizes, this.charForward, this.charBackward, this.density)).id;
    const vectors = spelled.map((_, w) => {
      const rows = chars.rows[w]!;
      // [f at the last character; b at the first], as the per-step formulation reads them
      const last = rows[rows.length - 1]! * 2 * H;
      const first = rows[0]! * 2 * H + H;
      return concat2Node(cg, pickRangeNode(cg, y, last, last + H), pickRangeNode(cg, y, first, first + H));
    });
    return concat(
      packedNodes(cg, packing, (j, k) => {
        const w = index[j]![k]!;
        return w >= 0 ? vectors[w]! : lookupNode(cg, this.E, sentences[j]!.words[k]!);
      }),
    );
  }

  /** A word of the table is looked up; a spelled one is [f_last; b_last] of the character LSTMs. */
  protected override wordVector(cg: ComputationGraph, s: SpelledSentence, k: number): number {
    const chars = s.spelled[k];
    if (chars === null || chars === undefined) return super.wordVector(cg, s, k);
    const n = chars.length;
    if (n === 0) throw new ShapeError(`CharBiLstmTagger: word ${k} is spelled with no characters`);
    const xs = new Array<number>(n);
    for (let j = 0; j < n; j++) xs[j] = lookupNode(cg, this.C, chars[j]!);
    const f = lstmSequence(cg, this.charForward, xs, false, this.zeros);
    const b = lstmSequence(cg, this.charBackward, xs, true, this.zeros);
    // the backward LSTM reads the word from its end: its final state is the one at the first character
    return concat2Node(cg, f[n - 1]!, b[0]!);
  }
}
