/**
 * A benchmark's output: lines on stdout (progress and markdown tables), and the files of its results folder — the
 * JSON result, the tables as markdown, the SVG plot.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/** A markdown table: a header row, the alignment row (right-aligned unless `left` names the column), the rows. */
export function markdownTable(head: readonly string[], rows: readonly (readonly string[])[], left: number[] = []) {
  const align = head.map((h, i) =>
    left.includes(i) ? "-".repeat(Math.max(3, h.length)) : `${"-".repeat(Math.max(3, h.length - 1))}:`,
  );
  return [`| ${head.join(" | ")} |`, `| ${align.join(" | ")} |`, ...rows.map((r) => `| ${r.join(" | ")} |`)];
}

/** Lines printed as they come and kept, so that the tables can also be written to a file. */
export class Transcript {
  readonly lines: string[] = [];

  print(...lines: string[]): void {
    for (const l of lines) {
      console.log(l);
      this.lines.push(l);
    }
  }

  get text(): string {
    return `${this.lines.join("\n")}\n`;
  }
}

/** Writes `name` into `dir` (created when missing) and returns its path. */
export function writeOutput(dir: string, name: string, content: string): string {
  mkdirSync(dir, { recursive: true });
  const path = join(dir, name);
  writeFileSync(path, content);
  return path;
}

/** Writes `<name>.json` into `dir` and returns its path. */
export function writeJson(dir: string, name: string, data: unknown): string {
  return writeOutput(dir, `${name}.json`, `${JSON.stringify(data, null, 2)}\n`);
}
