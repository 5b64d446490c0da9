/**
 * The command line over many generated bad inputs: malformed tree files (one random mutation of a valid
 * file, each invalid by construction), bad values for every option of every command (from the commander program's
 * own option list), and damaged checkpoints and state.json (truncations, bit flips in the format's structure, changed
 * shapes, fields of the wrong type). Each case must be refused with a non-zero exit status and exactly one line on
 * stderr, `vpps: …`, without a stack trace, and must leave its directories as they were.
 *
 * Seeded: every case draws from its own generator, keyed by the seed and its name (A-12, C-7, ...), so a failure is
 * reproduced alone: the report prints `VPPS_FUZZ_SEED=… VPPS_FUZZ_CASE=… node --import tsx --test
 * test/cli-fuzz.test.ts`. In-process (`main(argv)`, test/cli-harness.ts): the whole file takes seconds.
 */
import assert from "node:assert/strict";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import type { Command, Option } from "commander";
import { buildProgram } from "../src/cli/main.js";
import { type CliResult, cli, copyRun, dataDir, hasTrace, savedRun, snapshot, tempDir } from "./cli-harness.js";

const SEED = Number(process.env.VPPS_FUZZ_SEED ?? 17);
const ONLY = process.env.VPPS_FUZZ_CASE;

/** mulberry32 over a key made from the seed and the case's name. */
function generator(name: string): () => number {
  let s = SEED >>> 0;
  for (let i = 0; i < name.length; i++) s = Math.imul(s ^ name.charCodeAt(i), 2654435761) >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
type Rng = () => number;
const int = (rng: Rng, n: number): number => Math.floor(rng() * n);
const pick = <T>(rng: Rng, xs: readonly T[]): T => xs[int(rng, xs.length)]!;

/** An argument for messages: long ones abbreviated (the case itself regenerates them). */
const show = (a: string): string =>
  a.length > 60 ? `${JSON.stringify(a.slice(0, 30))}…(${a.length} chars)` : JSON.stringify(a);

/** Runs the cases named `${group}-${i}`, collects every failure, and fails once with all of them. */
async function runCases(group: string, count: number, body: (rng: Rng, name: string) => Promise<string | null>) {
  const failures: string[] = [];
  for (let i = 0; i < count; i++) {
    const name = `${group}-${i}`;
    if (ONLY !== undefined && ONLY !== name) continue;
    const why = await body(generator(name), name);
    if (why !== null) {
      failures.push(
        `${name}: ${why}\n  reproduce: VPPS_FUZZ_SEED=${SEED} VPPS_FUZZ_CASE=${name} node --import tsx --test test/cli-fuzz.test.ts`,
      );
    }
  }
  assert.deepEqual(failures.slice(0, 10), [], `${failures.length} of ${count} cases failed (seed ${SEED})`);
}

/** Why `r` is not a one-line refusal (null when it is). */
function notOneLine(r: CliResult, status: readonly number[] = [1, 2]): string | null {
  const lines = r.stderr.split("\n");
  if (!status.includes(r.code)) return `exit status ${r.code}; stderr ${show(r.stderr)}`;
  if (hasTrace(r.stderr)) return `a stack trace: ${show(r.stderr.slice(0, 400))}`;
  if (lines.length !== 2 || lines[1] !== "")
    return `${lines.length - 1} lines on stderr: ${show(r.stderr.slice(0, 400))}`;
  if (!lines[0]!.startsWith("vpps: ")) return `the line does not start with 'vpps: ': ${show(lines[0]!)}`;
  if (lines[0]!.length > 1000) return `a line of ${lines[0]!.length} characters: ${show(lines[0]!)}`;
  return null;
}

// ---- malformed tree files ------------------------------------------------------------------------------------------

const BAD_LABELS = ["x", "-1", "5", "12", "2.5", "٣", "+1", "1e0", "0x1", "NaN"];

/** One mutation of `line` that makes it (and so its file) invalid, and what it was. */
function breakLine(rng: Rng, line: string): { line: string; what: string } {
  const parens = [...line].flatMap((c, i) => (c === "(" || c === ")" ? [i] : []));
  const labels = [...line].flatMap((c, i) => (c === "(" ? [i + 1] : []));
  const labelEnd = (at: number) => line.indexOf(" ", at);
  switch (int(rng, 7)) {
    case 0: {
      const at = 1 + int(rng, line.length - 1);
      return { line: line.slice(0, at), what: `truncated at ${at}` };
    }
    case 1: {
      const at = pick(rng, parens);
      return { line: line.slice(0, at) + line.slice(at + 1), what: `'${line[at]}' at ${at} deleted` };
    }
    case 2: {
      const at = pick(rng, parens);
      return { line: line.slice(0, at) + line[at] + line.slice(at), what: `'${line[at]}' at ${at} doubled` };
    }
    case 3: {
      const at = pick(rng, labels);
      const label = rng() < 0.2 ? "9".repeat(1 + int(rng, 200_000)) : pick(rng, BAD_LABELS);
      return { line: line.slice(0, at) + label + line.slice(labelEnd(at)), what: `label at ${at} → ${show(label)}` };
    }
    case 4: {
      const at = pick(rng, labels);
      const token = "w".repeat(100_000 + int(rng, 2_000_000));
      return {
        line: line.slice(0, at) + token + line.slice(labelEnd(at)),
        what: `label at ${at} → a ${token.length}-character word`,
      };
    }
    case 5: {
      const token = pick(rng, ["x", "(", ")", "y".repeat(1 + int(rng, 1_000_000))]);
      return { line: `${line} ${token}`, what: `${show(token)} after the tree` };
    }
    default: {
      // a node with three children, or a preterminal with two words
      const at = line.indexOf(")");
      return { line: `${line.slice(0, at)} extra${line.slice(at)}`, what: "a second word in the first preterminal" };
    }
  }
}

/** Bytes that are not UTF-8 wherever they are put between ASCII characters (a lone continuation or invalid lead). */
function notUtf8(rng: Rng): Buffer {
  const lead = pick(rng, [0x80, 0x9f, 0xbf, 0xc0, 0xc1, 0xf5, 0xfe, 0xff]);
  return Buffer.from([lead, ...Array.from({ length: int(rng, 4) }, () => int(rng, 256))]);
}

/** A file made invalid: one line broken, binary bytes, nothing but blanks, or every line ending in CR alone. */
function breakFile(rng: Rng, text: string): { bytes: Buffer; what: string } {
  const lines = text.trimEnd().split("\n");
  const k = int(rng, lines.length);
  const r = rng();
  if (r < 0.12) {
    const at = int(rng, text.length + 1);
    const bad = notUtf8(rng);
    return {
      bytes: Buffer.concat([Buffer.from(text.slice(0, at)), bad, Buffer.from(text.slice(at))]),
      what: `bytes ${[...bad].map((b) => b.toString(16)).join(" ")} at ${at}`,
    };
  }
  if (r < 0.16) return { bytes: Buffer.from(pick(rng, ["", "\n", "  \n\t\n", "\r\n\r\n"])), what: "no trees" };
  if (r < 0.2) return { bytes: Buffer.from(lines.join("\r")), what: "lines separated by CR alone" };
  const broken = breakLine(rng, lines[k]!);
  lines[k] = broken.line;
  return { bytes: Buffer.from(`${lines.join("\n")}\n`), what: `line ${k + 1}: ${broken.what}` };
}

describe("fuzz: malformed tree files", () => {
  const data = dataDir(12);
  const train = readFileSync(join(data, "train.txt"), "utf8");
  const dev = readFileSync(join(data, "dev.txt"), "utf8");
  const tiny = ["--hidden", "3", "--embed", "3", "--epochs", "1", "--cell", "ops"];

  test("vpps train --data: refused in one line, --out not created, the data untouched", async () => {
    await runCases("A", 160, async (rng) => {
      const dir = tempDir("fuzz-data");
      const which = rng() < 0.75 ? "train.txt" : "dev.txt";
      const broken = breakFile(rng, which === "train.txt" ? train : dev);
      writeFileSync(join(dir, "train.txt"), which === "train.txt" ? broken.bytes : train);
      writeFileSync(join(dir, "dev.txt"), which === "dev.txt" ? broken.bytes : dev);
      const outParent = tempDir("fuzz-out");
      const before = snapshot(dir);
      const r = await cli("train", "treelstm", "--data", dir, ...tiny, "--out", join(outParent, "out"));
      const why = notOneLine(r, [1]);
      if (why !== null) return `${which}, ${broken.what}: ${why}`;
      if (!r.stderr.includes(which))
        return `${which}, ${broken.what}: the line does not name the file: ${show(r.stderr)}`;
      if (snapshot(dir) !== before) return `${which}, ${broken.what}: the data directory changed`;
      if (readdirSync(outParent).length !== 0) return `${which}, ${broken.what}: --out was created`;
      return null;
    });
  });

  test("vpps eval --data: refused in one line, the run untouched", async () => {
    const run = await savedRun(data);
    const before = snapshot(run);
    await runCases("B", 60, async (rng) => {
      const file = join(tempDir("fuzz-eval"), "dev.txt");
      const broken = breakFile(rng, dev);
      writeFileSync(file, broken.bytes);
      const r = await cli("eval", "treelstm", "--run", run, "--data", file);
      const why = notOneLine(r, [1]);
      if (why !== null) return `${broken.what}: ${why}`;
      return snapshot(run) === before ? null : `${broken.what}: the run changed`;
    });
  });
});

// ---- bad option values -----------------------------------------------------------------------------------------------

/** Every command that takes options and no subcommands, with its path (`train treelstm`). */
function leaves(c: Command, path: string[] = []): { path: string[]; options: readonly Option[] }[] {
  if (c.commands.length === 0) return [{ path, options: c.options }];
  return c.commands.flatMap((s) => leaves(s, [...path, s.name()]));
}

/** Values no option should take, and the usual suspects for numbers, lists and names. */
function candidates(rng: Rng): string[] {
  const garbage = Buffer.from(Array.from({ length: 1 + int(rng, 12) }, () => int(rng, 256))).toString("latin1");
  return [
    ...["", " ", "a\0b", "x".repeat(1 << 20)], // refused by every option that parses its value
    ...["-1", "0", "abc", "NaN", "Infinity", "1e999", "0x10", "1.5", "1,,2", ",", "99999999999999999999", "cuda:-1"],
    ...["🙂", "--", "-", "../..", garbage, "9".repeat(1000), "1e-400", "-0", "+3"],
  ];
}

describe("fuzz: bad option values for every option of every command", () => {
  test("a value the option's parser refuses is one line naming the option, status 2; '' and NUL are refused everywhere", async () => {
    const cwdBefore = readdirSync(process.cwd()).sort().join(",");
    const cases: { path: string[]; option: Option; value: string; refused: boolean }[] = [];
    const rng = generator("options");
    for (const { path, options } of leaves(buildProgram())) {
      for (const option of options) {
        if (!(option.required || option.optional) || option.parseArg === undefined) continue;
        for (const value of candidates(rng)) {
          let refused = false;
          try {
            option.parseArg(value, undefined);
          } catch {
            refused = true;
          }
          cases.push({ path, option, value, refused });
        }
      }
    }
    assert.ok(cases.length > 800, `${cases.length} cases`);
    await runCases("O", cases.length, async (_, name) => {
      const { path, option, value, refused } = cases[Number(name.slice(2))]!;
      const flag = option.long!;
      const what = `vpps ${path.join(" ")} ${flag} ${show(value)}`;
      if (!refused) {
        // '', blanks and NUL bytes never name anything; a 1 MB value is no size, name or list either
        const mustRefuse = value === "" || value.includes("\0") || value.length > 100_000;
        return mustRefuse ? `${what}: the parser accepted it` : null;
      }
      const r = await cli(...path, flag, value);
      const why = notOneLine(r, [2]);
      if (why !== null) return `${what}: ${why}`;
      return r.stderr.includes(flag) ? null : `${what}: the line does not name ${flag}: ${show(r.stderr)}`;
    });
    // an option without its value, and one that does not exist
    await runCases("M", 1, async () => {
      for (const { path, options } of leaves(buildProgram())) {
        for (const o of options.filter((x) => x.required)) {
          const why = notOneLine(await cli(...path, o.long!), [2]);
          if (why !== null) return `vpps ${path.join(" ")} ${o.long}: ${why}`;
        }
        const why = notOneLine(await cli(...path, "--no-such-option"), [2]);
        if (why !== null) return `vpps ${path.join(" ")} --no-such-option: ${why}`;
      }
      return null;
    });
    assert.equal(readdirSync(process.cwd()).sort().join(","), cwdBefore, "nothing was written here");
  });
});

// ---- damaged checkpoints and state.json ----------------------------------------------------------------------------

/** Positions of JSON punctuation outside strings. */
function structuralJson(text: string): number[] {
  const out: number[] = [];
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (inString) {
      if (c === "\\") i++;
      else if (c === '"') {
        inString = false;
        out.push(i);
      }
    } else if (c === '"') {
      inString = true;
      out.push(i);
    } else if ("{}[]:,".includes(c)) out.push(i);
  }
  return out;
}

