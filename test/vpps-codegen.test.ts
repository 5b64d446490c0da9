import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { assertNoSpills, parsePtxasReport } from "../src/cuda/compile/ptxas-report.js";
import { deviceModelFromProperties, H100_SXM, H200 } from "../src/cuda/hw/device-model.js";
import { opcodeConstant } from "../src/engines/vpps/codegen/operands.js";
import { matrixStruct } from "../src/engines/vpps/codegen/slots.js";
import { tileMode } from "../src/engines/vpps/codegen/staging.js";
import {
  generateKernelSource,
  kernelName,
  PROFILE_SLOTS,
  PROFILE_WORDS,
} from "../src/engines/vpps/codegen/template.js";
import { formatKernelProfile, summarizeKernelProfile } from "../src/engines/vpps/instrument/profile.js";
import { formatPlan } from "../src/engines/vpps/plan/format.js";
import {
  enumeratePlans,
  INTERPRETER_RESERVED_REGS,
  type MatrixSpec,
  planVpps,
  TRANSPOSED_RESERVE,
  type VppsPlan,
  validRowsPerWarp,
} from "../src/engines/vpps/plan/plan.js";
import { OPCODES, Opcode, TILE } from "../src/engines/vpps/script/format.js";
import { RandomStream } from "../src/util/random.js";
import {
  describeTreeLstmCompile,
  TREE_LSTM_SIZES,
  transposedTreeLstmPlans,
  treeLstm,
  treeLstmKernels,
} from "./vpps-nvcc.js";

function randomMatrices(seed: number): MatrixSpec[] {
  const r = new RandomStream(seed);
  return Array.from({ length: 1 + r.int(7) }, (_, i) => ({
    name: `M${i}`,
    rows: 1 + r.int(r.int(2) === 0 ? 40 : 1500),
    cols: 1 + r.int(r.int(2) === 0 ? 33 : 700),
  }));
}

/** Every plan under test: all Tree-LSTM plans the planner offers, and plans of random models. */
function plansUnderTest(): VppsPlan[] {
  const plans = TREE_LSTM_SIZES.flatMap(({ H, E }) => enumeratePlans(treeLstm(H, E), H100_SXM));
  plans.push(...transposedTreeLstmPlans());
  for (let seed = 1; seed <= 40; seed++) {
    plans.push(...enumeratePlans(randomMatrices(seed), H100_SXM, "auto", seed % 2 === 0));
  }
  return plans;
}

function describePlan(p: VppsPlan): string {
  return `${p.matrices.map((m) => `${m.name}[${m.rows}x${m.cols}]`).join(" ")} cta${p.ctasPerSm} rpw${p.rowsPerWarp}`;
}

