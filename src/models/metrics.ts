/** Metrics shared by models (see `Metric` in task.ts); a model with its own measure defines it in its folder. */
import type { Metric } from "./task.js";

/**
 * The fraction of examples whose label (`label(example)`) is the class predicted from their first score expression:
 * root accuracy for a sentence model, whose one score expression is the root's. 0 when there are no examples.
 */
export function labelAccuracy<E>(key: string, name: string, label: (example: E) => number): Metric<E> {
  return {
    key,
    name,
    compute(examples, predicted) {
      if (examples.length === 0) return 0;
      let correct = 0;
      for (let k = 0; k < examples.length; k++) if (predicted[k]![0] === label(examples[k]!)) correct++;
      return correct / examples.length;
    },
  };
}

/** Index of the largest score (the first of equal ones). */
export function argmax(xs: ArrayLike<number>): number {
  let best = 0;
  for (let k = 1; k < xs.length; k++) if (xs[k]! > xs[best]!) best = k;
  return best;
}

/** A named entity: tokens start..end−1 of a sentence, of type `type` (PER, LOC, …). */
export interface Entity {
  readonly start: number;
  readonly end: number;
  readonly type: string;
}

/**
 * The entities of a sentence's tags, CoNLL style, for IOB1 (WikiNER: `O`, `I-X`, and `B-X` only where an entity
 * follows one of the same type) and IOB2 (every entity starts with `B-X`) alike: an entity is a maximal run of
 * tokens tagged with type X, where a `B-X` starts a new one. `O` is outside; a tag without a `B-`/`I-` prefix is
 * read as `I-` of itself (its own type).
 */
export function entities(tags: readonly string[]): Entity[] {
  const out: Entity[] = [];
  let start = -1;
  let type = "";
  for (let k = 0; k <= tags.length; k++) {
    const tag = k < tags.length ? tags[k]! : "O";
    const begins = tag.startsWith("B-");
    const t = tag === "O" ? null : begins || tag.startsWith("I-") ? tag.slice(2) : tag;
    if (start >= 0 && (t === null || begins || t !== type)) {
      out.push({ start, end: k, type });
      start = -1;
    }
    if (t !== null && start < 0) {
      start = k;
      type = t;
    }
  }
  return out;
}

/** Entities predicted, present, and predicted exactly (same start, end and type). */
export interface EntityCounts {
  predicted: number;
  gold: number;
  correct: number;
}

/** Adds one sentence's entity counts (gold tags against predicted tags) into `counts`. */
export function countEntities(gold: readonly string[], predicted: readonly string[], counts: EntityCounts): void {
  const g = entities(gold);
  const p = entities(predicted);
  const key = (e: Entity) => `${e.start}:${e.end}:${e.type}`;
  const goldKeys = new Set(g.map(key));
  counts.gold += g.length;
  counts.predicted += p.length;
  for (const e of p) if (goldKeys.has(key(e))) counts.correct++;
}

/** F1 = 2PR/(P+R) of the counts; 0 when no entity is predicted or present, or none is right. */
export function f1Score(c: EntityCounts): number {
  if (c.predicted === 0 || c.gold === 0 || c.correct === 0) return 0;
  const p = c.correct / c.predicted;
  const r = c.correct / c.gold;
  return (2 * p * r) / (p + r);
}

/**
 * Entity F1 over a tagger's examples (see `entities`): `gold(example)` its tags, `tagName(vocab, i)` the tag of
 * predicted class i. Precision and recall are over all entities of all examples (micro-averaged, as conlleval).
 */
export function entityF1<E, V>(
  gold: (example: E) => readonly string[],
  tagName: (vocab: V, i: number) => string,
): Metric<E, V> {
  return {
    key: "entityF1",
    name: "entity F1",
    compute(examples, predicted, vocab) {
      const counts: EntityCounts = { predicted: 0, gold: 0, correct: 0 };
      examples.forEach((e, k) => {
        countEntities(
          gold(e),
          predicted[k]!.map((i) => tagName(vocab, i)),
          counts,
        );
      });
      return f1Score(counts);
    },
  };
}

/** The fraction of tokens whose predicted tag is the gold one; 0 when there are no tokens. */
export function tokenAccuracy<E, V>(
  gold: (example: E) => readonly string[],
  tagName: (vocab: V, i: number) => string,
): Metric<E, V> {
  return {
    key: "tokenAccuracy",
    name: "token accuracy",
    compute(examples, predicted, vocab) {
      let right = 0;
      let all = 0;
      examples.forEach((e, k) => {
        const tags = gold(e);
        const p = predicted[k]!;
        for (let i = 0; i < tags.length; i++) if (tagName(vocab, p[i]!) === tags[i]) right++;
        all += tags.length;
      });
      return all === 0 ? 0 : right / all;
    },
  };
}
