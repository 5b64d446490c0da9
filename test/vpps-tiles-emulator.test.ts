/**
 * The emulator's tile instructions (tile, tile.xbar, tile.wbar, import.grads) on hand-built scripts, checked against
 * a direct float64 computation. Matrices are 70 rows (and 40 or 100 columns), so tiles past the first 64 rows or
 * columns are partial. Every check also asserts that nothing outside the expected outputs changed.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { type DeviceModel, H100_SXM } from "../src/cuda/hw/device-model.js";
import { planVpps } from "../src/engines/vpps/plan/plan.js";
import { disassemble } from "../src/engines/vpps/script/disassemble.js";
import { type EmulatorMemory, VppsEmulator } from "../src/engines/vpps/script/emulator.js";
import { NONE, Opcode, preamble, TILE } from "../src/engines/vpps/script/format.js";
import { RandomStream } from "../src/util/random.js";

/** Three processors: the matrices' partitions spread over all of them. */
const SMALL: DeviceModel = { ...H100_SXM, name: "small test GPU", smCount: 3 };
const PLAN = planVpps(
  [
    { name: "A", rows: 70, cols: 40 },
    { name: "B", rows: 70, cols: 100 },
  ],
  SMALL,
  { ctasPerSm: 1, rowsPerWarp: 1, gradients: "registers" },
);
const A = PLAN.matrices[0]!;
const B = PLAN.matrices[1]!;
const CTAS = PLAN.ctas;
const POOL = 8192;
const LR = 0.25;

type Instruction = readonly number[];

const ins = (op: Opcode, n: number, ...operands: number[]): Instruction => [preamble(op, n), ...operands];

/** The batch script: prefix sums of the processors' lengths, their scripts, then the shared table. */
function assemble(scripts: readonly (readonly Instruction[])[], table: readonly number[]): Uint32Array {
  const bodies = Array.from({ length: CTAS }, (_, c) => (scripts[c] ?? []).flat());
  const header: number[] = [0];
  for (const b of bodies) header.push(header[header.length - 1]! + b.length);
  return Uint32Array.from([...header, ...bodies.flat(), ...table]);
}

/** Random pool, master copy and gradient buffer; `alloc` hands out pool vectors with gaps between them. */
function memory(seed: number, grads: "zero" | "random" = "zero") {
  const rng = new RandomStream(seed);
  const random = (n: number) => Float32Array.from({ length: n }, () => 2 * rng.uniform() - 1);
  const mem: EmulatorMemory = {
    pool: random(POOL),
    master: random(PLAN.masterFloats),
    grads: grads === "zero" ? new Float32Array(PLAN.masterFloats) : random(PLAN.masterFloats),
    barriers: new Uint32Array(1),
  };
  let next = 16;
  const alloc = (n: number): number => {
    const at = next;
    next += n + 16;
    assert.ok(next <= POOL, "test pool too small");
    return at;
  };
  return { mem, alloc };
}

function run(script: Uint32Array, mem: EmulatorMemory, seed = 1): void {
  new VppsEmulator(PLAN).run(script, mem, { seed, learningRate: LR, clip: 0 });
}

/** W[r][c] of a matrix in the master copy `master`. */
const weight = (master: Float32Array, m: typeof A, r: number, c: number): number =>
  master[m.masterOffset + r * m.cols + c]!;

/**
 * The first element that differs: indices in `expected` must hold their value within fp32 tolerance, every other
 * index must be bit-identical to `before`. Empty when all agree.
 */
function firstDifference(
  what: string,
  before: Float32Array,
  after: Float32Array,
  expected: ReadonlyMap<number, number>,
): string {
  for (let i = 0; i < after.length; i++) {
    const want = expected.get(i);
    if (want === undefined) {
      if (!Object.is(after[i], before[i])) return `${what}[${i}] should be unchanged (${before[i]}); got ${after[i]}`;
    } else if (!(Math.abs(after[i]! - want) <= 1e-5 * Math.max(1, Math.abs(want)))) {
      return `${what}[${i}]: expected ${want}; got ${after[i]}`;
    }
  }
  return "";
}