describe("VPPS weight distribution (plan)", () => {
  const plans = plansUnderTest();

  test("offers plans for every Tree-LSTM size, rpw 1 always among them", () => {
    for (const { H, E } of TREE_LSTM_SIZES) {
      const cta1 = validRowsPerWarp(treeLstm(H, E), H100_SXM, 1);
      assert.equal(cta1[0], 1, `H=${H} E=${E}: valid rpw ${cta1}`);
    }
    assert.ok(plans.length > 40, `only ${plans.length} plans`);
  });

  test("every row of every matrix is held exactly once, by whole-row warps within its partition", () => {
    for (const plan of plans) {
      const where = describePlan(plan);
      const slotsUsed = new Set<string>();
      // transposed copies too: their partitions must not share a (CTA, slot) with anything either
      for (const m of [...plan.matrices, ...plan.transposed]) {
        const seen = new Uint8Array(m.rows);
        assert.equal(m.partitions.length, m.partitionCount, where);
        for (const p of m.partitions) {
          const key = `${p.cta}/${p.slot}`;
          assert.ok(!slotsUsed.has(key), `${where}: two partitions in CTA ${p.cta} slot ${p.slot}`);
          slotsUsed.add(key);
          assert.ok(p.cta >= 0 && p.cta < plan.ctas, `${where}: CTA ${p.cta} out of the grid of ${plan.ctas}`);
          assert.equal(p.globalPartition % plan.ctas, p.cta, `${where}: round-robin broken`);
          assert.ok(plan.slots[p.slot]!.chunks >= m.chunks, `${where}: slot ${p.slot} narrower than ${m.name}`);
          let rows = 0;
          for (const w of p.warps) {
            assert.ok(w.rowCount <= plan.rowsPerWarp, `${where}: warp holds ${w.rowCount} rows`);
            for (let r = w.firstRow; r < w.firstRow + w.rowCount; r++) {
              assert.ok(r >= p.firstRow && r < p.firstRow + p.rowCount, `${where}: row ${r} outside its partition`);
              assert.equal(seen[r], 0, `${where}: ${m.name} row ${r} held twice`);
              seen[r] = 1;
              rows++;
            }
          }
          assert.equal(rows, p.rowCount, `${where}: warps of ${m.name} partition ${p.partition}`);
        }
        const missing = seen.indexOf(0);
        assert.equal(missing, -1, `${where}: ${m.name} row ${missing} is held by no warp`);
      }
    }
  });

  test("load is balanced: partitions per CTA differ by at most one, rows per CTA by at most one row group", () => {
    for (const plan of plans) {
      const where = describePlan(plan);
      const perCta = new Array<number>(plan.ctas).fill(0);
      for (const m of [...plan.matrices, ...plan.transposed]) for (const p of m.partitions) perCta[p.cta]!++;
      assert.ok(
        Math.max(...perCta) - Math.min(...perCta) <= 1,
        `${where}: partitions per CTA ${Math.min(...perCta)}..${Math.max(...perCta)}`,
      );
      const group = 8 * plan.rowsPerWarp;
      for (const m of plan.matrices) {
        const rows = new Array<number>(plan.ctas).fill(0);
        for (const p of m.partitions) rows[p.cta]! += p.rowCount;
        const holders = rows.filter((r) => r > 0);
        // a matrix spread over every CTA is balanced over all of them; a smaller one over the CTAs holding it
        const pool = m.partitionCount >= plan.ctas ? rows : holders;
        assert.ok(
          Math.max(...pool) - Math.min(...pool) <= group,
          `${where}: ${m.name} rows per CTA ${Math.min(...pool)}..${Math.max(...pool)}`,
        );
      }
    }
  });

  test("register accounting: slots add up and stay within the budget", () => {
    for (const plan of plans) {
      const where = describePlan(plan);
      const w = plan.slots.reduce((s, x) => s + x.weightRegs, 0);
      const g = plan.slots.reduce((s, x) => s + x.gradientRegs, 0);
      assert.equal(plan.weightRegs, w, where);
      assert.equal(plan.gradientRegs, g, where);
      assert.ok(w + g <= plan.budget.forParameters, `${where}: ${w}+${g} > ${plan.budget.forParameters}`);
      assert.equal(plan.budget.forParameters, plan.budget.limitPerThread - INTERPRETER_RESERVED_REGS);
      assert.equal(plan.budget.limitPerThread, plan.ctasPerSm === 1 ? 255 : 128);
      for (const s of plan.slots) {
        for (const i of s.matrices) {
          const m = plan.matrices[i]; // undefined: a transposed copy (no gradient)
          if (m?.gradients === "registers")
            assert.ok(s.gradientChunks >= m.chunks, `${where}: gradient slot ${s.index}`);
        }
      }
      const last = plan.matrices.reduce((end, m) => Math.max(end, m.masterOffset + m.rows * m.cols), 0);
      assert.ok(plan.masterFloats >= last, `${where}: master buffer too small`);
    }
  });

  test("transposed copies: of register-gradient matrices only, within the reserve, dealt after every plan matrix", () => {
    let copies = 0;
    for (const plan of plans) {
      const where = describePlan(plan);
      const dealt = plan.matrices.reduce((n, m) => n + m.partitionCount, 0);
      for (const [k, t] of plan.transposed.entries()) {
        const src = plan.matrices[t.source]!;
        assert.equal(t.index, plan.matrices.length + k, `${where}: ${t.name} matrix number`);
        assert.equal(src.gradients, "registers", `${where}: ${t.name} copies a GEMM-gradient matrix`);
        assert.deepEqual([t.rows, t.cols, t.masterOffset], [src.cols, src.rows, src.masterOffset], where);
        assert.ok(t.firstPartition >= dealt, `${where}: ${t.name} dealt before a plan matrix`);
        copies++;
      }
      if (plan.transposed.length > 0) {
        const left = plan.budget.limitPerThread - plan.weightRegs - plan.gradientRegs;
        assert.ok(left >= TRANSPOSED_RESERVE, `${where}: copies leave ${left} registers per thread`);
      }
    }
    assert.ok(copies > 0, "no plan under test has a transposed copy");
    // the same plan without copies holds every plan matrix on the same CTAs
    const t = planVpps(treeLstm(256, 256), H100_SXM, { ctasPerSm: 1, rowsPerWarp: 2, transposed: true });
    const n = planVpps(treeLstm(256, 256), H100_SXM, { ctasPerSm: 1, rowsPerWarp: 2 });
    assert.deepEqual(
      t.transposed.map((x) => x.name),
      ["W_iou.T", "U_iou.T", "U_f1.T", "U_f2.T", "W_out.T"],
    );
    assert.equal(n.transposed.length, 0);
    assert.deepEqual(
      t.matrices.map((m) => m.partitions.map((p) => p.cta)),
      n.matrices.map((m) => m.partitions.map((p) => p.cta)),
    );
  });

  test("auto gradients: all in registers when they fit; otherwise the largest matrices go to GEMM first", () => {
    const small = planVpps(treeLstm(256, 256), H100_SXM);
    assert.ok(small.matrices.every((m) => m.gradients === "registers"));
    assert.equal(small.ctasPerSm, 2, "a model that fits twice over should get two CTAs per SM");
    // on a GPU with 100 SMs the H=512 model's gradients do not all fit: only the largest matrix's go to GEMM
    const big = planVpps(treeLstm(512, 256), { ...H100_SXM, smCount: 100 }, { ctasPerSm: 1 });
    const gemm = big.matrices.filter((m) => m.gradients === "gemm").map((m) => m.name);
    assert.deepEqual(gemm, ["U_iou"]);
    assert.ok(big.weightRegs + big.gradientRegs <= big.budget.forParameters);
    assert.equal(planVpps(treeLstm(512, 256), H100_SXM).ctasPerSm, 1);
    const forced = planVpps(treeLstm(128, 128), H100_SXM, { gradients: "gemm" });
    assert.equal(forced.gradientRegs, 0);
    // at 2 CTAs/SM with every gradient in registers the largest matrices stay off chip instead of a refusal
    const two = planVpps(treeLstm(512, 256), H100_SXM, { ctasPerSm: 2, gradients: "registers" });
    assert.ok(two.offChip.length > 0);
    assert.ok(two.weightRegs + two.gradientRegs <= two.budget.forParameters);
  });

  test("an oversized model is planned with its largest matrices off chip, the rest in registers", () => {
    const plan = planVpps(treeLstm(2048, 1024), H100_SXM);
    const off = plan.matrices.filter((m) => m.placement === "off-chip").map((m) => m.name);
    assert.ok(off.includes("U_iou"), off.join());
    assert.ok(off.length < plan.matrices.length, "something stays in registers");
    assert.ok(plan.weightRegs + plan.gradientRegs <= plan.budget.forParameters);
    for (const m of plan.matrices) {
      if (m.placement === "off-chip") assert.match(m.placementReason, /^off chip: needed for the rest to fit/);
    }
  });

  test("rejects bad input naming the field", () => {
    assert.throws(() => planVpps([], H100_SXM), /no 2-D weight matrices/);
    assert.throws(
      () => planVpps([{ name: "W", rows: 0, cols: 3 }], H100_SXM),
      /matrix 'W' must have a positive integer rows; got 0/,
    );
    assert.throws(
      () =>
        planVpps(
          [
            { name: "W", rows: 2, cols: 3 },
            { name: "W", rows: 2, cols: 3 },
          ],
          H100_SXM,
        ),
      /'W' appears twice/,
    );
    assert.throws(
      () => planVpps(treeLstm(128, 128), H100_SXM, { rowsPerWarp: 0 }),
      /rowsPerWarp must be a positive integer; got 0/,
    );
    const plan = planVpps(treeLstm(128, 128), H100_SXM, { rowsPerWarp: 3, ctasPerSm: 1 });
    assert.equal(plan.rowsPerWarp, 3);
  });

  test("device models: presets and properties from the driver", () => {
    assert.equal(H100_SXM.smCount, 132);
    assert.equal(H200.regsPerSm, 65_536);
    assert.equal(H200.sharedPerBlock, 227 * 1024);
    const d = deviceModelFromProperties({
      ...H100_SXM,
      name: "GPU",
      smCount: 80,
      computeCapability: { major: 8, minor: 0 },
    });
    assert.equal(d.arch, "sm_80");
    assert.equal(planVpps(treeLstm(128, 128), d).ctas, 160);
    assert.throws(
      () => deviceModelFromProperties({ ...H100_SXM, smCount: 0 }),
      /'smCount' must be a positive integer; got 0/,
    );
    assert.throws(() => deviceModelFromProperties({ ...H100_SXM, warpSize: 64 }), /'warpSize' must be 32/);
  });

  test("formatPlan shows the grid, the budget and every matrix and slot", () => {
    const text = formatPlan(planVpps(treeLstm(512, 256), H100_SXM));
    assert.match(text, /132 SMs x 1 CTA\(s\) = 132 persistent CTAs of 256 threads, 1 row\(s\) per warp/);
    assert.match(text, /255 limit - 72 interpreter = 183 for parameters; used 88 weights \+ 88 gradients = 176/);
    assert.match(text, /valid rows per warp for 1 CTA\(s\)\/SM: 1$/m);
    for (const name of ["W_iou", "U_iou", "U_f1", "U_f2", "W_out"]) assert.match(text, new RegExp(`^${name}\\s`, "m"));
    assert.match(text, /^U_iou\s+1536x1024\s+registers\s+32\s+192\s+0-131\s/m);
    assert.match(text, /^ {2}U_iou: registers: fits$/m);
    assert.match(text, /^3\s+8\s+8\s+W_iou$/m);
  });
});

