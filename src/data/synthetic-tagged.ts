/**
 * A small synthetic named-entity task generated in code, so that the taggers train on a fresh machine with no data
 * files (`vpps train bilstm` without --data). Sentences of lowercase filler words hold entities of three types
 * (PER, LOC, ORG) tagged in IOB1 as WikiNER is (`I-X`; `O` outside). An entity is one or two capitalised names,
 * usually after a word that announces its type ("mr", "in", "joined"). The names of a type share endings ("-son",
 * "-burg", "-corp") and some are rare; an announced entity is at times named with another type's names, so the task
 * rewards all three things a tagger can learn: the word itself, its context (the BiLSTM), and its spelling (the
 * character model, for names seen fewer than 5 times).
 */
import { deriveKey, RandomStream } from "../util/random.js";
import type { TaggedSentence } from "./tagged.js";

const FILLER = [
  "the",
  "a",
  "of",
  "and",
  "was",
  "is",
  "said",
  "today",
  "after",
  "before",
  "with",
  "new",
  "old",
  "report",
  "team",
  "city",
  "people",
  "year",
  "meeting",
  "plan",
  "visit",
  "game",
  "won",
  "lost",
  "that",
  "it",
  "they",
  "then",
];

/** Per type: the words that announce it, and its names' stems and endings. */
const TYPES: readonly { type: string; triggers: readonly string[]; endings: readonly string[] }[] = [
  { type: "PER", triggers: ["mr", "mrs", "dr", "minister"], endings: ["son", "ina"] },
  { type: "LOC", triggers: ["in", "near", "from"], endings: ["burg", "ville"] },
  { type: "ORG", triggers: ["joined", "sued", "chairman"], endings: ["corp", "tech"] },
];

const STEMS = ["Al", "Bor", "Cal", "Dun", "Er", "Fal", "Gor", "Hal", "Isk", "Jor", "Kel", "Lun", "Mor", "Nes", "Ost"];

const MIDDLES = ["", "an", "er", "is", "ol", "um"];

/** Every name of every type (stem + middle + ending): 180 per type, most of them rare. */
const NAMES: readonly (readonly string[])[] = TYPES.map((t) =>
  STEMS.flatMap((s) => MIDDLES.flatMap((m) => t.endings.map((e) => s + m + e))),
);

const TRAIN_SENTENCES = 1500;
const DEV_SENTENCES = 300;

/**
 * A name of type `t`: the first ones of the list far more often than the last (a Zipf-like draw), so that some
 * names are frequent and many rare.
 */
function drawName(r: RandomStream, t: number): string {
  const names = NAMES[t]!;
  const u = r.uniform();
  return names[Math.min(names.length - 1, Math.floor(names.length * u * u * u))]!;
}

function sentence(r: RandomStream, file: string, line: number): TaggedSentence {
  const words: string[] = [];
  const tags: string[] = [];
  const clauses = 1 + r.int(3);
  for (let c = 0; c < clauses; c++) {
    const fill = 1 + r.int(3);
    for (let k = 0; k < fill; k++) {
      words.push(FILLER[r.int(FILLER.length)]!);
      tags.push("O");
    }
    const u = r.uniform();
    if (u < 0.75) {
      const t = r.int(TYPES.length);
      const type = TYPES[t]!;
      // mostly announced; sometimes the name alone says what it is
      const announced = u < 0.6;
      if (announced) {
        words.push(type.triggers[r.int(type.triggers.length)]!);
        tags.push("O");
      }
      // an announced name is at times one of another type's ("joined Alburg"): then only the context tells
      const from = announced && r.uniform() < 0.2 ? (t + 1 + r.int(TYPES.length - 1)) % TYPES.length : t;
      const length = r.uniform() < 0.3 ? 2 : 1;
      for (let k = 0; k < length; k++) {
        words.push(drawName(r, from));
        tags.push(`I-${type.type}`);
      }
    }
  }
  words.push(".");
  tags.push("O");
  // the columns of the tags as if the sentence were a line `word|TAG word|TAG …` of a file
  const tagColumns: number[] = [];
  let column = 1;
  for (let k = 0; k < words.length; k++) {
    const w = [...words[k]!].length;
    tagColumns.push(column + w + 1);
    column += w + 1 + tags[k]!.length + 1;
  }
  return { words, tags, file, line, tagColumns };
}

/** `count` synthetic sentences, a pure function of `seed`; `file` names them in messages. */
export function syntheticTaggedSentences(count: number, seed: number, file = "synthetic"): TaggedSentence[] {
  if (!Number.isInteger(count) || count < 0) {
    throw new RangeError(`syntheticTaggedSentences: 'count' must be an integer >= 0; got ${count}`);
  }
  const r = new RandomStream(deriveKey(seed, "tagged sentences"));
  return Array.from({ length: count }, (_, i) => sentence(r, file, i + 1));
}

/** The standard split of the synthetic task: 1,500 training and 300 dev sentences from one seed. */
export function splitSyntheticTagged(seed: number): { train: TaggedSentence[]; dev: TaggedSentence[] } {
  const all = syntheticTaggedSentences(TRAIN_SENTENCES + DEV_SENTENCES, seed);
  return { train: all.slice(0, TRAIN_SENTENCES), dev: all.slice(TRAIN_SENTENCES) };
}
