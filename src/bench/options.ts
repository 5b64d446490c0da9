/**
 * Option parsers for the bench commands. Each one fails with a BenchUsageError naming the option, what it expected
 * and what it got (cut to a readable length); the command line prints it as one line (exit status 2).
 */
import { existsSync, statSync } from "node:fs";
import { join } from "node:path";
import { quote } from "../util/text.js";
import { BenchUsageError } from "./errors.js";

function items(flag: string, given: string): string[] {
  const out = given.split(",").map((s) => s.trim());
  if (out.some((s) => s === "")) throw new BenchUsageError(`${flag}: an empty item in ${quote(given)}`);
  return out;
}

/** A whole number ≥ `min`. */
export function wholeNumber(flag: string, min = 1): (v: string) => number {
  return (v) => {
    if (!/^\d+$/.test(v.trim()) || Number(v) < min) {
      throw new BenchUsageError(`${flag}: expected a whole number ≥ ${min}; got ${quote(v)}`);
    }
    return Number(v);
  };
}

/** Comma-separated whole numbers ≥ `min`, sorted, duplicates dropped. */
export function numberList(flag: string, min = 1): (v: string) => number[] {
  return (v) => {
    const parse = wholeNumber(flag, min);
    const xs = items(flag, v).map((x) => {
      try {
        return parse(x);
      } catch {
        throw new BenchUsageError(`${flag}: ${quote(x)} is not a whole number ≥ ${min} (given: ${quote(v)})`);
      }
    });
    return [...new Set(xs)].sort((a, b) => a - b);
  };
}

/** One of `allowed`. */
export function choice<T extends string>(flag: string, allowed: readonly T[]): (v: string) => T {
  return (v) => {
    if (!(allowed as readonly string[]).includes(v)) {
      throw new BenchUsageError(`${flag}: expected one of ${allowed.join(", ")}; got ${quote(v)}`);
    }
    return v as T;
  };
}

/** Comma-separated values of `allowed`, kept in `allowed`'s order, duplicates dropped. */
export function choiceList<T extends string>(flag: string, allowed: readonly T[]): (v: string) => T[] {
  return (v) => {
    const picked = new Set<string>();
    for (const item of items(flag, v)) {
      if (!(allowed as readonly string[]).includes(item)) {
        throw new BenchUsageError(`${flag}: ${quote(item)} is not one of ${allowed.join(", ")} (given: ${quote(v)})`);
      }
      picked.add(item);
    }
    return allowed.filter((a) => picked.has(a));
  };
}

/** Refuses what cannot name a file: nothing, a NUL byte, more than a path's 4096 characters. */
function checkPath(flag: string, v: string): void {
  if (v.trim() === "" || v.includes("\0") || v.length > 4096) {
    throw new BenchUsageError(`${flag}: expected a file or folder name; got ${quote(v)}`);
  }
}

/** A tree file (one PTB tree per line), or a folder holding `train.txt`. */
export function treeFile(flag: string): (v: string) => string {
  return (v) => {
    checkPath(flag, v);
    if (!existsSync(v)) {
      throw new BenchUsageError(`${flag}: ${quote(v)} does not exist; give the SST train.txt (one PTB tree per line)`);
    }
    if (!statSync(v).isDirectory()) return v;
    const inside = join(v, "train.txt");
    if (!existsSync(inside)) throw new BenchUsageError(`${flag}: the folder ${quote(v)} has no train.txt`);
    return inside;
  };
}

/** A file or folder that exists. */
export function existingPath(flag: string): (v: string) => string {
  return (v) => {
    checkPath(flag, v);
    if (!existsSync(v)) throw new BenchUsageError(`${flag}: ${quote(v)} does not exist`);
    return v;
  };
}

/** A folder, created when missing; refused when a file of that name is there. */
export function folder(flag: string): (v: string) => string {
  return (v) => {
    checkPath(flag, v);
    if (existsSync(v) && !statSync(v).isDirectory()) {
      throw new BenchUsageError(`${flag}: ${quote(v)} is a file; expected a folder (it is created when missing)`);
    }
    return v;
  };
}
