// Fixed batches (`vpps train --shuffle batches`): the epochs' orders (epochOrder), and VPPS's cache of recurring
// batches' scripts (src/engines/vpps/runtime/script-cache.ts), without a GPU. The GPU side — the same losses with and
// without kept scripts — is test/gpu/vpps-pipelined.test.ts.

import assert from "node:assert/strict";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { CpuEngine } from "../src/engines/cpu.js";
import { ScriptCache, scriptCacheBytes } from "../src/engines/vpps/runtime/script-cache.js";
import type { ScheduledBatch } from "../src/engines/vpps/schedule/batch.js";
import { epochOrder, type RunState, type ShuffleMode, train } from "../src/train/loop.js";
import { inRunDir } from "./helpers.js";
import { toyTask } from "./toy-task.js";

const batchesOf = (order: readonly number[], batch: number): string[] => {
  const out: string[] = [];
  for (let s = 0; s < order.length; s += batch) out.push(order.slice(s, s + batch).join(","));
  return out;
};

describe("epochOrder: the training set's order per epoch", () => {
  test("examples: a permutation per epoch, new batches each epoch; the same seed, the same order", () => {
    const a = Array.from({ length: 50 }, () => 0);
    const b = Array.from({ length: 50 }, () => 0);
    epochOrder(a, 8, 3, 1, "examples");
    epochOrder(b, 8, 3, 2, "examples");
    assert.deepEqual(
      [...a].sort((x, y) => x - y),
      Array.from({ length: 50 }, (_, i) => i),
    );
    assert.notDeepEqual(new Set(batchesOf(a, 8)), new Set(batchesOf(b, 8)), "the batches change");
    const again = Array.from({ length: 50 }, () => 0);
    epochOrder(again, 8, 3, 2, "examples");
    assert.deepEqual(again, b);
  });

  test("batches: the same batches (members and their order) every epoch, in another order; a short batch stays last", () => {
    const orders = [1, 2, 3, 4].map((epoch) => {
      const o = Array.from({ length: 53 }, () => 0);
      epochOrder(o, 8, 3, epoch, "batches");
      return o;
    });
    const first = batchesOf(orders[0]!, 8);
    assert.equal(first.length, 7);
    for (const o of orders) {
      const bs = batchesOf(o, 8);
      assert.deepEqual([...bs].sort(), [...first].sort(), "the same batches");
      assert.equal(bs[6], first[6], "the short batch (5 examples) last");
      assert.equal(bs[6]!.split(",").length, 5);
    }
    assert.notDeepEqual(batchesOf(orders[1]!, 8), first, "their order changes");
    // epoch 1's batches are those of the examples' shuffle of epoch 1
    const examples = Array.from({ length: 53 }, () => 0);
    epochOrder(examples, 8, 3, 1, "examples");
    assert.deepEqual([...first].sort(), [...batchesOf(examples, 8)].sort());
  });
});

describe("training with shuffle: batches", () => {
  const data = toyTask.data.synthetic.make(4);
  const vocab = toyTask.vocabulary.build(data.train);
  const run = (shuffle: ShuffleMode, epochs: number, outDir?: string, resume?: RunState) =>
    inRunDir(
      outDir,
      { model: toyTask.name, ...(resume && outDir ? { resume: { checkpoint: join(outDir, "state.json") } } : {}) },
      (runDir) =>
        train({
          task: toyTask,
          options: toyTask.defaults,
          train: data.train,
          dev: data.dev,
          vocab,
          epochs,
          batch: 8,
          learningRate: 0.2,
          optimizer: "sgd",
          seed: 3,
          shuffle,
          makeEngine: (p) => new CpuEngine(p),
          ...(runDir ? { runDir } : {}),
          ...(resume && outDir
            ? {
                resume: {
                  checkpoint: join(outDir, `epoch-${resume.epochs.length}.safetensors`),
                  epochsDone: resume.epochs.length,
                  previous: resume.epochs,
                },
              }
            : {}),
        }),
    );

  test("it learns, records the mode, and a resumed run equals an uninterrupted one", () => {
    const straight = run("batches", 3);
    const examples = run("examples", 3);
    assert.notEqual(straight.summary.epochs[2]!.trainLoss, examples.summary.epochs[2]!.trainLoss, "another order");
    assert.ok(straight.summary.epochs[2]!.trainLoss < straight.summary.epochs[0]!.trainLoss);
    const dir = mkdtempSync(join(tmpdir(), "vpps-fixed-"));
    run("batches", 2, dir);
    const state = JSON.parse(readFileSync(join(dir, "state.json"), "utf8")) as RunState;
    assert.equal(state.training.shuffle, "batches");
    const resumed = run("batches", 3, dir, state);
    assert.equal(resumed.summary.epochs[2]!.trainLoss, straight.summary.epochs[2]!.trainLoss);
  });
});

