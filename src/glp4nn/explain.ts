// `--explain`: the analyser's choice as a table a reader can check by hand — each kernel's footprint and bounds, the
// GPU's capacity and the choice's use of it, the cap C and its parts, and the reason the pool is not larger.

import type { ConcurrencyChoice } from "./analyser.js";
import { gpuCapacity, RESOURCES } from "./kernels.js";

const us = (v: number) => (v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2));
const bound = (v: number) => (Number.isFinite(v) ? String(v) : "∞");

function table(header: readonly string[], rows: readonly (readonly string[])[]): string[] {
  const widths = header.map((h, c) => Math.max(h.length, ...rows.map((r) => r[c]!.length)));
  const line = (r: readonly string[]) =>
    r.map((cell, c) => (c === 0 ? cell.padEnd(widths[c]!) : cell.padStart(widths[c]!))).join("  ");
  return [line(header), ...rows.map(line)];
}

/** The choice and its reasons, as lines of text. */
export function explainChoice(choice: ConcurrencyChoice): string {
  const { problem, kernels, bounds, chosen, cap } = choice;
  const d = problem.device;
  const out = [
    `GLP4NN: ${choice.poolSize} stream(s) for ${problem.label} on ${d.name} (${d.smCount} SMs, ${d.arch})` +
      `, launch cost ${us(problem.launchUs)} µs`,
    "",
    ...table(
      [
        "kernel",
        "blocks",
        "threads",
        "regs",
        "smem B",
        "T µs",
        "blocks/SM",
        "by",
        "waves",
        "tail",
        "T′ µs",
        "⌈T′/Tl⌉",
        "u",
        "x",
      ],
      kernels.map((k, i) => [
        k.profile.name,
        String(k.profile.blocks),
        String(k.profile.threadsPerBlock),
        String(k.profile.registersPerThread),
        String(k.profile.sharedBytesPerBlock),
        us(k.profile.durationUs),
        String(k.blocksPerSm),
        k.occupancyLimit,
        String(k.waves),
        String(k.tailBlocks),
        us(k.tailUs),
        bound(k.launchBound),
        bound(bounds[i]!),
        String(chosen[i]),
      ]),
    ),
    "",
  ];
  const capacity = gpuCapacity(d);
  const ignored = (r: string) => r === "registers" && problem.ignoreRegisters === true;
  out.push(
    ...table(
      ["resource", "GPU", "chosen", "use"],
      RESOURCES.map((r) => [
        ignored(r) ? `${r} (not constrained)` : r,
        String(capacity[r]),
        String(choice.used[r]),
        `${((100 * choice.used[r]) / capacity[r]).toFixed(0)}%`,
      ]),
    ),
    "",
    `C = min(resident kernels of ${d.arch} ${cap.residentGrids}, CUDA_DEVICE_MAX_CONNECTIONS ${cap.connections}, ` +
      `⌈max T′ / T_launch⌉ ${bound(cap.launch)}) = ${cap.value}`,
    `pool = Σ x = ${choice.poolSize}; not more because ${choice.reason}`,
  );
  return out.join("\n");
}
