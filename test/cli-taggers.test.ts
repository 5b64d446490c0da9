// `vpps train | eval | bench` for the taggers (bilstm, bilstm-char): the synthetic task, a data directory and our
// WikiNER copy split by --split-seed (saved in state.json, kept by --resume), evaluation of a saved run on one file,
// the throughput suite, and malformed data as one line. Tiny sizes, one or two epochs: each run takes seconds.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { syntheticTaggedSentences } from "../src/data/synthetic-tagged.js";
import type { TaggedSentence } from "../src/data/tagged.js";
import { readSafetensors } from "../src/model/safetensors.js";
import { keptPerRow, maskCounts, pruneByMagnitude } from "../src/rnn/index.js";

const bin = join(import.meta.dirname, "..", "bin", "vpps.js");
const WIKINER = fileURLToPath(new URL("../../shared/data/wikiner/", import.meta.url));
const noWikiner = existsSync(join(WIKINER, "dev.txt")) ? false : `WikiNER not found in ${WIKINER}`;

const run = promisify(execFile);

/** Runs the command; asynchronous, so that the suite's tests run theirs at once, a core each. */
async function vpps(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, [bin, ...args], { encoding: "utf8", timeout: 120_000 });
    return { code: 0, stdout, stderr };
  } catch (e) {
    const r = e as { code?: number | string; stdout?: string; stderr?: string };
    return { code: typeof r.code === "number" ? r.code : -1, stdout: r.stdout ?? "", stderr: r.stderr ?? "" };
  }
}

/** Tests of a suite at once, as many as there are cores (each mostly waits for its `vpps` process). */
const atOnce = { concurrency: availableParallelism() };

const line = (s: TaggedSentence) => s.words.map((w, k) => `${w}|${s.tags[k]}`).join(" ");
const TINY = ["--embed", "6", "--hidden", "6", "--mlp", "6"];

/** A one-line error on stderr, exit status 1, no stack trace. */
function assertOneLine(r: Awaited<ReturnType<typeof vpps>>, message: RegExp): void {
  assert.equal(r.code, 1, r.stderr);
  assert.match(r.stderr.trim(), message);
  assert.equal(r.stderr.trim().split("\n").length, 1, r.stderr);
}

