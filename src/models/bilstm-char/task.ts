/**
 * The character-feature tagger's registry entry: the BiLSTM tagger's task (../bilstm/task.ts) with a word table of
 * the words seen at least --min-count times, the characters in the vocabulary, and the character sizes.
 */
import { describeDensity, PLAN_TAGS, TAGGER_DEFAULTS, type TaggerOptions, taggerTask } from "../bilstm/task.js";
import { TaggerVocabulary } from "../bilstm/vocabulary.js";
import { CharBiLstmTagger, charHidden, charTaggerShapes } from "./model.js";

export type CharTaggerTaskOptions = TaggerOptions & { readonly charEmbed: number; readonly minCount: number };

/** The character table's rows `vpps plan` assumes: any number does, lookup tables stay off chip. */
const PLAN_CHARS = 100;

export const charBiLstmTask = taggerTask<CharTaggerTaskOptions>({
  name: "bilstm-char",
  title: "BiLSTM tagger with characters",
  description:
    "the BiLSTM tagger with character features (DyNet benchmark 'bilstm-tagger-withchar'): rare words are spelled " +
    "by a character BiLSTM",
  options: [
    {
      key: "charEmbed",
      flag: "--char-embed <n>",
      help: "character embedding size (each character LSTM has embed/2 units)",
      type: { kind: "positive-int" },
      planLabel: "character embedding",
    },
    {
      key: "minCount",
      flag: "--min-count <n>",
      help: "words seen fewer times in training are spelled by the character BiLSTM",
      type: { kind: "positive-int" },
    },
  ],
  defaults: { ...TAGGER_DEFAULTS, charEmbed: 64, minCount: 5 },
  withChars: true,
  buildVocabulary: (train, o) => TaggerVocabulary.build(train, { minCount: o.minCount, withChars: true }),
  createNet: (o, vocab, seed) =>
    new CharBiLstmTagger({
      vocabSize: vocab.words.size,
      tags: vocab.tags.size,
      embed: o.embed,
      hidden: o.hidden,
      mlp: o.mlp,
      charCount: vocab.chars!.size,
      charEmbed: o.charEmbed,
      rnn: o.rnn,
      density: o.density,
      seed,
    }),
  parameterShapes: (o, vocabSize) =>
    charTaggerShapes({
      vocabSize,
      tags: PLAN_TAGS,
      embed: o.embed,
      hidden: o.hidden,
      mlp: o.mlp,
      charCount: PLAN_CHARS,
      charEmbed: o.charEmbed,
    }),
  describe: (o) =>
    `BiLSTM tagger with characters, embedding ${o.embed}, hidden ${o.hidden} per direction, MLP ${o.mlp}, ` +
    `character embedding ${o.charEmbed} (LSTMs ${charHidden(o.embed)}), words seen < ${o.minCount} times spelled` +
    (o.rnn === "persistent" ? ", BiLSTMs as rnn ops per batch" : "") +
    describeDensity(o),
});
