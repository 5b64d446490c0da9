// The taggers' metrics (src/models/metrics.ts) on hand-made cases: entities in IOB1 and IOB2, B- tags, adjacent
// entities of different types, no entities; entity F1 and token accuracy over examples.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { countEntities, type EntityCounts, entities, entityF1, f1Score, tokenAccuracy } from "../src/models/metrics.js";

const tags = (s: string) => s.split(" ");
const spans = (s: string) => entities(tags(s)).map((e) => `${e.type}:${e.start}-${e.end}`);

describe("entities", () => {
  test("IOB1 (WikiNER): runs of I-X; a B-X starts a new entity of the same type", () => {
    assert.deepEqual(spans("I-PER I-PER O I-LOC"), ["PER:0-2", "LOC:3-4"]);
    assert.deepEqual(spans("I-PER I-PER B-PER O"), ["PER:0-2", "PER:2-3"]);
    assert.deepEqual(spans("O O I-ORG"), ["ORG:2-3"], "an entity at the end");
  });

  test("IOB2: every entity starts with B-X, I-X continues it", () => {
    assert.deepEqual(spans("B-PER I-PER B-PER O B-LOC I-LOC"), ["PER:0-2", "PER:2-3", "LOC:4-6"]);
  });

  test("adjacent entities of different types are two entities, whatever the prefix", () => {
    assert.deepEqual(spans("I-PER I-LOC I-LOC"), ["PER:0-1", "LOC:1-3"]);
    assert.deepEqual(spans("B-PER I-LOC"), ["PER:0-1", "LOC:1-2"]);
  });

  test("no entities; a tag without a prefix is its own type", () => {
    assert.deepEqual(spans("O O O"), []);
    assert.deepEqual(entities([]), []);
    assert.deepEqual(spans("NN NN VB"), ["NN:0-2", "VB:2-3"]);
  });
});

describe("entity F1 and token accuracy", () => {
  const counts = (gold: string, predicted: string): EntityCounts => {
    const c = { predicted: 0, gold: 0, correct: 0 };
    countEntities(tags(gold), tags(predicted), c);
    return c;
  };

  test("exact (start, end, type) matches only", () => {
    assert.deepEqual(counts("I-PER I-PER O I-LOC", "I-PER I-PER O I-LOC"), { predicted: 2, gold: 2, correct: 2 });
    // a shorter span, a wrong type, a split entity: none is right
    assert.deepEqual(counts("I-PER I-PER O I-LOC", "I-PER O O I-ORG"), { predicted: 2, gold: 2, correct: 0 });
    assert.deepEqual(counts("I-PER I-PER", "I-PER B-PER"), { predicted: 2, gold: 1, correct: 0 });
    // an entity found, one missed, one invented
    assert.deepEqual(counts("I-PER O I-LOC O", "I-PER O O I-MISC"), { predicted: 2, gold: 2, correct: 1 });
  });

  test("F1 = 2PR/(P+R); 0 when nothing is predicted, nothing is present, or nothing is right", () => {
    assert.equal(f1Score({ predicted: 4, gold: 2, correct: 2 }), (2 * 0.5 * 1) / 1.5);
    assert.equal(f1Score({ predicted: 0, gold: 3, correct: 0 }), 0);
    assert.equal(f1Score({ predicted: 3, gold: 0, correct: 0 }), 0);
    assert.equal(f1Score({ predicted: 2, gold: 2, correct: 0 }), 0);
    assert.equal(f1Score({ predicted: 2, gold: 2, correct: 2 }), 1);
  });

  test("over examples: micro-averaged entity F1 and token accuracy, from predicted tag indices", () => {
    const names = ["O", "I-PER", "I-LOC", "B-PER"];
    const gold = (e: string[]) => e;
    const tagName = (v: string[], i: number) => v[i]!;
    const f1 = entityF1(gold, tagName);
    const acc = tokenAccuracy(gold, tagName);
    assert.equal(f1.key, "entityF1");
    assert.equal(acc.key, "tokenAccuracy");
    const examples = [tags("I-PER I-PER O"), tags("O I-LOC B-PER"), tags("O O")];
    // sentence 1 right, sentence 2: LOC right, the B-PER entity predicted as O; sentence 3: an invented PER
    const predicted = [
      [1, 1, 0],
      [0, 2, 0],
      [0, 1],
    ];
    // predicted 3 entities, 3 present, 2 right: P = R = 2/3
    assert.ok(Math.abs(f1.compute(examples, predicted, names) - 2 / 3) < 1e-12);
    assert.equal(acc.compute(examples, predicted, names), 6 / 8);
    assert.equal(f1.compute([tags("O O")], [[0, 0]], names), 0, "no entities at all");
    assert.equal(acc.compute([], [], names), 0);
  });
});
