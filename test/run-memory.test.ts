// One memory estimate against the real limit: the container's (cgroup v2 memory.max, v1 memory.limit_in_bytes, at
// this process's cgroup or above), else RAM; parameters, gradients and optimiser state, and the activations of the
// largest batch the data can form, measured from the model's own graph. A run beyond it is refused in one line with
// the largest size that fits. The limits (a fake cgroup tree through VPPS_CGROUP_ROOT and VPPS_PROC_CGROUP, no mock of
// the estimate), model sizes and example lengths are generated.

import assert from "node:assert/strict";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { totalmem } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { checkModelFits } from "../src/cli/commands.js";
import { syntheticTrees } from "../src/data/synthetic.js";
import { formatTree, type TreeNode } from "../src/data/tree.js";
import { treeLstmTask } from "../src/models/treelstm/task.js";
import {
  activationBytes,
  checkRunMemory,
  largestExamples,
  RunMemoryError,
  structuralSize,
} from "../src/train/memory.js";
import { memoryLimit } from "../src/util/memory-limit.js";
import { RandomStream } from "../src/util/random.js";
import { cli, dataDir, hasTrace, tempDir } from "./cli-harness.js";

const rng = new RandomStream(Number(process.env.VPPS_PROBE_SEED ?? 43));
const int = (n: number): number => Math.floor(rng.uniform() * n);

/** A fake cgroup file system: v2 limits at the given depths of `path`, and a /proc/self/cgroup naming it. */
function fakeCgroup(path: string, limits: Record<number, string>, v1?: string): Record<string, string> {
  const root = tempDir("cgroup");
  const parts = path.split("/").filter(Boolean);
  for (let depth = 0; depth <= parts.length; depth++) {
    const dir = join(root, ...parts.slice(0, depth));
    mkdirSync(dir, { recursive: true });
    if (limits[depth] !== undefined) writeFileSync(join(dir, "memory.max"), `${limits[depth]}\n`);
  }
  const proc = join(root, "proc-self-cgroup");
  let text = `0::${path}\n`;
  if (v1 !== undefined) {
    mkdirSync(join(root, "memory", ...parts), { recursive: true });
    writeFileSync(join(root, "memory", ...parts, "memory.limit_in_bytes"), `${v1}\n`);
    text = `4:memory:${path}\n${text}`;
  }
  writeFileSync(proc, text);
  return { VPPS_CGROUP_ROOT: root, VPPS_PROC_CGROUP: proc };
}