describe("VPPS emulator: tile instructions", () => {
  test("the plan has partial tiles: 70 rows, 40 and 100 columns, over several processors", () => {
    assert.equal(CTAS, 3);
    assert.deepEqual([A.rows, A.cols, B.rows, B.cols], [70, 40, 70, 100]);
    assert.ok(
      A.partitions.some((p) => p.cta !== A.partitions[0]!.cta),
      "matrix A is held by one processor only",
    );
  });

  test("tile: rows [64, 70) with and without bias; two processors covering a whole matrix", () => {
    for (const seed of [1, 2]) {
      const { mem, alloc } = memory(seed);
      // matrix A, rows [64, 70) only: entry 1 without bias, entry 2 with
      const [y1, x1, y2, x2, b2] = [alloc(70), alloc(40), alloc(70), alloc(40), alloc(70)];
      // matrix B, all rows: processor 1 runs r0 = 0, processor 2 runs r0 = 64
      const [y3, x3, b3] = [alloc(70), alloc(100), alloc(70)];
      const table = [y1, x1, NONE, y2, x2, b2, y3, x3, b3];
      const script = assemble(
        [[ins(Opcode.Tile, 0, 0, 2, 64)], [ins(Opcode.Tile, 1, 6, 1, 0)], [ins(Opcode.Tile, 1, 6, 1, 64)]],
        table,
      );
      assert.match(disassemble(script, CTAS), /tile m=0 list=0 count=2 r0=64 \[y=\d+ x=\d+ b=-\]/);
      const before = mem.pool.slice();
      run(script, mem, seed);
      const expected = new Map<number, number>();
      const rowOf = (m: typeof A, y: number, x: number, b: number, r: number) => {
        let acc = b === NONE ? 0 : before[b + r]!;
        for (let k = 0; k < m.cols; k++) acc += weight(mem.master, m, r, k) * before[x + k]!;
        expected.set(y + r, acc);
      };
      for (let r = 64; r < 70; r++) {
        rowOf(A, y1, x1, NONE, r);
        rowOf(A, y2, x2, b2, r);
      }
      for (let r = 0; r < 70; r++) rowOf(B, y3, x3, b3, r);
      assert.equal(firstDifference("pool", before, mem.pool, expected), "", `seed ${seed}`);
    }
  });

  test("tile.xbar: columns [0, 64) and [64, 100) on two processors; an entry with x̄ NONE adds nothing", () => {
    const { mem, alloc } = memory(3);
    const [ybar1, x1, xbar1] = [alloc(70), alloc(100), alloc(100)];
    const [ybar2, x2, bbar2] = [alloc(70), alloc(100), alloc(70)];
    const [ybar3, x3, xbar3, bbar3] = [alloc(70), alloc(100), alloc(100), alloc(70)];
    const table = [ybar1, x1, xbar1, NONE, ybar2, x2, NONE, bbar2, ybar3, x3, xbar3, bbar3];
    const script = assemble([[ins(Opcode.TileXbar, 1, 0, 3, 0, 0)], [], [ins(Opcode.TileXbar, 1, 0, 3, 64, 0)]], table);
    const before = mem.pool.slice();
    run(script, mem);
    const expected = new Map<number, number>();
    for (const [ybar, xbar] of [
      [ybar1, xbar1],
      [ybar3, xbar3],
    ] as const) {
      for (let c = 0; c < B.cols; c++) {
        let acc = before[xbar + c]!;
        for (let r = 0; r < B.rows; r++) acc += weight(mem.master, B, r, c) * before[ybar + r]!;
        expected.set(xbar + c, acc);
      }
    }
    assert.equal(firstDifference("pool", before, mem.pool, expected), "");
  });

  test("tile.xbar sums only its rows [r0, r0 + TILE.xbarRows)", () => {
    const { mem, alloc } = memory(3);
    const [ybar, x, xbar] = [alloc(70), alloc(100), alloc(100)];
    // all 70 rows of columns [0, 64) on processor 0, then rows [64, 70) of them once more on processor 1
    const script = assemble(
      [[ins(Opcode.TileXbar, 1, 0, 1, 0, 0)], [ins(Opcode.TileXbar, 1, 0, 1, 0, 64)]],
      [ybar, x, xbar, NONE],
    );
    const before = mem.pool.slice();
    run(script, mem);
    const expected = new Map<number, number>();
    for (let c = 0; c < 64; c++) {
      let acc = before[xbar + c]!;
      for (let r = 0; r < B.rows; r++) acc += weight(mem.master, B, r, c) * before[ybar + r]!;
      for (let r = 64; r < B.rows; r++) acc += weight(mem.master, B, r, c) * before[ybar + r]!;
      expected.set(xbar + c, acc);
    }
    assert.equal(firstDifference("pool", before, mem.pool, expected), "");
  });

  test("tile.wbar: four tiles of a 70×100 gradient; b̄ (two operands, one shared) added once, by the c0 = 0 tiles", () => {
    const { mem, alloc } = memory(4, "random");
    const [bbarP, bbarQ, xbar] = [alloc(70), alloc(70), alloc(100)];
    const ys = [alloc(70), alloc(70), alloc(70), alloc(70)];
    const xs = [alloc(100), alloc(100), alloc(100), alloc(100)];
    const bbars = [bbarP, bbarP, bbarQ, NONE];
    const table = ys.flatMap((y, e) => [y, xs[e]!, e === 1 ? xbar : NONE, bbars[e]!]);
    const tile = (r0: number, c0: number) => ins(Opcode.TileWbar, 1, 0, 4, r0, c0);
    const script = assemble([[tile(0, 0), tile(64, 64)], [tile(0, 64)], [tile(64, 0)]], table);
    const pool0 = mem.pool.slice();
    const grads0 = mem.grads.slice();
    run(script, mem);

    const grads = new Map<number, number>();
    for (let r = 0; r < B.rows; r++) {
      for (let c = 0; c < B.cols; c++) {
        const at = B.masterOffset + r * B.cols + c;
        let acc = grads0[at]!;
        for (let e = 0; e < 4; e++) acc += pool0[ys[e]! + r]! * pool0[xs[e]! + c]!;
        grads.set(at, acc);
      }
    }
    assert.equal(firstDifference("grads", grads0, mem.grads, grads), "");
    const pool = new Map<number, number>();
    for (let r = 0; r < B.rows; r++) {
      pool.set(bbarP + r, pool0[bbarP + r]! + pool0[ys[0]! + r]! + pool0[ys[1]! + r]!);
      pool.set(bbarQ + r, pool0[bbarQ + r]! + pool0[ys[2]! + r]!);
    }
    assert.equal(firstDifference("pool", pool0, mem.pool, pool), "");
  });

  test("tile.wbar with c0 = 64 alone: only rows [0, 64) × columns [64, 100) of the gradient, no b̄", () => {
    const { mem, alloc } = memory(5);
    const [ybar, x, bbar] = [alloc(70), alloc(100), alloc(70)];
    const script = assemble([[], [ins(Opcode.TileWbar, 1, 0, 1, 0, 64)]], [ybar, x, NONE, bbar]);
    const pool0 = mem.pool.slice();
    const grads0 = mem.grads.slice();
    run(script, mem);
    const grads = new Map<number, number>();
    for (let r = 0; r < 64; r++) {
      for (let c = 64; c < B.cols; c++) grads.set(B.masterOffset + r * B.cols + c, pool0[ybar + r]! * pool0[x + c]!);
    }
    assert.equal(firstDifference("grads", grads0, mem.grads, grads), "");
    assert.equal(firstDifference("pool", pool0, mem.pool, new Map()), "");
  });

  test("import.grads adds the gradient buffer to the register gradients: seen by export.grads", () => {
    const { mem, alloc } = memory(6, "random");
    const [ybar, x] = [alloc(70), alloc(40)];
    // every holder of A: an outer product into its register gradient, then the import, then the export
    const holders = new Set(A.partitions.map((p) => p.cta));
    const body = [ins(Opcode.MatVecBwd, 0, 0, 1), ins(Opcode.ImportGrads, 0), ins(Opcode.ExportGrads, 0)];
    const script = assemble(
      Array.from({ length: CTAS }, (_, c) => (holders.has(c) ? body : body.slice(1))),
      [ybar, x, NONE, NONE],
    );
    const grads0 = mem.grads.slice();
    run(script, mem);
    const expected = new Map<number, number>();
    for (let r = 0; r < A.rows; r++) {
      for (let c = 0; c < A.cols; c++) {
        const at = A.masterOffset + r * A.cols + c;
        expected.set(at, grads0[at]! + mem.pool[ybar + r]! * mem.pool[x + c]!);
      }
    }
    // B's rows go out as they came in (its register gradients were zero); padding between matrices is untouched
    for (let i = B.masterOffset; i < B.masterOffset + B.rows * B.cols; i++) expected.set(i, grads0[i]!);
    assert.equal(firstDifference("grads", grads0, mem.grads, expected), "");
  });

  test("import.grads on one processor: update.regs moves exactly the rows of the partitions it holds", () => {
    const { mem } = memory(7, "random");
    const importer = 1;
    const script = assemble(
      Array.from({ length: CTAS }, (_, c) =>
        c === importer
          ? [ins(Opcode.ImportGrads, 0), ins(Opcode.UpdateRegs, 0, NONE)]
          : [ins(Opcode.UpdateRegs, 0, NONE)],
      ),
      [],
    );
    const master0 = mem.master.slice();
    run(script, mem);
    const expected = new Map<number, number>();
    let moved = 0;
    for (const m of [A, B]) {
      for (const p of m.partitions) {
        if (p.cta !== importer) continue;
        for (
          let i = m.masterOffset + p.firstRow * m.cols;
          i < m.masterOffset + (p.firstRow + p.rowCount) * m.cols;
          i++
        ) {
          expected.set(i, master0[i]! - LR * mem.grads[i]!);
          moved++;
        }
      }
    }
    assert.ok(moved > 0, `processor ${importer} holds no partition`);
    assert.equal(firstDifference("master", master0, mem.master, expected), "");
  });

  test("tile instructions the kernel could not run are refused, naming them", () => {
    const { mem } = memory(8);
    const tooMany = TILE.entries + 1;
    const table = new Array<number>(3 * tooMany).fill(16);
    assert.throws(
      () => run(assemble([[ins(Opcode.Tile, 0, 0, tooMany, 0)]], table), mem),
      /processor 0: tile m=0 has 65 entries; at most 64/,
    );
    assert.throws(
      () => run(assemble([[ins(Opcode.TileXbar, 0, 0, 1, 64, 0)]], [16, 16, 16, NONE]), mem),
      /tile.xbar has c0=64; the matrix has 40 columns/,
    );
    assert.throws(
      () => run(assemble([[ins(Opcode.TileWbar, 2, 0, 1, 0, 0)]], [16, 16, NONE, NONE]), mem),
      /tile.wbar names matrix 2; the plan has 2/,
    );
  });
});
