/**
 * The PyTorch references (bench/pytorch/) without torch: their pure-Python unit tests and the syntax of every script
 * (when python3 is here); the Python split rule, entity F1, token accuracy, tagged reader and tagger vocabularies
 * against the TypeScript ones (src/data/tagged*.ts, src/models/metrics.ts, src/models/bilstm/vocabulary.ts) and
 * against golden values; and `vpps bench <model> --reference`'s plumbing — the skip line, and a stand-in interpreter
 * (VPPS_REFERENCE_PYTHON) whose rows reach the table, the JSON and the plot and whose first loss is checked against
 * the CPU engine's. The real interpreter (python3 with torch) is the default: where torch is importable the last test
 * runs the real Tree-LSTM reference on the CPU and checks its first loss; on the GPU machine `vpps bench <model>
 * --reference` does for every model.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, mkdtempSync as makeTemp, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { benchModel } from "../src/bench/models/index.js";
import { probeReference, referenceScript } from "../src/bench/throughput/reference.js";
import { runThroughput } from "../src/bench/throughput/suite.js";
import { parseTagged } from "../src/data/tagged.js";
import { loadTaggedSplits, splitPart } from "../src/data/tagged-split.js";
import { CpuEngine } from "../src/engines/cpu.js";
import { ComputationGraph } from "../src/graph/graph.js";
import { TaggerVocabulary } from "../src/models/bilstm/vocabulary.js";
import { countEntities, type EntityCounts, entities, f1Score } from "../src/models/metrics.js";

const ROOT = join(import.meta.dirname, "..");
/** Temporary folders of this file, removed when it ends. */
const made: string[] = [];
after(() => {
  for (const d of made) rmSync(d, { recursive: true, force: true });
});
function mkdtempSync(prefix: string): string {
  const d = makeTemp(prefix);
  made.push(d);
  return d;
}
const PYTORCH = join(ROOT, "bench", "pytorch");
const python = spawnSync("python3", ["--version"], { encoding: "utf8" });
const noPython = python.error || python.status !== 0 ? "python3 is not installed here" : false;
if (noPython) console.log(`skipping the Python side of the PyTorch references: ${noPython}`);

/** Sentences 0..39 under the seeded split (t train, D dev, T test): FNV-1a of `${seed}:${i}`, r = h mod 10. */
const SPLIT_GOLDEN: Record<number, string> = {
  1: "ttTtttttTtDttTtttttTtttttttDTttttTtttttT",
  7: "tDTttttttttttttttTttTttDtttttDtTttttDtDt",
};

/** Entity F1 by hand (MODELS16.md's IOB1 rule): 3 entities right of 5 predicted and 4 gold, P 0.6, R 0.75. */
const F1_GOLD = [
  ["I-PER", "I-PER", "O", "I-LOC"],
  ["I-MISC", "B-MISC", "O"],
  ["O", "O"],
];
const F1_PRED = [
  ["I-PER", "I-PER", "O", "I-ORG"],
  ["I-MISC", "B-MISC", "O"],
  ["I-ORG", "O"],
];
const F1_GOLDEN = 2 / 3;
const TOKEN_ACCURACY_GOLDEN = 7 / 9;