describe("vpps train and eval for the taggers", atOnce, () => {
  test("bilstm on a data directory: --json and --out; eval of the run on dev.txt equals training's dev metrics", async () => {
    const data = mkdtempSync(join(tmpdir(), "vpps-tagger-data-"));
    const sentences = syntheticTaggedSentences(140, 31);
    writeFileSync(join(data, "train.txt"), `${sentences.slice(0, 100).map(line).join("\n")}\n`);
    writeFileSync(join(data, "dev.txt"), `${sentences.slice(100).map(line).join("\n")}\n`);
    const out = mkdtempSync(join(tmpdir(), "vpps-tagger-run-"));
    const t = await vpps(
      "train",
      "bilstm",
      "--data",
      data,
      ...TINY,
      "--epochs",
      "2",
      "--lr",
      "0.02",
      "--json",
      "--out",
      out,
    );
    assert.equal(t.code, 0, t.stderr);
    const trained = JSON.parse(t.stdout.trim()) as {
      epochs: { devAccuracy: number; trainLoss: number; devMetrics: Record<string, number> }[];
    };
    assert.ok(trained.epochs[1]!.trainLoss < trained.epochs[0]!.trainLoss, "the loss goes down");
    const state = JSON.parse(readFileSync(join(out, "state.json"), "utf8"));
    assert.deepEqual(state.options, { embed: 6, hidden: 6, mlp: 6, splitSeed: 1, rnn: "steps", density: 1 });
    assert.equal(state.vocabulary.words[0], "<unk>");
    assert.deepEqual([...state.vocabulary.tags].sort(), ["I-LOC", "I-ORG", "I-PER", "O"]);

    const r = await vpps("eval", "bilstm", "--run", out, "--data", join(data, "dev.txt"), "--json");
    assert.equal(r.code, 0, r.stderr);
    const result = JSON.parse(r.stdout.trim()) as { examples: number; metrics: Record<string, number> };
    assert.equal(result.examples, 40, "the file as a whole, not split");
    assert.deepEqual(result.metrics, trained.epochs[1]!.devMetrics);
    const text = await vpps("eval", "bilstm", "--run", out, "--data", join(data, "train.txt"));
    assert.match(text.stdout, /^data: .*train\.txt: 100 sentences; engine cpu$/m);
    assert.match(text.stdout, /^entity F1 \d+\.\d\d% {2}token accuracy \d+\.\d\d%$/m);

    // a tag the run never saw, and a malformed file: one line each, at file:line:column
    writeFileSync(join(data, "other.txt"), "the|O\nthe|O Alson|I-MISC\n");
    assertOneLine(
      await vpps("eval", "bilstm", "--run", out, "--data", join(data, "other.txt")),
      /^vpps: .*other\.txt:2:13: unknown tag 'I-MISC': expected one of the tags of the training split \(/,
    );
    writeFileSync(join(data, "bad.txt"), "the|O\nthe|O Alson\n");
    assertOneLine(
      await vpps("eval", "bilstm", "--run", out, "--data", join(data, "bad.txt")),
      /^vpps: .*bad\.txt:2:7: expected word\|TAG, found 'Alson' \(no '\|'\)$/,
    );
    writeFileSync(join(data, "empty.txt"), "\n\n");
    assertOneLine(
      await vpps("train", "bilstm", "--data", join(data, "empty.txt")),
      /^vpps: .*empty\.txt:1:1: no sentences: expected one sentence per line/,
    );
  });

  test("--rnn persistent: bilstm-char trains on the CPU engine and saves the choice; a bad --rnn is refused", async () => {
    const out = mkdtempSync(join(tmpdir(), "vpps-tagger-rnn-"));
    const args = ["--rnn", "persistent", ...TINY, "--char-embed", "2", "--max-sentences", "40", "--epochs", "1"];
    const t = await vpps("train", "bilstm-char", ...args, "--json", "--out", out);
    assert.equal(t.code, 0, t.stderr);
    assert.ok(Number.isFinite(JSON.parse(t.stdout.trim()).epochs[0].trainLoss));
    assert.equal(JSON.parse(readFileSync(join(out, "state.json"), "utf8")).options.rnn, "persistent");
    const bad = await vpps("train", "bilstm", "--rnn", "fused");
    assert.equal(bad.code, 2, bad.stderr);
    assert.match(bad.stderr, /--rnn.*must be one of steps, persistent; got/);
  });

  test("--density: a pruned bilstm trains on the CPU engine and learns; the checkpoint's W_hh computes with k per row; eval of the run equals training's; refusals", async () => {
    const data = mkdtempSync(join(tmpdir(), "vpps-tagger-sparse-data-"));
    const sentences = syntheticTaggedSentences(140, 32);
    writeFileSync(join(data, "train.txt"), `${sentences.slice(0, 100).map(line).join("\n")}\n`);
    writeFileSync(join(data, "dev.txt"), `${sentences.slice(100).map(line).join("\n")}\n`);
    const out = mkdtempSync(join(tmpdir(), "vpps-tagger-sparse-"));
    const H = 20;
    const sizes = ["--embed", "6", "--hidden", String(H), "--mlp", "6"];
    const t = await vpps(
      ...["train", "bilstm", "--data", data, "--rnn", "persistent", "--density", "0.1", ...sizes],
      ...["--epochs", "3", "--lr", "0.02", "--json", "--out", out],
    );
    assert.equal(t.code, 0, t.stderr);
    const trained = JSON.parse(t.stdout.trim()) as { epochs: { trainLoss: number; devMetrics: object }[] };
    const losses = trained.epochs.map((e) => e.trainLoss);
    assert.ok(losses[2]! < losses[0]!, `the loss goes down: ${losses}`);
    const state = JSON.parse(readFileSync(join(out, "state.json"), "utf8"));
    assert.equal(state.options.density, 0.1);
    assert.equal(state.options.rnn, "persistent");
    // the weights W_hh computes with: each row's k = round(0.1·H) = 2 largest, as the rnn op prunes them
    const k = keptPerRow(0.1, H);
    assert.equal(k, 2);
    const { tensors } = readSafetensors(join(out, "epoch-3.safetensors"));
    for (const name of ["Wh_f", "Wh_b"]) {
      const w = tensors.get(name)!;
      assert.deepEqual(w.shape, [4 * H, H]);
      const mask = pruneByMagnitude(w.data, 4 * H, H, 0.1, "row-balanced");
      const effective = w.data.map((v, i) => (mask[i] ? v : 0));
      const rows = maskCounts(
        Uint8Array.from(effective, (v) => (v !== 0 ? 1 : 0)),
        4 * H,
        H,
      ).rowCounts;
      assert.ok(
        rows.every((c) => c === k),
        `${name}: non-zero weights per row ${[...rows]}`,
      );
    }
    // the mask is a function of the weights: the saved run evaluates as it trained
    const r = await vpps("eval", "bilstm", "--run", out, "--data", join(data, "dev.txt"), "--json");
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(JSON.parse(r.stdout.trim()).metrics, trained.epochs[2]!.devMetrics);

    const steps = await vpps("train", "bilstm", "--density", "0.5", ...TINY, "--max-sentences", "10");
    assertOneLine(steps, /^vpps: BiLstmTagger: --density 0\.5 needs --rnn persistent /);
    for (const bad of ["0", "1.5", "abc"]) {
      const refused = await vpps("train", "bilstm", "--rnn", "persistent", "--density", bad);
      assert.equal(refused.code, 2, refused.stderr);
      assert.match(refused.stderr, new RegExp(`--density must be a number in \\(0, 1\\]; got '${bad}'`));
    }
  });

  test("bilstm-char on our WikiNER copy: the split's sizes in the log, --split-seed saved and kept on --resume", {
    skip: noWikiner,
  }, async () => {
    const out = mkdtempSync(join(tmpdir(), "vpps-tagger-wikiner-"));
    const common = ["--data", WIKINER, ...TINY, "--char-embed", "4", "--max-sentences", "24", "--out", out];
    const t = await vpps("train", "bilstm-char", ...common, "--epochs", "1", "--split-seed", "2");
    assert.equal(t.code, 0, t.stderr);
    assert.match(
      t.stdout,
      /^data: .*dev\.txt split by --split-seed 2 \(train 1356, dev 182, test 158\): 24 training sentences, 182 dev sentences, vocabulary \d+ words, \d+ characters, \d tags$/m,
    );
    assert.match(t.stdout, /^epoch 1: train loss [\d.]+ {2}dev entity F1 [\d.]+% {2}token accuracy [\d.]+%/m);
    const state = JSON.parse(readFileSync(join(out, "state.json"), "utf8"));
    assert.equal(state.options.splitSeed, 2);
    assert.equal(state.options.minCount, 5);
    // the resumed run splits the file as the run did; another --split-seed would mix data sets: refused in one line
    const refused = await vpps(
      "train",
      "bilstm-char",
      "--resume",
      out,
      "--epochs",
      "2",
      "--split-seed",
      "3",
      ...common,
    );
    assert.equal(refused.code, 1, refused.stderr);
    assert.match(refused.stderr, /^vpps: --split-seed 3 differs from the run in .*'s 2: .*\n$/);
    const r = await vpps("train", "bilstm-char", "--resume", out, "--epochs", "2", ...common);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /split by --split-seed 2 \(train 1356, dev 182, test 158\)/);
    assert.match(r.stdout, /^epoch 2: /m);
    // eval --split: the part of the file the run's split seed gives (dev: training's dev F1 of the last epoch)
    const devF1 = /^epoch 2: .*dev entity F1 ([\d.]+)%/m.exec(r.stdout)![1];
    const dev = await vpps("eval", "bilstm-char", "--run", out, "--data", join(WIKINER, "dev.txt"), "--split", "dev");
    assert.equal(dev.code, 0, dev.stderr);
    assert.match(dev.stdout, /^data: .*dev\.txt \(its dev part, --split-seed 2\): 182 sentences; engine /m);
    assert.match(dev.stdout, new RegExp(`^entity F1 ${devF1!.replace(".", "\\.")}%`, "m"));
    const test = await vpps("eval", "bilstm-char", "--run", out, "--data", join(WIKINER, "dev.txt"), "--split", "test");
    assert.equal(test.code, 0, test.stderr);
    assert.match(test.stdout, /\(its test part, --split-seed 2\): 158 sentences; /);
    const bad = await vpps("eval", "bilstm-char", "--run", out, "--data", join(WIKINER, "dev.txt"), "--split", "x");
    assert.equal(bad.code, 2, bad.stderr);
    assert.match(bad.stderr, /--split <part>.*'x' is invalid. Allowed choices are train, dev, test/);
  });

  test("the synthetic task without --data, and vpps bench bilstm through the throughput suite", async () => {
    const t = await vpps("train", "bilstm", ...TINY, "--epochs", "1", "--max-sentences", "80");
    assert.equal(t.code, 0, t.stderr);
    assert.match(t.stdout, /^data: synthetic named entities \(no --data given\): 80 training sentences, 300 dev/m);
    assert.match(t.stdout, /^best dev entity F1 \d+\.\d\d%; \d+ parameters$/m);
    const out = mkdtempSync(join(tmpdir(), "vpps-tagger-bench-"));
    const file = join(out, "tagged.txt");
    writeFileSync(file, `${syntheticTaggedSentences(12, 3).map(line).join("\n")}\n`);
    const ok = await vpps(
      "bench",
      "bilstm",
      ...["--engines", "cpu,autobatch-depth-cpu", "--batches", "1,2", "--sentences", "2", "--hidden", "8"],
      ...["--data", file, "--out", out],
    );
    assert.equal(ok.code, 0, ok.stderr);
    assert.match(ok.stdout, /\| batch \| cpu \| autobatch depth, CPU \|/);
    const json = JSON.parse(readFileSync(join(out, "bilstm.json"), "utf8"));
    assert.deepEqual(
      json.runs.map((x: { engine: string; status: string }) => `${x.engine} ${x.status}`),
      ["cpu timed", "autobatch-depth-cpu timed"],
    );
    assert.equal(json.runs[1].firstBatchLoss.relativeError, 0);
  });
});
