// What `vpps train` prints about a run names what it measured: the summary's columns carry the task's first metric
// (entity F1 for the taggers, not "acc") and its examples per second (trees, sentences, images); the help lists the
// choices of --engine and --batching.

import assert from "node:assert/strict";
import { test } from "node:test";
import { ENGINE_NAMES } from "../src/engines/index.js";
import { cli } from "./cli-harness.js";

test("the summary table names the task's metric and examples per second", async () => {
  for (const [model, metric, rate] of [
    ["bilstm", "dev entity F1", "sentences/s"],
    ["treelstm", "dev root accuracy", "trees/s"],
  ] as const) {
    const r = await cli("train", model, "--epochs", "1", "--hidden", "8", "--embed", "8");
    assert.equal(r.code, 0, r.stderr);
    const lines = r.stdout.trimEnd().split("\n");
    const head = lines.find((l) => l.startsWith("epoch  train loss"));
    assert.ok(head, r.stdout);
    assert.match(head, new RegExp(`  ${metric}  +${rate.replace("/", "\\/")} +time$`));
    assert.doesNotMatch(r.stdout, /dev acc |sent\/s/);
    assert.match(r.stdout, new RegExp(`^epoch 1: .* ${rate.replace("/", "\\/")} `, "m"));
  }
});

test("vpps train --help lists the engines and the batching strategies", async () => {
  const r = await cli("train", "treelstm", "--help");
  assert.equal(r.code, 0, r.stderr);
  const help = r.stdout.replace(/\s+/g, " ");
  assert.match(help, new RegExp(`--engine <name> execution engine.*: ${ENGINE_NAMES.join(", ")}`));
  assert.match(help, /--batching <strategy> autobatch strategy: depth, agenda/);
});
