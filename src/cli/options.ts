/**
 * Parsers for CLI option values. Each fails with a `UsageError` naming the option, what it expects and (cut to a
 * readable length) what it got; commander passes such an error through unchanged, and the handler in main.ts prints it
 * as one line with the command's usage. The syntax is strict: `Number()` alone would take "", " 5", "0x10" and "1e3"
 * as numbers, so a typo would become a value.
 */
import { parseDeviceSpec } from "../cuda/index.js";
import { UsageError } from "../util/errors.js";
import { quote } from "../util/text.js";

const INTEGER = /^[-+]?\d+$/;
const DECIMAL = /^[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$/i;

function refuse(name: string, expected: string, v: string): never {
  throw new UsageError(`${name} must be ${expected}; got ${quote(v)}`);
}

/** A whole number that a double holds exactly; NaN for anything else. */
function parseInteger(v: string): number {
  const n = INTEGER.test(v) ? Number(v) : Number.NaN;
  return Number.isSafeInteger(n) ? n : Number.NaN;
}

/** An integer too large for a double to hold exactly. */
function tooLarge(v: string): boolean {
  return INTEGER.test(v) && !Number.isSafeInteger(Number(v));
}

function parseDecimal(v: string): number {
  return DECIMAL.test(v) ? Number(v) : Number.NaN;
}

export function positiveInt(name: string): (v: string) => number {
  return (v) => {
    const n = parseInteger(v);
    if (!(n > 0)) refuse(name, tooLarge(v) ? `at most ${Number.MAX_SAFE_INTEGER}` : "a positive integer", v);
    return n;
  };
}

export function positiveNumber(name: string): (v: string) => number {
  return (v) => {
    const n = parseDecimal(v);
    if (!Number.isFinite(n) || n <= 0) refuse(name, "a positive number", v);
    return n;
  };
}

/** A number in (0, 1]: a density (the fraction of weights kept). */
export function densityNumber(name: string): (v: string) => number {
  return (v) => {
    const n = parseDecimal(v);
    if (!(n > 0 && n <= 1)) refuse(name, "a number in (0, 1]", v);
    return n;
  };
}

export function nonNegativeNumber(name: string, below?: number): (v: string) => number {
  return (v) => {
    const n = parseDecimal(v);
    if (!Number.isFinite(n) || n < 0 || (below !== undefined && n >= below)) {
      refuse(name, `a number ${below === undefined ? "≥ 0" : `in [0, ${below})`}`, v);
    }
    return n;
  };
}

export function integer(name: string): (v: string) => number {
  return (v) => {
    const n = parseInteger(v);
    if (Number.isNaN(n)) refuse(name, tooLarge(v) ? `at most ${Number.MAX_SAFE_INTEGER} in size` : "an integer", v);
    return n;
  };
}

export function oneOf<T extends string>(name: string, choices: readonly T[]): (v: string) => T {
  return (v) => {
    if (!(choices as readonly string[]).includes(v)) refuse(name, `one of ${choices.join(", ")}`, v);
    return v as T;
  };
}

/** The longest path a Linux system call takes (PATH_MAX); a longer one fails with ENAMETOOLONG, echoed whole. */
export const MAX_PATH_LENGTH = 4096;

/**
 * A file or directory name: not empty (`--data ""` from an unset shell variable must not mean "no --data"), without
 * NUL bytes, which no file name holds (the file system calls would throw a TypeError), and not longer than a path.
 */
export function pathName(name: string, what: string): (v: string) => string {
  return (v) => {
    if (v.trim() === "" || v.includes("\0")) refuse(name, what, v);
    if (v.length > MAX_PATH_LENGTH) refuse(name, `${what} of at most ${MAX_PATH_LENGTH} characters`, v);
    return v;
  };
}

/** `--device`: auto, cpu, cuda or cuda:N, checked here for every engine (one that ignores it too). */
export function deviceSpec(name: string): (v: string) => string {
  return (v) => {
    try {
      parseDeviceSpec(v);
    } catch {
      refuse(name, "auto, cpu, cuda or cuda:N (N = 0, 1, …)", v);
    }
    return v;
  };
}

/**
 * `--off-chip <names|all>`: VPPS matrices kept in global memory whatever the registers hold ("all", or
 * comma-separated weight matrix names; a name the model has not is refused by the planner, which lists them).
 */
export function offChipList(name: string): (v: string) => readonly string[] | "all" {
  const what = "all or comma-separated matrix names";
  return (v) => {
    // a NUL or other control character is in no matrix name; a list longer than a path names no model's matrices
    // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is refused
    if (/[\u0000-\u001f\u007f]/.test(v)) refuse(name, `${what} (printable characters)`, v);
    if (v.length > MAX_PATH_LENGTH) refuse(name, `${what} of at most ${MAX_PATH_LENGTH} characters`, v);
    if (v.trim() === "all") return "all";
    const names = v.split(",").map((x) => x.trim());
    if (names.some((x) => x === "")) refuse(name, what, v);
    return [...new Set(names)];
  };
}
