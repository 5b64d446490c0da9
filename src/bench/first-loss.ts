/**
 * The correctness guard every benchmark applies before timing an engine: its loss on the first batch (fresh
 * weights, before any update) against the CPU engine's. An engine that is off is not timed — a fast wrong engine is
 * not a result.
 */

/** Relative difference of an engine's loss from the CPU engine's (absolute below a loss of 1). */
export function relativeError(loss: number, cpuLoss: number): number {
  return Math.abs(loss - cpuLoss) / Math.max(1, Math.abs(cpuLoss));
}

export interface FirstLoss {
  /** Sentences in the checked batch. */
  batch: number;
  cpu: number;
  engine: number;
  relativeError: number;
}

/**
 * Compares `loss` with `cpu`: the record, and `refusal` — the line saying why the engine is not timed — when the
 * relative error exceeds `tolerance` (or is not a number).
 */
export function checkFirstLoss(
  what: string,
  o: { batch: number; cpu: number; loss: number; tolerance: number },
): { check: FirstLoss; refusal: string | null } {
  const relErr = relativeError(o.loss, o.cpu);
  const check = { batch: o.batch, cpu: o.cpu, engine: o.loss, relativeError: relErr };
  if (relErr <= o.tolerance) return { check, refusal: null };
  return {
    check,
    refusal:
      `${what}: first-batch loss ${o.loss} differs from the CPU engine's ${o.cpu} by ${relErr.toExponential(2)} ` +
      `relative (more than ${o.tolerance}); not timing it`,
  };
}
