/** Settings read from environment variables. */
import { UserError } from "./errors.js";

/**
 * Bytes from the environment variable `name`, given as a whole number of MiB ≥ 0; unset or empty: `defaultMb`.
 * Anything else is a UserError naming the variable, its value, what 0 means (`zero`) and the default.
 */
export function mibFromEnv(
  env: Readonly<Record<string, string | undefined>>,
  name: string,
  defaultMb: number,
  zero: string,
): number {
  const raw = env[name];
  if (raw === undefined || raw.trim() === "") return defaultMb * 2 ** 20;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0) {
    throw new UserError(`${name} is '${raw}'; expected a whole number of MiB ≥ 0 (0: ${zero}; default ${defaultMb})`);
  }
  return n * 2 ** 20;
}
