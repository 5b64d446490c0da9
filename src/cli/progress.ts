/**
 * A progress bar on stderr: redrawn in place on a terminal, plain lines (at most one every few seconds) otherwise,
 * so logs of non-interactive runs stay readable.
 */
export class ProgressBar {
  private lastPlain = 0;
  private lastDraw = 0;
  private readonly tty: boolean;

  constructor(
    private readonly stream: NodeJS.WriteStream = process.stderr,
    private readonly plainEverySeconds = 5,
  ) {
    this.tty = Boolean(stream.isTTY);
  }

  update(label: string, done: number, total: number, fields: Record<string, string>): void {
    const now = performance.now();
    const frac = total > 0 ? Math.min(1, done / total) : 0;
    const extra = Object.entries(fields)
      .map(([k, v]) => `${k} ${v}`)
      .join("  ");
    if (this.tty) {
      if (now - this.lastDraw < 100 && done < total) return;
      this.lastDraw = now;
      const width = 24;
      const filled = Math.round(frac * width);
      const bar = `${"█".repeat(filled)}${"░".repeat(width - filled)}`;
      const line = `${label} ${bar} ${(100 * frac).toFixed(0).padStart(3)}% ${done}/${total}  ${extra}`;
      const cols = this.stream.columns ?? 120;
      this.stream.write(`\r${line.slice(0, cols - 1)}\x1b[K`);
    } else {
      if (now - this.lastPlain < this.plainEverySeconds * 1000 && done < total) return;
      this.lastPlain = now;
      this.stream.write(`${label} ${done}/${total} (${(100 * frac).toFixed(0)}%)  ${extra}\n`);
    }
  }

  /** Ends the current bar line (on a terminal). */
  finish(): void {
    if (this.tty) this.stream.write("\n");
  }
}

export function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return "--:--";
  const s = Math.round(seconds);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const r = s % 60;
  const mm = String(m).padStart(2, "0");
  const ss = String(r).padStart(2, "0");
  return h > 0 ? `${h}:${mm}:${ss}` : `${mm}:${ss}`;
}
