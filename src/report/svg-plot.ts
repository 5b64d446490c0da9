/**
 * A dependency-free SVG line plot with logarithmic axes: what `npm run bench:plot` draws (sentences/s against batch
 * size per engine). Kept small and deterministic so the committed SVG only changes when the numbers do.
 */

export interface Series {
  name: string;
  points: readonly { x: number; y: number }[];
}

export interface PlotOptions {
  title: string;
  xLabel: string;
  yLabel: string;
  width?: number;
  height?: number;
}

const COLORS = [
  "#1f77b4",
  "#d62728",
  "#2ca02c",
  "#ff7f0e",
  "#9467bd",
  "#8c564b",
  "#e377c2",
  "#17becf",
  "#bcbd22",
  "#7f7f7f",
];

function escapeXml(s: string): string {
  return s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

/** Powers of ten (and 2×, 5× between them when the range is narrow) covering [lo, hi]. */
function logTicks(lo: number, hi: number): number[] {
  const ticks: number[] = [];
  const narrow = Math.log10(hi / lo) < 2.5;
  for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
    for (const m of narrow ? [1, 2, 5] : [1]) {
      const v = m * 10 ** e;
      if (v >= lo * 0.999 && v <= hi * 1.001) ticks.push(v);
    }
  }
  return ticks;
}

function formatTick(v: number): string {
  return v >= 1000 ? `${v / 1000}k` : String(v);
}

/** Renders the series; points with non-positive coordinates are rejected (log axes). */
export function renderLogLogPlot(series: readonly Series[], opts: PlotOptions): string {
  const all = series.flatMap((s) => s.points);
  if (all.length === 0) throw new Error("renderLogLogPlot: no points to plot");
  for (const p of all) {
    if (!(p.x > 0 && p.y > 0)) throw new Error(`renderLogLogPlot: log axes need positive values; got (${p.x}, ${p.y})`);
  }
  const W = opts.width ?? 720;
  const H = opts.height ?? 440;
  const m = { left: 70, right: 190, top: 40, bottom: 50 };
  const xs = all.map((p) => p.x);
  const ys = all.map((p) => p.y);
  const x0 = Math.min(...xs);
  const x1 = Math.max(...xs) === x0 ? x0 * 2 : Math.max(...xs);
  const y0 = 10 ** Math.floor(Math.log10(Math.min(...ys)));
  const y1 = 10 ** Math.ceil(Math.log10(Math.max(...ys)));
  const px = (x: number) =>
    m.left + ((Math.log(x) - Math.log(x0)) / (Math.log(x1) - Math.log(x0))) * (W - m.left - m.right);
  const py = (y: number) =>
    H - m.bottom - ((Math.log(y) - Math.log(y0)) / (Math.log(y1) - Math.log(y0))) * (H - m.top - m.bottom);
  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="12">`,
  );
  out.push(`<rect width="${W}" height="${H}" fill="white"/>`);
  out.push(`<text x="${W / 2}" y="22" text-anchor="middle" font-size="15">${escapeXml(opts.title)}</text>`);
  const xTicks = xs.filter((v, i) => xs.indexOf(v) === i).sort((a, b) => a - b);
  for (const t of xTicks) {
    const x = px(t).toFixed(1);
    out.push(`<line x1="${x}" y1="${m.top}" x2="${x}" y2="${H - m.bottom}" stroke="#eee"/>`);
    out.push(`<text x="${x}" y="${H - m.bottom + 16}" text-anchor="middle">${formatTick(t)}</text>`);
  }
  for (const t of logTicks(y0, y1)) {
    const y = py(t).toFixed(1);
    out.push(`<line x1="${m.left}" y1="${y}" x2="${W - m.right}" y2="${y}" stroke="#eee"/>`);
    out.push(`<text x="${m.left - 6}" y="${y}" text-anchor="end" dominant-baseline="middle">${formatTick(t)}</text>`);
  }
  out.push(
    `<rect x="${m.left}" y="${m.top}" width="${W - m.left - m.right}" height="${H - m.top - m.bottom}" fill="none" stroke="#888"/>`,
  );
  out.push(
    `<text x="${(m.left + W - m.right) / 2}" y="${H - 12}" text-anchor="middle">${escapeXml(opts.xLabel)}</text>`,
  );
  out.push(
    `<text x="16" y="${(m.top + H - m.bottom) / 2}" text-anchor="middle" transform="rotate(-90 16 ${(m.top + H - m.bottom) / 2})">${escapeXml(opts.yLabel)}</text>`,
  );
  series.forEach((s, k) => {
    const color = COLORS[k % COLORS.length]!;
    const pts = [...s.points].sort((a, b) => a.x - b.x);
    const d = pts.map((p, i) => `${i === 0 ? "M" : "L"}${px(p.x).toFixed(1)},${py(p.y).toFixed(1)}`).join(" ");
    out.push(`<path d="${d}" fill="none" stroke="${color}" stroke-width="2"/>`);
    for (const p of pts)
      out.push(`<circle cx="${px(p.x).toFixed(1)}" cy="${py(p.y).toFixed(1)}" r="3" fill="${color}"/>`);
    const ly = m.top + 10 + 20 * k;
    out.push(
      `<line x1="${W - m.right + 14}" y1="${ly}" x2="${W - m.right + 36}" y2="${ly}" stroke="${color}" stroke-width="2"/>`,
    );
    out.push(`<text x="${W - m.right + 42}" y="${ly}" dominant-baseline="middle">${escapeXml(s.name)}</text>`);
  });
  out.push("</svg>");
  return `${out.join("\n")}\n`;
}