/** A scheduled batch whose script is `words` (the rest unused by the cache). */
function batchOf(words: number[]): ScheduledBatch {
  const none = new Int32Array(0);
  return {
    layout: {
      inputStart: 0,
      gradStart: 0,
      poolFloats: 0,
      paramGrad: none,
      lookupRows: { table: none, row: none, offset: none },
      collectY: none,
      collectX: none,
      collectCount: none,
    },
    script: Uint32Array.from(words),
    barriers: 0,
    update: "kernel",
    lossOffset: 0,
    liveNodes: 0,
    zeroGradients: false,
  };
}

describe("ScriptCache: scripts of recurring batches (VPPS)", () => {
  const request = (examples: number[], recurring = true, dropoutKey = 7) => ({
    examples: Int32Array.from(examples),
    training: true,
    dropoutKey,
    recurring,
  });

  test("keys: only recurring requests, by variant, training flag and the examples in order", () => {
    assert.equal(ScriptCache.keyOf(0, request([1, 2], false)), undefined);
    assert.equal(ScriptCache.keyOf(0, request([1, 2])), "0|1|1,2");
    assert.equal(ScriptCache.batchName(request([1, 2])), "1|1,2", "the name of kept unions: no variant");
    assert.equal(ScriptCache.batchName(request([1, 2], false)), undefined);
    assert.notEqual(ScriptCache.keyOf(1, request([1, 2])), ScriptCache.keyOf(0, request([1, 2])));
    assert.notEqual(ScriptCache.keyOf(0, request([2, 1])), ScriptCache.keyOf(0, request([1, 2])));
  });

  test("kept copies (the pool's buffers may be reused), counted; a dropout script only for its own key", () => {
    const c = new ScriptCache(1 << 20);
    const b = batchOf([1, 2, 3]);
    const inputs = Float32Array.of(0.5, 1.5);
    assert.equal(c.get("k", 7), undefined);
    c.put("k", 0, b, inputs, false, 7);
    b.script[0] = 99;
    inputs[0] = 9;
    const hit = c.get("k", 8);
    assert.ok(hit !== undefined, "no dropout: any key");
    assert.deepEqual([...hit.batch.script], [1, 2, 3]);
    assert.deepEqual([...hit.inputs], [0.5, 1.5]);
    assert.equal(hit.dropoutKey, undefined);
    c.put("d", 0, batchOf([4]), inputs, true, 7);
    assert.ok(c.get("d", 7) !== undefined);
    assert.equal(c.get("d", 8), undefined, "a dropout script for another key is not reused");
    assert.equal(c.hits, 2);
    assert.equal(c.misses, 2);
    assert.equal(c.size, 2);
    assert.equal(c.bytes, 12 + 8 + 4 + 8);
    c.clear();
    assert.equal(c.size, 0);
    assert.equal(c.bytes, 0);
  });

  test("the capacity is never passed; VPPS_SCRIPT_CACHE_MB sets it, a bad value is one line", () => {
    const c = new ScriptCache(20);
    c.put("a", 0, batchOf([1, 2, 3]), new Float32Array(0), false, 0); // 12 bytes
    c.put("b", 0, batchOf([1, 2, 3]), new Float32Array(0), false, 0); // would be 24
    assert.equal(c.size, 1);
    assert.equal(c.bytes, 12);
    assert.equal(scriptCacheBytes({}), 2048 * 2 ** 20);
    assert.equal(scriptCacheBytes({ VPPS_SCRIPT_CACHE_MB: "0" }), 0);
    assert.equal(scriptCacheBytes({ VPPS_SCRIPT_CACHE_MB: "16" }), 16 * 2 ** 20);
    assert.throws(
      () => scriptCacheBytes({ VPPS_SCRIPT_CACHE_MB: "-1" }),
      /VPPS_SCRIPT_CACHE_MB is '-1'; expected a whole number of MiB ≥ 0/,
    );
  });
});
