/**
 * `VPPS_DUMP=dir`: every stage written out for a person to read — the kernel source once per plan, and per batch
 * the graph, the schedule (which step and processors ran each node), the disassembled script and the layout.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { ComputationGraph } from "../../../graph/graph.js";
import type { BatchSchedule } from "../script/batch-schedule.js";
import { disassemble } from "../script/disassemble.js";

/** The dump directory, or undefined when dumping is off. */
export function dumpDirectory(): string | undefined {
  const dir = process.env["VPPS_DUMP"];
  return dir === undefined || dir === "" ? undefined : dir;
}

/** Which step and processors ran one node's forward or backward instructions. */
export interface TraceEntry {
  readonly step: number;
  readonly phase: "forward" | "backward";
  readonly node: number;
  readonly ctas: readonly number[];
}

export function dumpKernelSource(dir: string, name: string, source: string): string {
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${name}.cu`);
  writeFileSync(file, source);
  return file;
}

/** Writes graph.txt, schedule.txt, script.txt and layout.json into `dir/batch-<index>/`; returns that folder. */
export function dumpBatch(
  dir: string,
  index: number,
  g: ComputationGraph,
  schedule: BatchSchedule,
  ctas: number,
  trace: readonly TraceEntry[],
): string {
  const out = join(dir, `batch-${String(index).padStart(5, "0")}`);
  mkdirSync(out, { recursive: true });
  const L = schedule.layout;
  const graph: string[] = [];
  for (let i = 0; i < L.live.length; i++) {
    if (L.live[i] === 0) continue;
    const where = `value@${L.value[i]} grad@${L.grad[i]}${L.placed[i] ? ` placed:${L.placed[i]}` : ""}`;
    graph.push(`${g.describe(i)} depth ${g.depth[i]} ${where}`);
  }
  writeFileSync(join(out, "graph.txt"), `${graph.join("\n")}\n`);
  const steps = trace.map(
    (t) => `step ${String(t.step).padStart(4)} ${t.phase.padEnd(8)} ${g.describe(t.node)} on [${t.ctas.join(",")}]`,
  );
  writeFileSync(join(out, "schedule.txt"), `${steps.join("\n")}\n`);
  writeFileSync(join(out, "script.txt"), `${disassemble(schedule.script, ctas)}\n`);
  const layout = {
    poolFloats: L.poolFloats,
    inputStart: L.inputStart,
    gradStart: L.gradStart,
    normOffset: L.normOffset,
    lossOffset: schedule.lossOffset,
    barriers: schedule.barriers,
    update: schedule.update,
    scriptWords: schedule.script.length,
  };
  writeFileSync(join(out, "layout.json"), `${JSON.stringify(layout, null, 2)}\n`);
  return out;
}