const flip = (b: Buffer, at: number, bit: number): Buffer => {
  const c = Buffer.from(b);
  c[at]! ^= 1 << bit;
  return c;
};

/** state.json as the damage below edits it. */
interface State {
  options: Record<string, unknown>;
  epochs: Record<string, unknown>[];
  vocabulary: unknown[];
  training: Record<string, unknown>;
  [field: string]: unknown;
}

/** A field of state.json and values it must refuse there (wrong type, out of range, not the model's). */
const FIELD_DAMAGE: [string, (s: State, v: unknown) => void, unknown[]][] = [
  ["options.hidden", (s, v) => void (s.options.hidden = v), [-1, 0, 1.5, "8", null, [], {}, true]],
  ["options.embed", (s, v) => void (s.options.embed = v), [-2, 2.5, "x", null]],
  ["options.cell", (s, v) => void (s.options.cell = v), ["bogus", 1, null, "", "FUSED"]],
  ["options", (s, v) => void (s.options = v as State["options"]), [null, 3, "x", []]],
  ["epochs", (s, v) => void (s.epochs = v as State["epochs"]), [[], null, "1", 5, {}]],
  ["epochs[0]", (s, v) => void (s.epochs[0] = v as State["epochs"][0]), [null, 3, "x", []]],
  ["epochs[0].epoch", (s, v) => void (s.epochs[0].epoch = v), [0, -1, 1.5, "1", null]],
  ["epochs[0].trainLoss", (s, v) => void (s.epochs[0].trainLoss = v), [null, "0.5", []]],
  ["epochs[0].devAccuracy", (s, v) => void (s.epochs[0].devAccuracy = v), [null, "x"]],
  ["vocabulary", (s, v) => void (s.vocabulary = v as unknown[]), [null, 5, "a", {}, []]],
  ["vocabulary[0]", (s, v) => void (s.vocabulary[0] = v), ["the", 1, null]],
  ["vocabulary[1]", (s, v) => void (s.vocabulary[1] = v), [null, 7, {}, "<unk>"]],
  ["model", (s, v) => void (s.model = v), [3, "rvnn", null, ""]],
  ["training.seed", (s, v) => void (s.training.seed = v), [1.5, "1", null]],
  ["training.shuffle", (s, v) => void ((s.training as Record<string, unknown>).shuffle = v), ["rows", 3, ""]],
  [
    "the file",
    (s) => {
      for (const k of Object.keys(s)) delete s[k];
    },
    [null],
  ],
];

