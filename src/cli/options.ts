/** Parsers for CLI option values that fail with the option's name and what was expected. */
import { InvalidArgumentError } from "commander";

export function positiveInt(name: string): (v: string) => number {
  return (v) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n <= 0)
      throw new InvalidArgumentError(`${name} must be a positive integer; got '${v}'`);
    return n;
  };
}

export function positiveNumber(name: string): (v: string) => number {
  return (v) => {
    const n = Number(v);
    if (!Number.isFinite(n) || n <= 0) throw new InvalidArgumentError(`${name} must be a positive number; got '${v}'`);
    return n;
  };
}

export function nonNegativeNumber(name: string, below?: number): (v: string) => number {
  return (v) => {
    const n = Number(v);
    if (!Number.isFinite(n) || n < 0 || (below !== undefined && n >= below)) {
      const range = below === undefined ? "≥ 0" : `in [0, ${below})`;
      throw new InvalidArgumentError(`${name} must be a number ${range}; got '${v}'`);
    }
    return n;
  };
}

export function integer(name: string): (v: string) => number {
  return (v) => {
    const n = Number(v);
    if (!Number.isInteger(n)) throw new InvalidArgumentError(`${name} must be an integer; got '${v}'`);
    return n;
  };
}

export function oneOf<T extends string>(name: string, choices: readonly T[]): (v: string) => T {
  return (v) => {
    if (!(choices as readonly string[]).includes(v)) {
      throw new InvalidArgumentError(`${name} must be one of ${choices.join(", ")}; got '${v}'`);
    }
    return v as T;
  };
}
