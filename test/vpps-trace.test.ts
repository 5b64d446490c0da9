import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { analyzeKernelTrace, formatKernelTrace } from "../src/engines/vpps/instrument/trace.js";
import { Opcode } from "../src/engines/vpps/script/format.js";

const SLOTS = 16;
const op = (o: Opcode, n = 0) => o | (n << 8);

/** A script of two processors (header, scripts, empty table). */
function twoProcessors(a: number[], b: number[]): Uint32Array {
  return Uint32Array.from([0, a.length, a.length + b.length, ...a, ...b]);
}

/** Trace words of `ctas` CTAs: begin, start, then per instruction [ns since start, aux]. */
function traceOf(ctas: { begin: number; start: number; ends: number[]; aux?: number[] }[]): BigUint64Array {
  const w = new BigUint64Array(ctas.length * SLOTS);
  for (const [c, t] of ctas.entries()) {
    w[c * SLOTS] = BigInt(t.begin);
    w[c * SLOTS + 1] = BigInt(t.start);
    w[c * SLOTS + 2] = BigInt(t.ends.length);
    for (const [k, e] of t.ends.entries()) {
      w[c * SLOTS + 3 + k] = (BigInt(t.aux?.[k] ?? 0) << 32n) | BigInt(e - t.start);
    }
  }
  return w;
}

describe("VPPS kernel trace: the critical path", () => {
  // CTA 0: matvec of matrix 1 (3 entries), signal barrier 0, end. CTA 1: wait for barrier 0, tanh, end.
  const script = twoProcessors(
    [op(Opcode.MatVec, 1), 0, 3, op(Opcode.Signal, 0), op(Opcode.End)],
    [op(Opcode.Wait, 0), 1, op(Opcode.Tanh, 4), 0, 4, op(Opcode.End)],
  );

  test("follows a released wait back to the signal that released it", () => {
    const words = traceOf([
      { begin: 1000, start: 1100, ends: [1600, 1620, 1630], aux: [0, 0, 0] },
      { begin: 1000, start: 1100, ends: [1800, 1850, 1860] },
    ]);
    const a = analyzeKernelTrace(script, 2, words, SLOTS, ["W", "U"]);
    assert.equal(a.spanNs, 860);
    assert.equal(a.pathNs, 860);
    assert.equal(a.hops, 1);
    const by = new Map(a.path.map((p) => [p.label, p]));
    assert.equal(by.get("matvec U")?.ns, 500);
    assert.equal(by.get("matvec U")?.entries, 3);
    assert.equal(by.get("hop")?.ns, 180); // signal at 1620, wait ended at 1800
    assert.equal(by.get("signal")?.ns, 20);
    assert.equal(by.get("tanh")?.ns, 50);
    assert.equal(by.get("load")?.ns, 100);
    assert.equal(by.has("wait"), false);
    assert.equal(
      a.path.reduce((s, p) => s + p.ns, 0),
      a.pathNs,
      "the path's items add up to its length",
    );
    assert.equal(a.busiest[0]!.cta, 0); // 530 ns outside waits against CTA 1's 60
    assert.equal(a.resolutionNs, 10);
    assert.match(formatKernelTrace(a), /critical path 0\.9 us with 1 barrier hops/);
  });

  test("stays on the processor when the signal came before the wait began", () => {
    // CTA 1 starts late: its wait finds the barrier complete
    const words = traceOf([
      { begin: 1000, start: 1100, ends: [1600, 1620, 1630], aux: [0, 0, 0] },
      { begin: 1700, start: 1750, ends: [1760, 1850, 1860] },
    ]);
    const a = analyzeKernelTrace(script, 2, words, SLOTS, ["W", "U"]);
    assert.equal(a.hops, 0);
    assert.equal(a.pathNs, 160);
    assert.equal(a.spanNs, 860);
    const by = new Map(a.path.map((p) => [p.label, p]));
    assert.equal(by.get("wait")?.ns, 10);
    assert.equal(by.get("load")?.ns, 50);
    assert.equal(by.has("matvec U"), false);
  });

  test("a run of waits hops to the latest of its releasing signals, whichever wait it belongs to", () => {
    // CTA 0 signals barrier 0 early; CTA 1 signals barrier 1 late; CTA 2 waits for 0 then 1 (one grouped poll)
    const scripts = [
      [op(Opcode.Signal, 0), op(Opcode.End)],
      [op(Opcode.Tanh, 4), 0, 4, op(Opcode.Signal, 1), op(Opcode.End)],
      [op(Opcode.Wait, 0), 1, op(Opcode.Wait, 1), 1, op(Opcode.Tanh, 4), 0, 4, op(Opcode.End)],
    ];
    const header = [0];
    for (const sc of scripts) header.push(header[header.length - 1]! + sc.length);
    const script = Uint32Array.from([...header, ...scripts.flat()]);
    const words = traceOf([
      { begin: 0, start: 100, ends: [200, 210] },
      { begin: 0, start: 100, ends: [900, 950, 960] },
      { begin: 0, start: 100, ends: [1200, 1200, 1300, 1310] },
    ]);
    const a = analyzeKernelTrace(script, 3, words, SLOTS, []);
    assert.equal(a.hops, 1);
    const by = new Map(a.path.map((p) => [p.label, p]));
    assert.equal(by.get("hop")?.ns, 250); // from CTA 1's signal at 950 to the end of the run at 1200
    assert.equal(by.get("tanh")?.ns, 900); // CTA 2's 100 after the run, CTA 1's 800 before its signal
    assert.equal(by.get("wait"), undefined);
    assert.equal(a.pathNs, 1310);
  });

  test("refuses a trace that does not belong to the script", () => {
    const words = traceOf([
      { begin: 0, start: 0, ends: [1, 2, 3, 4] },
      { begin: 0, start: 0, ends: [1] },
    ]);
    assert.throws(() => analyzeKernelTrace(script, 2, words, SLOTS, []), /CTA 0 ran 4 instructions; its script has 3/);
    assert.throws(() => analyzeKernelTrace(script, 3, words, SLOTS, []), /32 trace words for 3 CTAs of 16 slots/);
  });
});