function py(code: string): string {
  const r = spawnSync("python3", ["-c", code], { cwd: PYTORCH, encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout;
}

describe("the PyTorch references' Python side", { skip: noPython }, () => {
  test("their unit tests pass (data readers, split rule, vocabularies, metrics, tree and pyramid plans)", () => {
    const r = spawnSync("python3", ["-m", "unittest", "discover", "-s", PYTORCH, "-p", "test_*.py"], {
      encoding: "utf8",
      env: { ...process.env, PYTHONDONTWRITEBYTECODE: "1" },
    });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stderr, /Ran \d+ tests/);
    assert.match(r.stderr, /\nOK\n?$/);
  });

  test("every script parses (they import torch, which is not needed to check their syntax)", () => {
    const scripts = readdirSync(PYTORCH).filter((f) => f.endsWith(".py"));
    for (const m of ["treelstm", "rvnn", "td-rnn", "td-lstm", "bilstm", "bilstm-char"]) {
      assert.ok(scripts.includes(`${m}.py`), `${m}.py`);
    }
    const parsed = py(
      `import ast, sys\nfor f in ${JSON.stringify(scripts)}:\n    ast.parse(open(f, encoding="utf-8").read(), f)\nprint(len(${JSON.stringify(scripts)}))`,
    );
    assert.equal(parsed.trim(), String(scripts.length));
  });

  test("the split rule and entity F1 give the golden values (shared with the TypeScript side)", () => {
    const out = JSON.parse(
      py(
        "import json, common as C\n" +
          "letter = {'train': 't', 'dev': 'D', 'test': 'T'}\n" +
          `gold, pred = ${JSON.stringify(F1_GOLD)}, ${JSON.stringify(F1_PRED)}\n` +
          "print(json.dumps({'split': {s: ''.join(letter[C.split_of(i, s)] for i in range(40)) for s in (1, 7)}," +
          " 'f1': C.entity_f1(gold, pred), 'tokens': C.token_accuracy(gold, pred)}))",
      ),
    );
    assert.deepEqual(out.split, SPLIT_GOLDEN);
    assert.ok(Math.abs(out.f1 - F1_GOLDEN) < 1e-12, `entity F1 ${out.f1}`);
    assert.ok(Math.abs(out.tokens - TOKEN_ACCURACY_GOLDEN) < 1e-12, `token accuracy ${out.tokens}`);
  });

  test("the Python SST reader and vocabulary give vpps's vocabulary, in its order", () => {
    const bench = benchModel("treelstm").load(treeFile(), 8192);
    const out = JSON.parse(
      py(
        `import json, common as C\nt = C.read_trees(${JSON.stringify(treeFile())})\n` +
          "print(json.dumps({'n': len(t), 'size': C.Vocab.from_trees(t).size}))",
      ),
    );
    assert.deepEqual(out, { n: bench.items, size: bench.vocabulary });
  });
});

/** Runs `code` with `input` as JSON in the variable `data`; returns what it prints as JSON. */
function pyJson(code: string, input: unknown): unknown {
  const dir = mkdtempSync(join(tmpdir(), "vpps-py-input-"));
  const file = join(dir, "input.json");
  writeFileSync(file, JSON.stringify(input));
  return JSON.parse(
    py(`import json, common as C\ndata = json.load(open(${JSON.stringify(file)}, encoding="utf-8"))\n${code}`),
  );
}

/** `n` pairs of random tag sequences (a linear congruential generator: the same pairs every run). */
function randomTagPairs(n: number): [string[], string[]][] {
  const tags = ["O", "O", "O", "I-PER", "I-LOC", "I-ORG", "B-PER", "B-LOC", "MISC"];
  let x = 12345;
  const next = () => {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    return x >>> 8;
  };
  const seq = (len: number) => Array.from({ length: len }, () => tags[next() % tags.length]!);
  return Array.from({ length: n }, () => {
    const len = 1 + (next() % 12);
    return [seq(len), seq(len)];
  });
}

describe("the Python side agrees with the TypeScript side", { skip: noPython }, () => {
  test("the seeded split (src/data/tagged-split.ts)", () => {
    const seeds = [1, 7, 12345];
    const ts = Object.fromEntries(seeds.map((s) => [s, Array.from({ length: 300 }, (_, i) => splitPart(s, i))]));
    const pyOut = pyJson("print(json.dumps({s: [C.split_of(i, int(s)) for i in range(300)] for s in data}))", seeds);
    assert.deepEqual(pyOut, ts);
  });

  test("entities, entity F1 and token accuracy (src/models/metrics.ts) on 300 random pairs of tag sequences", () => {
    const pairs = randomTagPairs(300);
    const counts: EntityCounts = { predicted: 0, gold: 0, correct: 0 };
    let right = 0;
    let all = 0;
    for (const [g, p] of pairs) {
      countEntities(g, p, counts);
      all += g.length;
      right += g.filter((t, k) => t === p[k]).length;
    }
    const ts = {
      entities: pairs.map(([g]) => entities(g).map((e) => [e.start, e.end, e.type])),
      counts: [counts.correct, counts.predicted, counts.gold],
      f1: f1Score(counts),
      tokens: right / all,
    };
    assert.ok(counts.correct > 0 && counts.correct < counts.predicted, "the pairs exercise partial matches");
    const pyOut = pyJson(
      "gold = [g for g, _ in data]\npred = [p for _, p in data]\n" +
        "print(json.dumps({'entities': [sorted(list(e) for e in C.entities(g)) for g in gold], " +
        "'counts': list(C.entity_counts(gold, pred)), 'f1': C.entity_f1(gold, pred), " +
        "'tokens': C.token_accuracy(gold, pred)}))",
      pairs,
    ) as typeof ts;
    assert.deepEqual(
      pyOut.entities,
      ts.entities.map((es) => [...es].sort((a, b) => Number(a[0]) - Number(b[0]))),
    );
    assert.deepEqual(pyOut.counts, ts.counts);
    assert.ok(Math.abs(pyOut.f1 - ts.f1) < 1e-12, `F1 ${pyOut.f1} against ${ts.f1}`);
    assert.ok(Math.abs(pyOut.tokens - ts.tokens) < 1e-12);
  });

  test("the tagged reader (src/data/tagged.ts): words, tags, lines and tag columns; error positions", () => {
    const text = "\ufeffThe|O  Mad|I-ORG\tCap|I-ORG a|b|O\r\n\n  \n𝔸𝔹|I-MISC x|O\n";
    const ts = parseTagged(text, "f").map((x) => [x.words, x.tags, x.line, x.tagColumns]);
    const pyOut = pyJson(
      "print(json.dumps([[x.words, x.tags, x.line, x.tag_columns] for x in C.parse_tagged(data, 'f')]))",
      text,
    );
    assert.deepEqual(pyOut, ts);
    for (const bad of ["a|O\nb|O cO\n", "a|O b|\n", "x|O |O\n", "\n \n"]) {
      let where = "";
      try {
        parseTagged(bad, "f");
      } catch (e) {
        where = /^f:\d+:\d+/.exec((e as Error).message)?.[0] ?? "";
      }
      assert.notEqual(where, "", bad);
      const pyWhere = pyJson(
        "try:\n    C.parse_tagged(data, 'f')\n    print(json.dumps(''))\n" +
          "except C.DataError as e:\n    print(json.dumps(str(e).split(': ')[0]))",
        bad,
      );
      assert.equal(pyWhere, where, JSON.stringify(bad));
    }
  });

  test("WikiNER's training split and the taggers' vocabularies (words, tags, characters), in order", (t) => {
    const wikiner = join(ROOT, "..", "shared", "data", "wikiner");
    try {
      readdirSync(wikiner);
    } catch {
      t.skip(`no WikiNER copy at ${wikiner}`);
      return;
    }
    const splits = loadTaggedSplits(wikiner, { splitSeed: 1 });
    const vocab = TaggerVocabulary.build(splits.train, { minCount: 5, withChars: true });
    const ts = {
      sizes: [splits.train.length, splits.dev.length],
      words: vocab.words.toJSON(),
      tags: vocab.tags.toJSON(),
      chars: vocab.chars!.toJSON().slice(1),
    };
    const pyOut = pyJson(
      "train, dev, _ = C.load_split('tagged', data, None, 1)\nv = C.TaggerVocab(train, 5)\n" +
        "print(json.dumps({'sizes': [len(train), len(dev)], 'words': v.words.words, 'tags': v.tags, " +
        "'chars': sorted(v.chars, key=v.chars.get)}))",
      wikiner,
    );
    assert.deepEqual(pyOut, ts);
  });
});

describe("the golden values themselves", () => {
  test("FNV-1a of seed:index gives the golden split (an implementation here, from the published vectors)", () => {
    const fnv = (s: string): number => {
      let h = 0x811c9dc5;
      for (const b of Buffer.from(s, "utf8")) h = Math.imul(h ^ b, 0x01000193) >>> 0;
      return h >>> 0;
    };
    assert.equal(fnv("a"), 0xe40c292c);
    assert.equal(fnv("foobar"), 0xbf9cf968);
    for (const [seed, want] of Object.entries(SPLIT_GOLDEN)) {
      const got = [...want].map((_, i) => {
        const r = fnv(`${seed}:${i}`) % 10;
        return r === 0 ? "T" : r === 1 ? "D" : "t";
      });
      assert.equal(got.join(""), want);
    }
  });
});

let treeDir: string | null = null;
/** A few SST trees (the reference reads a file, so the plumbing tests need one). */
function treeFile(): string {
  treeDir ??= mkdtempSync(join(tmpdir(), "vpps-reference-data-"));
  const file = join(treeDir, "train.txt");
  writeFileSync(
    file,
    [
      "(3 (2 (2 The) (2 Rock)) (4 (3 (2 is) (4 destined)) (2 .)))",
      "(1 (2 not) (1 (0 awful) (2 .)))",
      "(2 word)",
      "(4 (4 (4 (4 (3 a) (2 b)) (1 c)) (0 d)) (2 e))",
      "(0 (1 x) (2 (3 y) (4 (0 z) (1 (2 The) (3 unseen)))))",
      "(3 (2 (2 Rock) (2 Rock)) (2 (2 .) (2 not)))",
      "(2 (2 a) (2 b))",
      "(1 (1 c) (2 d))",
      "(3 (2 e) (3 (2 x) (3 y)))",
    ].join("\n"),
  );
  return file;
}

const treeLstm = benchModel("treelstm");

/** The CPU engine's loss on the first batch of 8 at hidden 8, as the suite computes it. */
function cpuFirstLoss(): number {
  const task = treeLstm.load(treeFile(), treeLstm.maxItems);
  const net = task.net({ hidden: 8, embed: 8 }, "fused");
  return new CpuEngine(net.params).forwardScalar(net.batchLoss(new ComputationGraph(), task.batch(8, 0)));
}

/**
 * A stand-in for python3 (a Node script): `-c …` prints a torch version; `<script> bench …` records its arguments
 * and the tensors of the --init-from file in FAKE_REFERENCE_ARGS, then prints the bench JSON with firstBatchLoss
 * FAKE_REFERENCE_LOSS, or fails with one line when FAKE_REFERENCE_FAIL is set.
 */
function fakePython(): string {
  const dir = mkdtempSync(join(tmpdir(), "vpps-fake-python-"));
  const path = join(dir, "python3");
  writeFileSync(
    path,
    `#!${process.execPath}
const fs = require("node:fs");
const args = process.argv.slice(2);
if (args[0] === "-c") { console.log("2.11.0+stand-in"); process.exit(0); }
if (process.env.FAKE_REFERENCE_FAIL) { console.error("Traceback (most recent call last):"); console.error(process.env.FAKE_REFERENCE_FAIL); process.exit(1); }
const at = (flag) => args[args.indexOf(flag) + 1];
const buf = fs.readFileSync(at("--init-from"));
const header = JSON.parse(buf.subarray(8, 8 + Number(buf.readBigUInt64LE(0))).toString());
fs.writeFileSync(process.env.FAKE_REFERENCE_ARGS, JSON.stringify({ args, tensors: Object.keys(header) }));
console.error("pytorch batch   1: progress on stderr");
const rows = at("--batches").split(",").map((b) => ({ batch: Number(b), sentencesPerSecond: 100 * Number(b), msPerBatch: 10, repeats: [10, 10, 10], stepsPerRepeat: 4, warmSteps: 5 }));
console.log(JSON.stringify({ model: "treelstm", reference: "pytorch", device: "Stand-in GPU", torch: "2.11.0+stand-in", cudnn: 91000, items: 9, vocabulary: 27, firstBatchLoss: Number(process.env.FAKE_REFERENCE_LOSS), rows }));
`,
  );
  chmodSync(path, 0o755);
  return path;
}

interface Captured {
  status: number;
  out: string[];
  err: string[];
  json: {
    rows: { engine: string; batch: number; sentencesPerSecond: number }[];
    runs: { engine: string; status: string; reason: string | null }[];
    reference: { args: string[]; device: string | null } | null;
  };
  dir: string;
}

async function benchWithReference(
  t: { mock: { method: (o: object, m: string, f: (...a: unknown[]) => void) => unknown } },
  env: Record<string, string>,
): Promise<Captured> {
  const saved = { ...process.env };
  Object.assign(process.env, env);
  const out: string[] = [];
  const err: string[] = [];
  t.mock.method(console, "log", (l: unknown) => out.push(String(l)));
  t.mock.method(console, "error", (l: unknown) => err.push(String(l)));
  const dir = mkdtempSync(join(tmpdir(), "vpps-reference-out-"));
  try {
    const status = await runThroughput(treeLstm, {
      dataFile: treeFile(),
      engines: ["cpu"],
      batches: [1, 2],
      hidden: [8],
      sentences: 2,
      quick: false,
      reference: true,
      out: dir,
      command: "test",
    });
    const json = JSON.parse(readFileSync(join(dir, "treelstm.json"), "utf8"));
    return { status, out, err, json, dir };
  } finally {
    for (const k of Object.keys(env)) delete process.env[k];
    Object.assign(process.env, saved);
  }
}

describe("vpps bench <model> --reference", () => {
  test("--help lists --reference", () => {
    const r = spawnSync(process.execPath, [join(ROOT, "bin", "vpps.js"), "bench", "treelstm", "--help"], {
      encoding: "utf8",
    });
    assert.equal(r.status, 0, r.stderr);
    assert.match(
      r.stdout.replace(/\s+/g, " "),
      /--reference also time the PyTorch reference, bench\/pytorch\/treelstm\.py/,
    );
  });

  test("without the interpreter: one line says why it is skipped, the engines' results stand", async (t) => {
    const r = await benchWithReference(t, { VPPS_REFERENCE_PYTHON: "/no/such/python3" });
    assert.equal(r.status, 0);
    assert.ok(
      r.out.some((l) => /^\nPyTorch reference: skipped: \/no\/such\/python3 was not found/.test(l)),
      r.out.join("\n"),
    );
    assert.deepEqual(
      r.json.runs.map((x) => `${x.engine} ${x.status}`),
      ["cpu timed", "pytorch skipped"],
    );
    assert.ok(r.json.rows.every((x) => x.engine === "cpu"));
    assert.equal(r.json.reference, null);
  });

  test("a stand-in interpreter: its rows reach the table, the JSON and the plot; its first loss is checked", async (t) => {
    const record = join(mkdtempSync(join(tmpdir(), "vpps-fake-args-")), "args.json");
    const loss = cpuFirstLoss();
    const r = await benchWithReference(t, {
      VPPS_REFERENCE_PYTHON: fakePython(),
      FAKE_REFERENCE_LOSS: String(loss),
      FAKE_REFERENCE_ARGS: record,
    });
    assert.equal(r.status, 0, r.err.join("\n"));
    const seen = JSON.parse(readFileSync(record, "utf8")) as { args: string[]; tensors: string[] };
    assert.equal(seen.args[0], referenceScript("treelstm"));
    assert.equal(seen.args[1], "bench");
    const flag = (f: string) => seen.args[seen.args.indexOf(f) + 1];
    assert.equal(flag("--data"), treeFile());
    assert.equal(flag("--batches"), "1,2");
    assert.equal(flag("--hidden"), "8");
    assert.equal(flag("--optimizer"), "sgd");
    assert.equal(flag("--lr"), "0.05");
    assert.equal(flag("--device"), "cpu");
    assert.equal(flag("--sentences"), "2");
    // vpps's initial weights, by the Tree-LSTM's parameter names
    assert.deepEqual(seen.tensors, [
      "__metadata__",
      "E",
      "W_iou",
      "U_iou",
      "U_f1",
      "U_f2",
      "b_iou",
      "b_f",
      "W_out",
      "b_out",
    ]);
    assert.ok(r.out.includes("pytorch: pytorch batch   1: progress on stderr"), r.out.join("\n"));
    assert.ok(r.out.some((l) => /^pytorch, hidden 8: first batch of 8: loss .* rel\. error 0\.00e\+0$/.test(l)));
    assert.ok(r.out.includes("| batch | cpu | PyTorch |"), r.out.join("\n"));
    assert.deepEqual(
      r.json.rows.filter((x) => x.engine === "pytorch").map((x) => [x.batch, x.sentencesPerSecond]),
      [
        [1, 100],
        [2, 200],
      ],
    );
    assert.equal(r.json.runs.find((x) => x.engine === "pytorch")?.status, "timed");
    assert.equal(r.json.reference?.device, "Stand-in GPU");
    assert.match(readFileSync(join(r.dir, "treelstm.svg"), "utf8"), />PyTorch</);
    assert.match(readFileSync(join(r.dir, "treelstm.md"), "utf8"), /\| batch \| cpu \| PyTorch \|/);
  });

  test("a reference whose first loss is off the CPU engine's is not timed, and the run fails", async (t) => {
    const r = await benchWithReference(t, {
      VPPS_REFERENCE_PYTHON: fakePython(),
      FAKE_REFERENCE_LOSS: String(cpuFirstLoss() * 1.01),
      FAKE_REFERENCE_ARGS: join(mkdtempSync(join(tmpdir(), "vpps-fake-args-")), "args.json"),
    });
    assert.equal(r.status, 1);
    assert.ok(r.err.some((l) => /^pytorch \(hidden 8, embedding 8\): first-batch loss .* not timing it$/.test(l)));
    assert.equal(r.json.runs.find((x) => x.engine === "pytorch")?.status, "wrong-loss");
    assert.ok(r.json.rows.every((x) => x.engine === "cpu"));
  });

  test("a script that fails is one line with its last error line, and the run fails", async (t) => {
    const r = await benchWithReference(t, {
      VPPS_REFERENCE_PYTHON: fakePython(),
      FAKE_REFERENCE_FAIL: "RuntimeError: CUDA out of memory",
      FAKE_REFERENCE_ARGS: join(mkdtempSync(join(tmpdir(), "vpps-fake-args-")), "args.json"),
    });
    assert.equal(r.status, 1);
    assert.ok(
      r.err.some((l) =>
        /^PyTorch reference: failed: .*treelstm\.py exited with status 1: RuntimeError: CUDA out of memory$/.test(l),
      ),
      r.err.join("\n"),
    );
    assert.equal(r.json.runs.find((x) => x.engine === "pytorch")?.status, "failed");
  });

  test("the default interpreter: skipped with the reason where torch is missing, else the real reference's first loss matches", async (t) => {
    const probe = probeReference("python3", referenceScript("treelstm"));
    const r = await benchWithReference(t, {});
    if (!probe.ok) {
      assert.equal(r.status, 0);
      assert.ok(r.out.includes(`\nPyTorch reference: skipped: ${probe.reason}`), r.out.join("\n"));
      return;
    }
    // torch is here: the real Tree-LSTM reference ran on the CPU with vpps's weights
    assert.equal(r.status, 0, r.err.join("\n"));
    assert.equal(r.json.runs.find((x) => x.engine === "pytorch")?.status, "timed");
    assert.equal(r.json.rows.filter((x) => x.engine === "pytorch").length, 2);
  });
});
