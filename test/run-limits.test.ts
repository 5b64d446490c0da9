// What a user can cause ends in one line, never a trace or a hang: data readers take regular files only and bound
// what they read and inflate; operating-system errors (a full disk, a protected path, a directory where vpps writes
// a file) become one line naming the path and what to do; a malformed results file for `vpps bench plot` is named.
// Cases (kinds of file, names, sizes, errno codes, corruptions) are generated from a seeded generator.

import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { closeSync, mkdirSync, openSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { gzipSync } from "node:zlib";
import { readResult, runPlot } from "../src/bench/diagnostics/plot.js";
import { BENCH_MODELS } from "../src/bench/models/index.js";
import { reportError } from "../src/cli/main.js";
import { readIdx } from "../src/data/idx.js";
import { DataError, maxDataBytes, readTextFile } from "../src/data/text-file.js";
import { RandomStream } from "../src/util/random.js";
import { type CliResult, cli, dataDir, hasTrace, TINY, tempDir } from "./cli-harness.js";

const SEED = Number(process.env.VPPS_PROBE_SEED ?? 41);
const rng = new RandomStream(SEED);
const int = (n: number): number => Math.floor(rng.uniform() * n);
const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)]!;

/** A generated file name: letters, digits, spaces, dots, non-ASCII. */
function name(): string {
  const parts = ["a", "Z", "7", " ", ".", "-", "é", "数", "_"];
  let s = pick(["d", "x", "run", "data"]);
  for (let i = int(8); i > 0; i--) s += pick(parts);
  return s.trim() || "n";
}

function oneLine(r: CliResult, pattern: RegExp, code = 1): void {
  assert.equal(r.code, code, `status ${r.code}: ${r.stderr}`);
  assert.ok(!hasTrace(r.stderr), r.stderr);
  const lines = r.stderr.split("\n").filter((l) => l.startsWith("vpps: "));
  assert.equal(lines.length, 1, r.stderr);
  assert.match(lines[0]!, pattern);
}

describe("data readers take regular files only, of bounded size", () => {
  test("a directory, a FIFO, /dev/zero, a link to a device: one line each, no hang", async () => {
    const kinds: [string, (p: string) => void, RegExp][] = [
      ["directory", (p) => mkdirSync(p), /is a directory, not a file/],
      ["fifo", (p) => execFileSync("mkfifo", [p]), /is a named pipe \(FIFO\); give a regular file/],
      ["/dev/zero", (p) => symlinkSync("/dev/zero", p), /is a device; give a regular file/],
      ["/dev/null", (p) => symlinkSync("/dev/null", p), /is a device; give a regular file/],
    ];
    for (const [kind, make, why] of kinds) {
      // generated: which file of the data directory, and the directory's name
      const dir = join(tempDir("kinds"), name());
      const good = dataDir(10);
      mkdirSync(dir);
      const which = pick(["train.txt", "dev.txt"]);
      for (const f of ["train.txt", "dev.txt"]) {
        if (f === which) make(join(dir, f));
        else writeFileSync(join(dir, f), readTextFile(join(good, f)));
      }
      const r = await cli("train", "treelstm", "--data", dir, ...TINY);
      oneLine(r, new RegExp(`^vpps: .*${which.replace(".", "\\.")}.* ${why.source}`), 1);
      assert.ok(kind.length > 0);
      // the file alone, as eval's --data
      assert.throws(
        () => readTextFile(join(dir, which)),
        (e: unknown) => e instanceof DataError && why.test(e.message),
      );
    }
  });

  test("a file over the limit, and gzip data inflating over it, are refused naming the limit", () => {
    const dir = tempDir("big");
    for (let k = 0; k < 4; k++) {
      const limit = 1000 + int(5000);
      const env = { VPPS_MAX_DATA_BYTES: String(limit) };
      assert.equal(maxDataBytes(env), limit);
      const before = process.env.VPPS_MAX_DATA_BYTES;
      process.env.VPPS_MAX_DATA_BYTES = String(limit);
      try {
        const p = join(dir, `${name()}.txt`);
        writeFileSync(p, "(1 a)\n".repeat(Math.ceil((limit + 1 + int(1000)) / 6)));
        assert.throws(
          () => readTextFile(p, "tree file"),
          (e: unknown) =>
            e instanceof DataError &&
            /more than the .* MiB a data file may have; .*VPPS_MAX_DATA_BYTES/.test(e.message),
        );
        // a gzip bomb: a few bytes that inflate past the limit
        const bomb = join(dir, `${name()}-idx3-ubyte.gz`);
        writeFileSync(bomb, gzipSync(Buffer.alloc(limit * (2 + int(50)))));
        assert.throws(
          () => readIdx(bomb),
          (e: unknown) =>
            e instanceof DataError && /inflate to more than the \d+ bytes a data file may have/.test(e.message),
        );
        // at the limit: read
        const ok = join(dir, `${name()}.txt`);
        writeFileSync(ok, "x".repeat(limit));
        assert.equal(readTextFile(ok).length, limit);
      } finally {
        if (before === undefined) delete process.env.VPPS_MAX_DATA_BYTES;
        else process.env.VPPS_MAX_DATA_BYTES = before;
      }
    }
    for (const bad of ["0", "-5", "1.5", "lots"]) {
      assert.throws(
        () => maxDataBytes({ VPPS_MAX_DATA_BYTES: bad }),
        /VPPS_MAX_DATA_BYTES must be a positive whole number/,
      );
    }
  });
});