describe("VPPS kernel source", () => {
  const plan = planVpps(treeLstm(256, 128), H100_SXM, { ctasPerSm: 1, rowsPerWarp: 2 });
  const source = generateKernelSource(plan, { model: "treelstm" });

  test("header states the spec and the register budget; constants are derived from the plan", () => {
    assert.equal(kernelName(plan, { model: "treelstm" }), "vpps_treelstm_cta1_rpw2");
    assert.match(source, /spec: \{ model: "treelstm", rowsPerWarp: 2, ctasPerSm: 1, scriptChunkWords: 2048/);
    assert.match(
      source,
      /register budget per thread: 255 limit - 72 reserved for the interpreter = 183 for parameters/,
    );
    assert.match(source, /constexpr int kCtas = 132; /);
    assert.match(source, /constexpr int kRpw = 2; /);
    assert.match(
      source,
      /extern "C" __global__ void __launch_bounds__\(kThreads, kCtasPerSm\)\nvpps_treelstm_cta1_rpw2\(/,
    );
    assert.doesNotMatch(source, /\$\{|undefined|NaN/);
    assert.match(source, /constexpr bool kProfile = false;/);
    const profiled = generateKernelSource(plan, { model: "treelstm", profile: true });
    assert.match(profiled, /constexpr bool kProfile = true;/);
    assert.equal(kernelName(plan, { model: "treelstm", profile: true }), "vpps_treelstm_cta1_rpw2_prof");
    assert.match(source, /constexpr bool kTrace = false;/);
    assert.match(generateKernelSource(plan, { model: "treelstm", trace: true }), /constexpr bool kTrace = true;/);
    assert.equal(kernelName(plan, { model: "treelstm", trace: true }), "vpps_treelstm_cta1_rpw2_trace");
    assert.throws(
      () => generateKernelSource(plan, { model: "treelstm", trace: true, profile: true }),
      /profile or with trace, not both/,
    );
  });

  test("the interpreter has one case per opcode of the script format", () => {
    for (const o of OPCODES) {
      const c = opcodeConstant(o.opcode);
      assert.match(source, new RegExp(`constexpr u32 ${c} = ${o.opcode};`));
      assert.equal(
        source.split(`case ${c}:`).length - 1,
        2,
        `${c}: one case in instruction_words, one in the interpreter`,
      );
    }
  });

  test("tile instructions: each case picks any matrix of the plan, checks its entry count and runs its routine", () => {
    assert.match(
      source,
      new RegExp(`constexpr int kTileEntries = ${TILE.entries}, kTileRows = ${TILE.rows}, kTileCols = ${TILE.cols};`),
    );
    assert.match(source, new RegExp(`constexpr int kTileWbarEntries = ${TILE.wbarEntries};`));
    assert.match(source, new RegExp(`constexpr int kTileXbarRows = ${TILE.xbarRows};`));
    const cases: [Opcode, string, string][] = [
      [Opcode.Tile, "tile_forward", "kTileEntries"],
      [Opcode.TileXbar, "tile_xbar", "kTileEntries"],
      [Opcode.TileWbar, "tile_wbar", "kTileWbarEntries"],
    ];
    for (const [op, routine, limit] of cases) {
      const c = opcodeConstant(op);
      const start = source.indexOf(`case ${c}: {`);
      assert.ok(start > 0, `${c}: no interpreter case`);
      const body = source.slice(start, source.indexOf("} break;", start));
      for (const m of plan.matrices) {
        assert.match(body, new RegExp(`case ${m.index}: tile_matrix<${matrixStruct(m)}>\\(offset, rows, cols\\);`), c);
      }
      assert.match(body, /default: report_error\(status, kErrBadMatrix, \(int\)n/, c);
      assert.match(
        body,
        new RegExp(
          `if \\(count > ${limit} \\|\\| r0 >= rows \\|\\| c0 >= cols\\) \\{\\s+report_error\\(status, kErrBadLength`,
        ),
        c,
      );
      assert.match(body, new RegExp(`${routine}\\(args, `), c);
    }
    // import.grads adds to every register gradient this CTA holds, the same ones export.grads writes out
    const imports = source.match(/import_rows<M\d+_\w+>\(g\d+, first_row/g)?.length ?? 0;
    const exports = source.match(/export_rows<M\d+_\w+>\(g\d+, first_row/g)?.length ?? 0;
    assert.ok(imports > 0);
    assert.equal(imports, exports);
  });

  test("tile routines trade registers for speed by the plan's register headroom (tileMode)", () => {
    const tight = planVpps(treeLstm(512, 256), H100_SXM, { ctasPerSm: 1 });
    const roomy = planVpps(treeLstm(128, 128), H100_SXM, { ctasPerSm: 1 });
    assert.deepEqual(tileMode(tight), { passes: 2, fast: false });
    assert.deepEqual(tileMode(roomy), { passes: 1, fast: true });
    const tightSource = generateKernelSource(tight, { model: "treelstm" });
    assert.match(tightSource, /constexpr int kTilePasses = 2;/);
    assert.match(tightSource, /constexpr bool kTileFast = false;/);
    assert.match(generateKernelSource(roomy, { model: "treelstm" }), /constexpr bool kTileFast = true;/);
    // the nvcc tests compile plans of every kind: two passes, one pass, fast (npm test's sample holds one of each)
    const kinds = new Set(
      TREE_LSTM_SIZES.flatMap(({ H, E }) => enumeratePlans(treeLstm(H, E), H100_SXM)).map((p) =>
        JSON.stringify(tileMode(p)),
      ),
    );
    assert.equal(kinds.size, 3, [...kinds].join(" "));
  });

  test("register arrays are declared per slot with the planned sizes", () => {
    for (const s of plan.slots) {
      assert.match(source, new RegExp(`float w${s.index}\\[kRpw\\]\\[${s.chunks}\\];`));
      if (s.gradientChunks > 0)
        assert.match(source, new RegExp(`float g${s.index}\\[kRpw\\]\\[${s.gradientChunks}\\];`));
    }
  });

  test("parsePtxasReport reads functions, spills and registers", () => {
    const log = `ptxas info    : Compiling entry function 'a' for 'sm_90'
ptxas info    : Function properties for a
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 80 registers, used 1 barriers, 16388 bytes smem
ptxas info    : Function properties for b
    96 bytes stack frame, 92 bytes spill stores, 60 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 96 bytes cumulative stack size, 16388 bytes smem`;
    const [a, b] = parsePtxasReport(log);
    assert.deepEqual(a, {
      name: "a",
      stackFrameBytes: 0,
      spillStoreBytes: 0,
      spillLoadBytes: 0,
      registers: 80,
      sharedBytes: 16388,
    });
    assert.equal(b!.spillStoreBytes, 92);
    assertNoSpills(a!);
    assert.throws(() => assertNoSpills(b!), /b: expected 0 bytes of stack frame and spills .* 92 bytes spill stores/);
  });
});

describe("the nvcc kernels: npm test's sample and the sweep", () => {
  test("sample and sweep together are every kernel once; the sample holds each tile mode's tightest plan", () => {
    const kernels = treeLstmKernels();
    const sample = kernels.filter((k) => k.sample);
    const held = (k: { plan: VppsPlan }) => k.plan.weightRegs + k.plan.gradientRegs;
    assert.ok(sample.length >= 5 && sample.length <= 7, `a sample of ${sample.length} of ${kernels.length} kernels`);
    assert.ok(kernels.length >= 3 * sample.length, `the sweep holds the most: ${kernels.length}`);
    const plain = kernels.filter((k) => k.plan.transposed.length === 0 && /^vpps_treelstm_h/.test(k.name));
    const modes = new Set(plain.map((k) => JSON.stringify(tileMode(k.plan))));
    for (const mode of modes) {
      const ofMode = plain.filter((k) => JSON.stringify(tileMode(k.plan)) === mode);
      const most = Math.max(...ofMode.map(held));
      assert.ok(
        ofMode.some((k) => k.sample && held(k) === most),
        `tile mode ${mode}: the sample holds a plan with the most parameter registers (${most})`,
      );
    }
    const transposed = kernels.filter((k) => k.plan.transposed.length > 0);
    assert.ok(transposed.some((k) => k.sample && held(k) === Math.max(...transposed.map(held))));
    assert.ok(sample.some((k) => k.name.endsWith("_prof")) && sample.some((k) => k.name.endsWith("_trace")));
    assert.ok(
      sample.some((k) => k.plan.weightRegs + k.plan.gradientRegs === Math.max(...kernels.map(held))),
      "the sample holds the tightest kernel of all",
    );
  });
});

describeTreeLstmCompile(
  "VPPS kernels compile for sm_90 without spills (nvcc -Xptxas -v): a sample",
  "the tightest Tree-LSTM plans, plain and with transposed copies, and the profiled and traced builds",
  treeLstmKernels().filter((k) => k.sample),
);

describe("VPPS kernel profile summary", () => {
  test("shares per opcode class from the raw counters, most cycles first", () => {
    const words = new BigUint64Array(PROFILE_WORDS);
    const set = (op: Opcode, cycles: number, count: number) => {
      words[2 * op] = BigInt(cycles);
      words[2 * op + 1] = BigInt(count);
    };
    set(Opcode.Wait, 500, 10);
    set(Opcode.MatVec, 300, 4);
    set(Opcode.LstmCell, 100, 2);
    words[PROFILE_SLOTS.load] = 50n;
    words[PROFILE_SLOTS.staging] = 10n;
    words[PROFILE_SLOTS.total] = 1000n;
    const p = summarizeKernelProfile(words);
    assert.deepEqual(
      p.opcodes.map((o) => [o.mnemonic, o.count, o.share]),
      [
        ["wait", 10, 0.5],
        ["matvec", 4, 0.3],
        ["lstm", 2, 0.1],
      ],
    );
    assert.equal(p.waitShare, 0.5);
    assert.equal(p.matrixShare, 0.3);
    assert.equal(p.otherShare, 0.1);
    assert.match(formatKernelProfile(p), /wait 50\.0%, matrix 30\.0%, other instructions 10\.0%, weight load 5\.0%/);
  });
});