/** Runs `f` with `vars` in process.env. */
async function withEnv<T>(vars: Record<string, string>, f: () => T | Promise<T>): Promise<T> {
  const before = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
  Object.assign(process.env, vars);
  try {
    return await f();
  } finally {
    for (const [k, v] of Object.entries(before)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}

describe("the memory limit", () => {
  test("the smallest of RAM and the cgroup limits at this process's cgroup and above (generated trees)", () => {
    for (let k = 0; k < 12; k++) {
      const depth = 1 + int(4);
      const path = `/${Array.from({ length: depth }, (_, i) => `g${i}-${int(100)}`).join("/")}`;
      const limits: Record<number, string> = {};
      let expected = totalmem();
      for (let d = 0; d <= depth; d++) {
        const r = rng.uniform();
        if (r < 0.4) {
          const bytes = 1e8 + int(4e9);
          limits[d] = String(bytes);
          expected = Math.min(expected, bytes);
        } else if (r < 0.6) limits[d] = "max";
        else if (r < 0.7) limits[d] = "garbage";
      }
      const v1 = rng.uniform() < 0.3 ? String(1e8 + int(4e9)) : undefined;
      if (v1 !== undefined) expected = Math.min(expected, Number(v1));
      const limit = memoryLimit(fakeCgroup(path, limits, v1));
      assert.equal(limit.bytes, expected, JSON.stringify({ path, limits, v1 }));
      assert.match(
        limit.source,
        expected === totalmem() ? /RAM/ : /cgroup limit in .*(memory\.max|memory\.limit_in_bytes)$/,
      );
    }
  });
});

describe("the model's parameters", () => {
  test("a model beyond the limit is refused with the largest --hidden that fits, which does fit (generated)", async () => {
    for (let k = 0; k < 6; k++) {
      const limit = 2e7 + int(5e8);
      await withEnv(fakeCgroup("/a", { 1: String(limit) }), () => {
        const hidden = 2000 + int(8000);
        const options = { ...treeLstmTask.defaults, hidden, embed: 64 + int(256) };
        const vocab = 100 + int(20000);
        const optimizer = rng.uniform() < 0.5 ? "adam" : "sgd";
        let message = "";
        try {
          checkModelFits(treeLstmTask as never, options, vocab, { optimizer });
        } catch (e) {
          message = (e as Error).message;
        }
        assert.match(
          message,
          /more than its 0\.\d GB of memory \(the cgroup limit in .*memory\.max\); lower --hidden or --embed/,
        );
        const fits = Number(/the largest --hidden that fits is (\d+)/.exec(message)?.[1]);
        assert.ok(fits > 0 && fits < hidden, message);
        assert.doesNotThrow(() =>
          checkModelFits(treeLstmTask as never, { ...options, hidden: fits }, vocab, { optimizer }),
        );
        assert.throws(() =>
          checkModelFits(treeLstmTask as never, { ...options, hidden: fits + 1 }, vocab, { optimizer }),
        );
      });
    }
  });
});

/** A left-branching tree of `n` words. */
function longTree(n: number): TreeNode {
  let t: TreeNode = { label: 2, word: "w0", children: [] };
  for (let i = 1; i < n; i++) {
    t = { label: 2, word: null, children: [t, { label: 2, word: `w${i % 50}`, children: [] }] };
  }
  return t;
}

describe("the activations of the largest batch", () => {
  const vocab = treeLstmTask.vocabulary.build(syntheticTrees(50, 3), treeLstmTask.defaults);

  test("measured from the graph: the batch of the largest examples; the largest batch that fits does (generated)", () => {
    for (let k = 0; k < 5; k++) {
      const options = { ...treeLstmTask.defaults, hidden: 8 + 4 * int(16), embed: 8 + int(32) };
      const model = treeLstmTask.create(options, vocab, 1);
      const train = syntheticTrees(40 + int(60), 10 + k);
      const batch = 2 + int(14);
      const order = largestExamples(train, batch);
      // the examples are ordered by size, and the graph of more (larger) examples is larger
      for (let i = 1; i < order.length; i++) {
        assert.ok(structuralSize(train[order[i - 1]!]) >= structuralSize(train[order[i]!]));
      }
      const all = activationBytes(
        model,
        order.map((i) => train[i]!),
      );
      const one = activationBytes(model, [train[order[0]!]!]);
      assert.ok(one > 0 && all > one);
      // a limit between the batch's need and one example's: refused with a batch that fits, and one more does not
      const inUse = 1e6;
      const limit = { bytes: inUse + model.params.count * 12 + one + int(all - one), source: "a test limit" };
      let message = "";
      try {
        checkRunMemory({
          model,
          train,
          batch,
          extraBytesPerValue: 12,
          limit,
          hostActivations: true,
          sizeFlags: "--hidden",
          inUse,
        });
      } catch (e) {
        assert.ok(e instanceof RunMemoryError);
        message = e.message;
      }
      const fits = Number(/the largest batch that fits is --batch (\d+)/.exec(message)?.[1]);
      assert.ok(fits >= 1 && fits < batch, message);
      const run = (b: number) =>
        checkRunMemory({
          model,
          train,
          batch: b,
          extraBytesPerValue: 12,
          limit,
          hostActivations: true,
          sizeFlags: "--hidden",
          inUse,
        });
      assert.doesNotThrow(() => run(fits));
      assert.throws(() => run(fits + 1), RunMemoryError);
      // on a GPU the activations are the device's: checked against its memory (the weights 4 bytes a value)
      const device = {
        bytes: model.params.count * 16 + one + int(all - one),
        source: "the memory of GPU 0, a test GPU",
      };
      let onGpu = "";
      try {
        checkRunMemory({
          model,
          train,
          batch,
          extraBytesPerValue: 12,
          limit,
          hostActivations: false,
          sizeFlags: "--hidden",
          inUse,
          device,
        });
      } catch (e) {
        onGpu = (e as Error).message;
      }
      assert.match(
        onGpu,
        /of weights, .* more than the memory limit, .* \(the memory of GPU 0, a test GPU\); the largest batch that fits is --batch \d+/,
      );
      // and without a device to check (none given), only the host's share is
      assert.doesNotThrow(() =>
        checkRunMemory({
          model,
          train,
          batch,
          extraBytesPerValue: 12,
          limit,
          hostActivations: false,
          sizeFlags: "--hidden",
          inUse,
        }),
      );
    }
  });

  test("one sentence of tens of thousands of words in a small container: one line naming it, not an OOM kill", async () => {
    const data = dataDir(30);
    const n = 20_000 + int(80_000);
    const at = 1 + int(30);
    const lines = readFileSync(join(data, "train.txt"), "utf8").trimEnd().split("\n");
    lines.splice(at - 1, 0, formatTree(longTree(n)));
    writeFileSync(join(data, "train.txt"), `${lines.join("\n")}\n`);
    // room for what is in use now and the model, not for that sentence's graph
    const limit = process.memoryUsage().rss + 400e6;
    const r = await withEnv(fakeCgroup("/c", { 1: String(Math.round(limit)) }), () =>
      cli("train", "treelstm", "--data", data, "--hidden", "64", "--embed", "32", "--epochs", "1", "--batch", "8"),
    );
    assert.equal(r.code, 1, r.stderr);
    assert.ok(!hasTrace(r.stderr), r.stderr);
    assert.equal(r.stderr.split("\n").filter(Boolean).length, 1, r.stderr);
    assert.match(
      r.stderr,
      new RegExp(
        `^vpps: the run needs about .* of activations of the largest batch of 8 — more than the memory limit, .*memory\\.max\\); the largest training example alone \\(#${at}, .* of activations\\) does not fit`,
      ),
    );
  });
});
