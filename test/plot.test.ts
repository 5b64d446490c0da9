import assert from "node:assert/strict";
import { test } from "node:test";
import { renderLogLogPlot } from "../src/report/svg-plot.js";

test("the SVG plot has one path and legend entry per series, and refuses non-positive values", () => {
  const svg = renderLogLogPlot(
    [
      { name: "eager", points: [1, 8, 128].map((x) => ({ x, y: 150 + x })) },
      { name: "vpps <fused>", points: [1, 8, 128].map((x) => ({ x, y: 2000 * Math.sqrt(x) })) },
    ],
    { title: "t", xLabel: "batch", yLabel: "sent/s" },
  );
  assert.match(svg, /^<svg /);
  assert.equal(svg.match(/<path /g)?.length, 2);
  assert.equal(svg.match(/<circle /g)?.length, 6);
  assert.match(svg, /vpps &lt;fused&gt;/);
  assert.throws(
    () => renderLogLogPlot([{ name: "a", points: [{ x: 0, y: 1 }] }], { title: "", xLabel: "", yLabel: "" }),
    /positive/,
  );
});
