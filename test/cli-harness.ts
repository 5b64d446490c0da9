/**
 * Running the command line in-process, as the error tests and the fuzz test do: `main(argv)` with stdout and stderr
 * captured and the exit status returned (no child process, so hundreds of runs take seconds). Also a few files: a
 * small valid data directory and a small saved run, made once per test file.
 */
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { main } from "../src/cli/main.js";
import { redirectOutput } from "../src/cli/output.js";
import { syntheticTrees } from "../src/data/synthetic.js";
import { formatTree } from "../src/data/tree.js";

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** `vpps ...args`, in this process. */
export async function cli(...args: string[]): Promise<CliResult> {
  let stdout = "";
  let stderr = "";
  const err = process.stderr.write;
  const capture =
    (into: (s: string) => void) =>
    (chunk: unknown, ...rest: unknown[]): boolean => {
      into(typeof chunk === "string" ? chunk : Buffer.from(chunk as Uint8Array).toString("utf8"));
      const done = rest.find((r) => typeof r === "function") as (() => void) | undefined;
      done?.();
      return true;
    };
  // stdout through writeOut only (commander's help and version too): the test runner reports on process.stdout
  redirectOutput((s) => {
    stdout += s;
  });
  process.stderr.write = capture((s) => {
    stderr += s;
  }) as typeof process.stderr.write;
  let code: number;
  try {
    code = await main(["node", "vpps", ...args]);
  } finally {
    process.stderr.write = err;
    redirectOutput(null);
    process.exitCode = 0; // the test process's own status
  }
  return { code, stdout, stderr };
}

/** Whether a stack trace is in `text` (a line `    at f (file.ts:1:2)`). */
export const hasTrace = (text: string): boolean => /^\s+at .*(:\d+:\d+\)?|<anonymous>\)?)$/m.test(text);

export function tempDir(prefix: string): string {
  return mkdtempSync(join(tmpdir(), `vpps-${prefix}-`));
}

/** A data directory: `train.txt` of `trainCount` synthetic trees and `dev.txt` of 20. */
export function dataDir(trainCount = 30): string {
  const dir = tempDir("data");
  writeFileSync(join(dir, "train.txt"), `${syntheticTrees(trainCount, 5).map(formatTree).join("\n")}\n`);
  writeFileSync(join(dir, "dev.txt"), `${syntheticTrees(20, 6).map(formatTree).join("\n")}\n`);
  return dir;
}

/** The options of the tiny runs the tests save: a second of CPU. */
export const TINY = ["--hidden", "4", "--embed", "4", "--epochs", "1", "--batch", "8", "--cell", "ops"];

/** A run saved with --out (one epoch of a tiny model on `data`), made once and copied for each use. */
export async function savedRun(data: string): Promise<string> {
  const out = join(tempDir("run"), "run");
  const r = await cli("train", "treelstm", "--data", data, ...TINY, "--out", out);
  if (r.code !== 0) throw new Error(`the run to corrupt did not train: ${r.stderr}`);
  return out;
}

/** A fresh copy of the run directory `run`. */
export function copyRun(run: string): string {
  const dir = join(tempDir("copy"), "run");
  mkdirSync(dir);
  cpSync(run, dir, { recursive: true });
  return dir;
}

/** Every file under `dir` with its size, modification time and a content hash: "nothing was written here". */
export function snapshot(dir: string): string {
  const lines: string[] = [];
  const walk = (d: string): void => {
    for (const name of readdirSync(d).sort()) {
      const p = join(d, name);
      const st = statSync(p);
      if (st.isDirectory()) {
        lines.push(`${p}/`);
        walk(p);
      } else {
        lines.push(`${p} ${st.size} ${st.mtimeMs} ${hash(readFileSync(p))}`);
      }
    }
  };
  walk(dir);
  return lines.join("\n");
}

function hash(bytes: Uint8Array): number {
  let h = 2166136261;
  for (let i = 0; i < bytes.length; i++) h = Math.imul(h ^ bytes[i]!, 16777619);
  return h >>> 0;
}