/** reportError's line and status for `e`, stderr captured. */
function reported(e: unknown): { status: number; text: string } {
  let text = "";
  const write = process.stderr.write;
  process.stderr.write = ((chunk: string) => {
    text += chunk;
    return true;
  }) as typeof process.stderr.write;
  try {
    return { status: reportError(e, null), text };
  } finally {
    process.stderr.write = write;
  }
}

describe("operating-system errors end in one line", () => {
  test("generated errno errors (code, system call, path) print one line naming the path and what to do", () => {
    const codes = [
      "ENOSPC",
      "EDQUOT",
      "EROFS",
      "EACCES",
      "EPERM",
      "EISDIR",
      "ENOTDIR",
      "EMFILE",
      "EIO",
      "ENAMETOOLONG",
    ];
    const calls = ["open", "write", "rename", "mkdir", "fsync", "unlink", "scandir"];
    for (let k = 0; k < 40; k++) {
      const code = pick(codes);
      const syscall = pick(calls);
      const path = join("/", name(), name());
      const e = Object.assign(new Error(`${code}: ${syscall} '${path}'`), { code, syscall, path, errno: -1 });
      // and as Node's own fs check wraps it (ERR_FS_EISDIR …)
      const wrapped = Object.assign(new Error("SystemError"), {
        code: `ERR_FS_${code}`,
        info: { code, syscall, path },
      });
      for (const err of [e, wrapped]) {
        const { status, text } = reported(err);
        assert.equal(status, 1, text);
        assert.equal(text.split("\n").filter(Boolean).length, 1, text);
        assert.ok(text.startsWith("vpps: cannot ") && text.includes(path) && /; \S/.test(text), text);
        assert.ok(!hasTrace(text), text);
      }
    }
    // not an OS error: still a bug, with its trace
    const bug = reported(new TypeError("x is undefined"));
    assert.equal(bug.status, 70);
    assert.match(bug.text, /this is a bug in vpps/);
  });

  test("a directory (or FIFO) where vpps writes its lock, state, checkpoint or temporary file: one line", async () => {
    const data = dataDir(12);
    const names = ["vpps.lock", "state.json", `epoch-${1 + int(9)}.safetensors`, `state.json.tmp-${1 + int(99999)}`];
    names.push(`epoch-${1 + int(9)}.safetensors.tmp-${1 + int(99999)}`);
    for (const n of names) {
      const out = join(tempDir("taken"), name());
      mkdirSync(out, { recursive: true });
      if (rng.uniform() < 0.7) mkdirSync(join(out, n));
      else execFileSync("mkfifo", [join(out, n)]);
      oneLine(
        await cli("train", "treelstm", "--data", data, ...TINY, "--out", out),
        /is not a regular file \(a directory or another kind\); move it away or choose another directory/,
      );
    }
  });

  test("a full disk under --out (a tiny tmpfs, where this user may mount one): one line at the lock, checkpoint or state", async (t) => {
    const mnt = tempDir("full");
    const mounted = spawnSync("mount", ["-t", "tmpfs", "-o", "size=64k", "tmpfs", mnt], { encoding: "utf8" });
    if (mounted.status !== 0) {
      t.skip(`cannot mount a tmpfs here (${(mounted.stderr || mounted.error?.message || "").trim().split("\n")[0]})`);
      return;
    }
    try {
      const data = dataDir(12);
      // generated fill levels: from a full disk (the lock cannot be written) to room for the lock but not a checkpoint
      const free = [0, 100 + int(2000), 2000 + int(20_000), 64 * 1024 - 100 - int(3000)];
      for (const room of free) {
        const fill = join(mnt, "fill");
        writeFileSync(fill, Buffer.alloc(Math.max(0, 64 * 1024 - room)));
        const out = join(mnt, name());
        const r = await cli(
          "train",
          "treelstm",
          "--data",
          data,
          ...TINY,
          "--hidden",
          String(4 + 4 * int(8)),
          "--out",
          out,
        );
        if (r.code === 0) continue; // it fitted
        oneLine(
          r,
          /cannot write the lock .* \(no space left on the device\); free space there|cannot write .*(epoch-1\.safetensors|state\.json): no space left on the device; free space/,
        );
        // nothing half-written is left: no temporary file, no lock
        const left = spawnSync("find", [mnt, "-name", "*.tmp-*", "-o", "-name", "vpps.lock"], {
          encoding: "utf8",
        }).stdout;
        assert.equal(left.trim(), "", left);
        rmSync(fill);
        rmSync(out, { recursive: true, force: true });
      }
    } finally {
      spawnSync("umount", [mnt]);
    }
  });

  test("a full disk on stdout (/dev/full): one line, status 1", () => {
    for (const args of [["--help"], ["plan", "treelstm", "--hidden", String(4 * (1 + int(64)))]]) {
      // stdout opened on /dev/full, which fails every write with ENOSPC
      const full = openSync("/dev/full", "w");
      const r = spawnSync(process.execPath, ["bin/vpps.js", ...args], {
        stdio: ["ignore", full, "pipe"],
        encoding: "utf8",
      });
      closeSync(full);
      assert.equal(r.status, 1, r.stderr);
      assert.equal(
        r.stderr.trim(),
        "vpps: cannot write the output (stdout): no space left on the device; free space on the disk it goes to, or send it elsewhere",
      );
    }
  });

  test("a malformed results file for bench plot is named in one line", () => {
    const model = BENCH_MODELS[0]!;
    const good = JSON.stringify({ device: "x", rows: [{ engine: "cpu", batch: 1, sentencesPerSecond: 10 }] });
    // generated corruptions: truncated at a random place, wrong types, not JSON, a directory
    const corruptions: ((dir: string, p: string) => void)[] = [
      (_, p) => writeFileSync(p, good.slice(0, 1 + int(good.length - 2))),
      (_, p) => writeFileSync(p, JSON.stringify({ rows: [{ batch: "1", sentencesPerSecond: 1 }] })),
      (_, p) => writeFileSync(p, JSON.stringify({ rows: { batch: 1 } })),
      (_, p) => writeFileSync(p, JSON.stringify([1, 2])),
      (_, p) => writeFileSync(p, Buffer.from([0xff, 0xfe, 0x00])),
      (_, p) => mkdirSync(p),
    ];
    for (const corrupt of corruptions) {
      const dir = join(tempDir("plot"), name());
      mkdirSync(dir);
      const p = join(dir, `${model.name}.json`);
      corrupt(dir, p);
      const { status, text } = reported(
        (() => {
          try {
            runPlot(model, { device: "x", dir });
          } catch (e) {
            return e;
          }
          return new Error("no error");
        })(),
      );
      assert.equal(status, 1, text);
      assert.match(text, new RegExp(`^vpps: results file ${p.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}`));
      assert.equal(text.split("\n").filter(Boolean).length, 1);
    }
    const dir = tempDir("plot-ok");
    writeFileSync(join(dir, "r.json"), good);
    assert.equal(readResult(join(dir, "r.json")).rows.length, 1);
  });
});