describe("fuzz: damaged checkpoints and state.json", async () => {
  const data = dataDir(12);
  const run = await savedRun(data);
  const checkpoint = readFileSync(join(run, "epoch-1.safetensors"));
  const headerEnd = 8 + Number(checkpoint.readBigUInt64LE(0));
  const stateText = readFileSync(join(run, "state.json"), "utf8");
  const state = JSON.parse(stateText);
  const dev = join(data, "dev.txt");

  /** A damaged copy of the run: what was done to it, and the new bytes of one of its files. */
  function damage(rng: Rng): { what: string; file: string; bytes: Buffer | string } {
    const k = int(rng, 7);
    if (k === 0) {
      const at = int(rng, checkpoint.length);
      return {
        what: `checkpoint truncated to ${at} bytes`,
        file: "epoch-1.safetensors",
        bytes: checkpoint.subarray(0, at),
      };
    }
    if (k === 1) {
      // the header's punctuation outside strings: a comma inside the metadata's strings (the run's state is kept
      // there as JSON text) is text, and flipping it is as undetectable as a flip in the data (no checksum)
      const at = 8 + pick(rng, structuralJson(checkpoint.subarray(8, headerEnd).toString("latin1")));
      const bit = int(rng, 8);
      return {
        what: `checkpoint: bit ${bit} of header byte ${at} ('${String.fromCharCode(checkpoint[at]!)}') flipped`,
        file: "epoch-1.safetensors",
        bytes: flip(checkpoint, at, bit),
      };
    }
    if (k === 2) {
      // the header length, changed by 8 or more: the header then ends inside its JSON or inside the data
      const byte = int(rng, 8);
      const bit = byte === 0 ? 3 + int(rng, 5) : int(rng, 8);
      return {
        what: `checkpoint: bit ${bit} of header-length byte ${byte} flipped`,
        file: "epoch-1.safetensors",
        bytes: flip(checkpoint, byte, bit),
      };
    }
    if (k === 3) {
      const at = int(rng, stateText.length - 1); // the closing brace always goes
      return { what: `state.json truncated to ${at} characters`, file: "state.json", bytes: stateText.slice(0, at) };
    }
    if (k === 4) {
      const at = pick(rng, structuralJson(stateText));
      const bit = int(rng, 8);
      const bytes = flip(Buffer.from(stateText), at, bit);
      return { what: `state.json: bit ${bit} of '${stateText[at]}' at ${at} flipped`, file: "state.json", bytes };
    }
    const s = structuredClone(state) as State;
    if (k === 5) {
      // shapes no longer the checkpoint's: a size, or the vocabulary's length
      const change = pick(rng, ["hidden", "embed", "vocabulary+", "vocabulary-"]);
      if (change === "vocabulary+") s.vocabulary.push(...Array.from({ length: 1 + int(rng, 5) }, (_, i) => `new-${i}`));
      else if (change === "vocabulary-") s.vocabulary.splice(1, 1 + int(rng, s.vocabulary.length - 2));
      else s.options[change] = (s.options[change] as number) + 1 + int(rng, 6);
      return { what: `state.json: ${change} changed`, file: "state.json", bytes: JSON.stringify(s) };
    }
    const [field, set, values] = pick(rng, FIELD_DAMAGE);
    const value = pick(rng, values);
    set(s, value);
    return { what: `state.json: ${field} = ${JSON.stringify(value)}`, file: "state.json", bytes: JSON.stringify(s) };
  }

  test("--resume and vpps eval --run: refused in one line, the run untouched (or, state.json damaged, continued from the newest intact checkpoint)", async () => {
    await runCases("C", 120, async (rng) => {
      const d = damage(rng);
      const dir = copyRun(run);
      writeFileSync(join(dir, d.file), d.bytes);
      const before = snapshot(dir);
      const command =
        rng() < 0.5
          ? ["train", "treelstm", "--resume", dir, "--data", data, "--epochs", "2"]
          : ["eval", "treelstm", "--run", dir, "--data", dev];
      const r = await cli(...command);
      // a damaged state.json loses nothing: the checkpoints carry the run's state, and the command continues from
      // the newest intact one, saying so; it may then train and write, as a resumed run does
      if (d.file === "state.json" && r.code === 0) {
        if (hasTrace(r.stderr)) return `${command[0]}, ${d.what}: a trace`;
        return /continuing from the newest intact checkpoint/.test(r.stdout + r.stderr)
          ? null
          : `${command[0]}, ${d.what}: exit status 0 without the line saying it continued from a checkpoint`;
      }
      const why = notOneLine(r, [1]);
      if (why !== null) return `${command[0]}, ${d.what}: ${why}`;
      return snapshot(dir) === before ? null : `${command[0]}, ${d.what}: the run directory changed`;
    });
  });

  test("bit flips in the checkpoint's data (no checksum in the format): evaluated or refused, never a trace", async () => {
    await runCases("D", 16, async (rng) => {
      const at = headerEnd + int(rng, checkpoint.length - headerEnd);
      const bit = int(rng, 8);
      const dir = copyRun(run);
      writeFileSync(join(dir, "epoch-1.safetensors"), flip(checkpoint, at, bit));
      const r = await cli("eval", "treelstm", "--run", dir, "--data", dev);
      if (r.code === 0) return hasTrace(r.stderr) ? `data byte ${at} bit ${bit}: a trace` : null;
      const why = notOneLine(r, [1]);
      return why === null ? null : `data byte ${at} bit ${bit}: ${why}`;
    });
  });

  test("the run itself is intact: it evaluates; --split is refused in one line (the Tree-LSTM splits no file)", async () => {
    const r = await cli("eval", "treelstm", "--run", run, "--data", dev);
    assert.equal(r.code, 0, r.stderr);
    const split = await cli("eval", "treelstm", "--run", run, "--data", dev, "--split", "test");
    assert.equal(notOneLine(split, [1]), null, split.stderr);
    assert.match(split.stderr, /--split test: treelstm does not split a single file .* give the file of that part/);
  });
});
