/** Human-readable rendering of a VPPS plan (what `vpps plan` prints). */
import type { VppsPlan } from "./plan.js";

function table(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((h, c) => Math.max(h.length, ...rows.map((r) => r[c]!.length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((cell, c) => cell.padEnd(widths[c]!))
      .join("  ")
      .trimEnd();
  return [line(header), line(widths.map((w) => "-".repeat(w))), ...rows.map(line)].join("\n");
}

/** Compact "0-3, 7, 9-12" for a sorted list of integers. */
function ranges(values: readonly number[]): string {
  const sorted = [...new Set(values)].sort((a, b) => a - b);
  const parts: string[] = [];
  for (let i = 0; i < sorted.length; ) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j]! + 1) j++;
    parts.push(i === j ? `${sorted[i]}` : `${sorted[i]}-${sorted[j]}`);
    i = j + 1;
  }
  return parts.join(", ");
}

export function formatPlan(plan: VppsPlan): string {
  const { budget } = plan;
  const used = plan.weightRegs + plan.gradientRegs;
  const percent = budget.forParameters > 0 ? Math.round((100 * used) / budget.forParameters) : 0;
  const head = [
    `VPPS plan for ${plan.device.name}: ${plan.device.smCount} SMs x ${plan.ctasPerSm} CTA(s) = ${plan.ctas} ` +
      `persistent CTAs of ${plan.threadsPerCta} threads, ${plan.rowsPerWarp} row(s) per warp per partition`,
    `registers per thread: ${budget.limitPerThread} limit - ${budget.interpreterReserve} interpreter ` +
      `${budget.headroom > 0 ? `- ${budget.headroom} kept free after a spill ` : ""}= ` +
      `${budget.forParameters} for parameters; used ${plan.weightRegs} weights + ${plan.gradientRegs} gradients = ` +
      `${used} (${percent}%)`,
    `valid rows per warp for ${plan.ctasPerSm} CTA(s)/SM: ${plan.validRowsPerWarp.join(", ") || "none"}`,
  ];
  const held = [...plan.matrices, ...plan.transposed];
  const matrixRows = held.map((m) => {
    const perCta = new Map<number, number>();
    for (const p of m.partitions) perCta.set(p.cta, (perCta.get(p.cta) ?? 0) + p.rowCount);
    const counts = [...perCta.values()];
    const offChip = "placement" in m && m.placement === "off-chip";
    return [
      m.name,
      `${m.rows}x${m.cols}`,
      offChip ? "off chip" : "registers",
      offChip ? "-" : `${m.chunks}`,
      `${m.partitionCount}`,
      offChip ? "any (tiles)" : ranges(m.partitions.map((p) => p.cta)),
      offChip ? "-" : ranges(m.slots),
      offChip ? "-" : `${Math.min(...counts)}-${Math.max(...counts)}`,
      "gradients" in m ? m.gradients : "none (copy)",
    ];
  });
  const why = plan.matrices.map((m) => `  ${m.name}: ${m.placementReason}`);
  const slotRows = plan.slots.map((s) => [
    `${s.index}`,
    `${s.weightRegs}`,
    `${s.gradientRegs}`,
    s.matrices.map((i) => held[i]!.name).join(", "),
  ]);
  return [
    ...head,
    "",
    table(
      ["matrix", "shape", "lives in", "regs/row", "partitions", "CTAs", "slots", "rows/CTA", "gradient"],
      matrixRows,
    ),
    "",
    "where each matrix lives, and why (lookup tables and vectors stay in global memory; an off-chip matrix is read",
    "from its master copy in global memory by tile instructions on any CTA, and its gradient ('device') is summed",
    "in the gradient buffer):",
    ...why,
    "",
    table(["slot", "weight regs", "gradient regs", "matrices"], slotRows),
  ].join("\n");
}
