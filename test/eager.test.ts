// The eager engine's parts that need no GPU: the kernel source (compiled with nvcc when present), the host-side chunk
// layout, device and pool choices, and the errors createEngine gives on a machine without a usable GPU.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { EAGER_KERNEL_NAMES, eagerKernelSource } from "../src/codegen/eager-kernels.js";
import { cudaAvailable } from "../src/cuda/index.js";
import { DEFAULT_POOL_CAP_BYTES, defaultPoolBytes, gpuIndexOf } from "../src/cuda/runtime/context.js";
import { gridFor } from "../src/cuda/runtime/launch.js";
import { CpuEngine } from "../src/engines/cpu.js";
import { groupRows, type NodeRegions, placeNodes, planChunk } from "../src/engines/eager/chunk.js";
import { OPTIMIZER_KERNEL_NAMES, optimizerKernelSource } from "../src/engines/gpu/optimizer-kernels.js";
import { normPartialSlots } from "../src/engines/gpu/parameters.js";
import { createEngine, EngineUnavailableError } from "../src/engines/index.js";
import { Expression } from "../src/graph/expression.js";
import { ComputationGraph } from "../src/graph/graph.js";
import { Op } from "../src/graph/opcodes.js";
import { ParameterCollection } from "../src/model/parameters.js";
import { input, lookup, lookupRows, pickRange, sum, tanh } from "../src/ops/index.js";
import { deriveKey, RandomStream } from "../src/util/random.js";
import { buildRandomGraph, randomModel } from "./random-graph.js";

const nvcc = spawnSync("nvcc", ["--version"], { encoding: "utf8" });
const noNvcc = nvcc.status === 0 ? false : "nvcc is not on PATH";

/**
 * Compiles `source` with nvcc for sm_90 and checks ptxas's report: one per kernel of `names`, none with a stack
 * frame or spills.
 */
function compileWithNvcc(source: string, names: readonly string[], file: string): void {
  const dir = mkdtempSync(join(tmpdir(), "vpps-eager-"));
  try {
    const cu = join(dir, `${file}.cu`);
    writeFileSync(cu, source);
    const out = join(dir, `${file}.cubin`);
    const r = spawnSync("nvcc", ["-arch=sm_90", "-cubin", "-Xptxas", "-v", "-o", out, cu], { encoding: "utf8" });
    assert.equal(r.status, 0, `nvcc failed:\n${r.stderr}`);
    // ptxas reports every kernel's registers, stack frame and spills (on stderr)
    const frames = [...`${r.stdout}${r.stderr}`.matchAll(/(\d+) bytes stack frame, (\d+) bytes spill stores/g)];
    assert.equal(frames.length, names.length, "one ptxas report per kernel");
    for (const f of frames) assert.deepEqual([f[1], f[2]], ["0", "0"], "no stack frame and no spills");
    assert.ok(readFileSync(out).length > 1000);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe("eager kernel source", () => {
  const source = eagerKernelSource();

  test('every kernel name is defined once as an extern "C" __global__ function', () => {
    assert.ok(source.indexOf('extern "C" {') < source.indexOf("__global__"), 'kernels sit inside extern "C"');
    for (const name of EAGER_KERNEL_NAMES) {
      const defs = source.match(new RegExp(`__global__ void ${name}\\(`, "g")) ?? [];
      assert.equal(defs.length, 1, `${name}: ${defs.length} definitions`);
    }
    const all = [...source.matchAll(/__global__ void (\w+)\(/g)].map((m) => m[1]);
    assert.deepEqual(all.sort(), [...EAGER_KERNEL_NAMES].sort(), "no kernel outside the list");
  });

  test("compiles with nvcc for sm_90, without local memory", { skip: noNvcc }, () => {
    compileWithNvcc(source, EAGER_KERNEL_NAMES, "eager");
  });

  test("no atomics: every sum is added in one order, so two runs give the same bits", () => {
    // float atomics add in the order the threads reach them, which changes from run to run (and with the streams):
    // the lookup-gradient scatter, the concat gradient and the cell's child gradients each add in a fixed order
    assert.deepEqual(source.match(/\batomic\w*\s*\(/g) ?? [], [], "atomic calls in the eager kernels");
  });
});

describe("trainer update kernel source (every DeviceParameters engine)", () => {
  const source = optimizerKernelSource();

  test('every kernel name is defined once as an extern "C" __global__ function, on adam_element', () => {
    const all = [...source.matchAll(/__global__ void (\w+)\(/g)].map((m) => m[1]);
    assert.deepEqual(all.sort(), [...OPTIMIZER_KERNEL_NAMES].sort());
    assert.equal(source.match(/adam_element\(/g)?.length, 3, "defined once (the prelude), used by both Adam kernels");
  });

  test("compiles with nvcc for sm_90, without local memory", { skip: noNvcc }, () => {
    compileWithNvcc(source, OPTIMIZER_KERNEL_NAMES, "optimizer");
  });

  test("the gradient norm without atomics: blocks write slots, one block adds them in order", () => {
    // the norm sets the clipping scale of every weight: summed with atomics, a clipped update differed in its last
    // bits from run to run, and so did LeNet's and the Tree-LSTM's training on the eager engine
    assert.deepEqual(source.match(/\batomic\w*\s*\(/g) ?? [], [], "atomic calls in the update kernels");
    assert.match(source, /partials\[blockIdx\.x\] = red\[0\]/);
    assert.match(source, /__global__ void opt_sum_partials\(float\* out, const float\* partials, int count\)/);
  });

  test("the norm's slots: one per block of every sum-of-squares launch, a lookup table's at its most", () => {
    const pc = new ParameterCollection({ seed: 1 });
    pc.addParameters([300, 1000], undefined, "W"); // 300 000 floats: 1172 blocks
    pc.addParameters([7], undefined, "b"); // 1 block
    pc.addLookupParameters(5000, 64, undefined, "E"); // 320 000 floats: 1250 blocks, any touched rows fewer
    assert.equal(normPartialSlots(pc.all), gridFor(300_000) + 1 + gridFor(320_000));
    assert.equal(normPartialSlots(pc.all), 1172 + 1 + 1250);
    for (const touched of [1, 17, 4999, 5000]) assert.ok(gridFor(touched * 64) <= gridFor(320_000));
    assert.equal(normPartialSlots([]), 1, "a slot even without parameters (the pool refuses empty allocations)");
  });
});

/** Regions for placeNodes: parameter p's weights at 2^40 + 2^20·p, its gradient 2^20 bytes after. */
function regionsAt(values: number, grads: number, chunkPtr: number): NodeRegions {
  return {
    values,
    grads,
    chunkPtr,
    paramValue: (p) => 2 ** 40 + 2 ** 21 * p,
    paramGrad: (p) => 2 ** 40 + 2 ** 21 * p + 2 ** 20,
  };
}

describe("eager chunk layout (host side)", () => {
  test("inputs, lookups grouped by table, and sum pointer tables, at the addresses the writer reports", () => {
    const pc = new ParameterCollection({ seed: 3 });
    const E = pc.addLookupParameters(10, 4, undefined, "E");
    const F = pc.addLookupParameters(6, 4, undefined, "F");
    const g = new ComputationGraph();
    const x = input(g, [1, 2, 3]); // 0
    const a = lookup(g, E, 7); // 1
    const b = lookup(g, F, 2); // 2
    const c = lookup(g, E, 7); // 3 (a repeated row)
    const y = input(g, [4, 5, 6, 7]); // 4
    const s = sum([a, b, c, a]); // 5
    tanh(x);
    const plan = planChunk(g, 0, g.size - 1);
    // 3 + 4 input floats; per table rows and offsets (2 per lookup), distinct rows, their starts (one more) and the
    // sources (1 per lookup): E 2·2 + 1 + 2 + 2, F 2 + 1 + 2 + 1 (22, even); then 4 args × 2 tables × 2 words
    assert.equal(plan.floats, 7 + 9 + 6 + 16);
    const words = new ArrayBuffer(4 * plan.floats);
    const buf = { f32: new Float32Array(words), i32: new Int32Array(words), u32: new Uint32Array(words) };
    const valPtr = new Float64Array(g.size);
    const gradPtr = new Float64Array(g.size);
    const tablePtr = new Float64Array(g.size);
    const values = 2 ** 33; // addresses above 4 GiB check the 64-bit split
    const chunkPtr = 3 * values;
    placeNodes(g, 0, g.size - 1, plan, regionsAt(values, 2 * values, chunkPtr), { valPtr, gradPtr });
    const chunk = plan.write(buf, chunkPtr, valPtr, gradPtr, tablePtr);
    assert.deepEqual([...buf.f32.subarray(0, 7)], [1, 2, 3, 4, 5, 6, 7]);
    assert.equal(valPtr[x.id], chunkPtr);
    assert.equal(valPtr[y.id], chunkPtr + 12);
    assert.equal(chunk.lookups.length, 2);
    const [e, f] = chunk.lookups;
    assert.deepEqual([e!.param, e!.dim, e!.count], [E.index, 4, 2]);
    assert.deepEqual([f!.param, f!.count], [F.index, 1]);
    const ints = (ptr: number, n: number) => [...buf.i32.subarray((ptr - chunkPtr) / 4, (ptr - chunkPtr) / 4 + n)];
    assert.deepEqual(ints(e!.rowsPtr, 2), [7, 7]);
    assert.deepEqual(ints(e!.offsetsPtr, 2), [g.valueOffset[a.id], g.valueOffset[c.id]]);
    assert.deepEqual(ints(f!.rowsPtr, 1), [2]);
    // the backward's scatter: row 7 once, its two uses in node order
    assert.deepEqual([e!.distinct, f!.distinct], [1, 1]);
    assert.deepEqual(ints(e!.distinctRowsPtr, 1), [7]);
    assert.deepEqual(ints(e!.startsPtr, 2), [0, 2]);
    assert.deepEqual(ints(e!.sourcesPtr, 2), [g.valueOffset[a.id], g.valueOffset[c.id]]);
    assert.deepEqual(ints(f!.sourcesPtr, 1), [g.valueOffset[b.id]]);
    assert.equal((tablePtr[s.id]! - chunkPtr) % 8, 0, "the pointer table is 8-byte aligned");
    const at = (tablePtr[s.id]! - chunkPtr) / 4;
    const u64 = (k: number) => buf.u32[at + 2 * k]! + buf.u32[at + 2 * k + 1]! * 2 ** 32;
    assert.deepEqual(
      [0, 1, 2, 3].map(u64),
      [a, b, c, a].map((n) => valPtr[n.id]),
    );
    assert.deepEqual(
      [4, 5, 6, 7].map(u64),
      [a, b, c, a].map((n) => gradPtr[n.id]),
    );
  });

  test("lookups grouped by row: rows in order of first use, each row's uses in node order", () => {
    assert.deepEqual(groupRows([4, 9, 4, 4, 2, 9]), {
      distinct: [4, 9, 2],
      starts: [0, 3, 5, 6],
      order: [0, 2, 3, 1, 5, 4],
    });
    assert.deepEqual(groupRows([]), { distinct: [], starts: [0], order: [] });
  });

  test("the scatter the lists describe adds a repeated row's gradients in node order (no atomics)", () => {
    const pc = new ParameterCollection({ seed: 3 });
    const E = pc.addLookupParameters(10, 3, undefined, "E");
    const g = new ComputationGraph();
    const rows = [7, 2, 7, 7, 2, 0];
    for (const r of rows) lookup(g, E, r);
    const plan = planChunk(g, 0, g.size - 1);
    const words = new ArrayBuffer(4 * plan.floats);
    const buf = { f32: new Float32Array(words), i32: new Int32Array(words), u32: new Uint32Array(words) };
    const n = g.size;
    const chunk = plan.write(buf, 0, new Float64Array(n), new Float64Array(n), new Float64Array(n));
    const l = chunk.lookups[0]!;
    const ints = (ptr: number, k: number) => buf.i32.subarray(ptr / 4, ptr / 4 + k);
    const distinct = ints(l.distinctRowsPtr, l.distinct);
    const starts = ints(l.startsPtr, l.distinct + 1);
    const sources = ints(l.sourcesPtr, l.count);
    // node gradients of very different magnitudes: a float sum depends on its order
    const grads = new Float32Array(g.valueSize);
    for (let j = 0; j < rows.length; j++)
      for (let d = 0; d < 3; d++) grads[g.valueOffset[j]! + d] = 10 ** (3 * (j % 3)) * (1 + d / 7);
    // vp_scatter_add_rows, one thread per (distinct row, element), as the kernel does
    const table = new Float32Array(10 * 3);
    for (let u = 0; u < l.distinct; u++) {
      for (let d = 0; d < 3; d++) {
        let acc = table[distinct[u]! * 3 + d]!;
        for (let s = starts[u]!; s < starts[u + 1]!; s++) acc = Math.fround(acc + grads[sources[s]! + d]!);
        table[distinct[u]! * 3 + d] = acc;
      }
    }
    // expected: each row's uses added in node order, starting from the table's gradient
    const expected = new Float32Array(10 * 3);
    rows.forEach((r, j) => {
      for (let d = 0; d < 3; d++)
        expected[r * 3 + d] = Math.fround(expected[r * 3 + d]! + grads[g.valueOffset[j]! + d]!);
    });
    assert.deepEqual([...distinct], [7, 2, 0]);
    assert.deepEqual([...table], [...expected]);
    assert.equal(l.distinct * l.dim, 9, "the launch covers the distinct rows' elements");
  });

  test("a lookupRows node is its rows' lookups: gathered with the table's other lookups, grouped by row", () => {
    const pc = new ParameterCollection({ seed: 3 });
    const E = pc.addLookupParameters(10, 3, undefined, "E");
    const g = new ComputationGraph();
    const a = lookup(g, E, 4); // 0
    const x = lookupRows(g, E, [2, 4, 2]); // 1: rows at its offset + 3n
    const plan = planChunk(g, 0, g.size - 1);
    const words = new ArrayBuffer(4 * plan.floats);
    const buf = { f32: new Float32Array(words), i32: new Int32Array(words), u32: new Uint32Array(words) };
    const n = g.size;
    const chunk = plan.write(buf, 0, new Float64Array(n), new Float64Array(n), new Float64Array(n));
    assert.equal(chunk.lookups.length, 1);
    const l = chunk.lookups[0]!;
    const ints = (ptr: number, k: number) => [...buf.i32.subarray(ptr / 4, ptr / 4 + k)];
    const y = g.valueOffset[x.id]!;
    assert.deepEqual([l.param, l.dim, l.count, l.distinct], [E.index, 3, 4, 2]);
    assert.deepEqual(ints(l.rowsPtr, 4), [4, 2, 4, 2]);
    assert.deepEqual(ints(l.offsetsPtr, 4), [g.valueOffset[a.id], y, y + 3, y + 6]);
    assert.deepEqual(ints(l.distinctRowsPtr, 2), [4, 2]);
    assert.deepEqual(ints(l.startsPtr, 3), [0, 2, 4]);
    assert.deepEqual(ints(l.sourcesPtr, 4), [g.valueOffset[a.id], y + 3, y, y + 6]);
  });

  test("a pickRange of an input made in the same forward call reads the input's uploaded values", () => {
    const g = new ComputationGraph();
    const w = input(g, [9, 9]); // 0
    const x = input(g, [1, 2, 3, 4, 5]); // 1
    const p = pickRange(x, 1, 4); // 2
    const q = pickRange(p, 1, 3); // 3: a slice of a slice
    tanh(q);
    const plan = planChunk(g, 0, g.size - 1);
    const valPtr = new Float64Array(g.size);
    const gradPtr = new Float64Array(g.size);
    const chunkPtr = 2 ** 34;
    placeNodes(g, 0, g.size - 1, plan, regionsAt(2 ** 32, 2 ** 33, chunkPtr), { valPtr, gradPtr });
    assert.deepEqual([plan.inputAt.get(w.id), plan.inputAt.get(x.id)], [0, 2]);
    assert.equal(valPtr[x.id], chunkPtr + 8, "the input's values are in the chunk");
    assert.equal(valPtr[p.id], chunkPtr + 8 + 4, "the slice starts one float into the input's values");
    assert.equal(valPtr[q.id], chunkPtr + 8 + 8);
    assert.equal(gradPtr[p.id], 2 ** 33 + 4 * g.valueOffset[p.id]!, "a slice's gradient has its own slot");
  });

  test("generated graphs in random forward chunks: every node's address holds its value, as the CPU engine computes it", () => {
    // An emulated device: one float array addressed in bytes, NaN where nothing was written. Each chunk is placed,
    // written and uploaded as the engine does; every node that computes (not a parameter, input or pickRange) has
    // its CPU value stored at its address, as its kernel would. Then every node's address must read its CPU value.
    let sameCallSlices = 0;
    for (let seed = 1; seed <= 12; seed++) {
      const rs = new RandomStream(deriveKey(seed, "eager chunks"));
      const m = randomModel(seed);
      const g = new ComputationGraph();
      buildRandomGraph(g, m, { seed, instances: 3 + rs.int(4), steps: 10 + rs.int(20) });
      const cpu = new CpuEngine(m.params);
      const nodeValue = (i: number) => cpu.value(new Expression(g, i, g.generation));
      const params = m.params.all;
      const paramBytes = 2 ** 21;
      const valuesAt = paramBytes * params.length;
      const gradsAt = valuesAt + 4 * g.valueSize;
      const auxAt = gradsAt + 4 * g.valueSize;
      const memory = new Float32Array(auxAt / 4 + 4 * g.valueSize + 1024).fill(Number.NaN);
      const regions: NodeRegions = {
        values: valuesAt,
        grads: gradsAt,
        chunkPtr: 0,
        paramValue: (p) => paramBytes * p,
        paramGrad: (p) => paramBytes * p + paramBytes / 2,
      };
      params.forEach((p, k) => {
        memory.set(p.value, (paramBytes * k) / 4);
      });
      const valPtr = new Float64Array(g.size);
      const gradPtr = new Float64Array(g.size);
      const tablePtr = new Float64Array(g.size);
      let auxTop = auxAt;
      for (let from = 0; from < g.size; ) {
        const to = Math.min(g.size - 1, from + rs.int(12));
        const plan = planChunk(g, from, to);
        const chunkPtr = auxTop;
        placeNodes(g, from, to, plan, { ...regions, chunkPtr }, { valPtr, gradPtr });
        const words = new ArrayBuffer(4 * plan.floats);
        const buf = { f32: new Float32Array(words), i32: new Int32Array(words), u32: new Uint32Array(words) };
        plan.write(buf, chunkPtr, valPtr, gradPtr, tablePtr);
        memory.set(buf.f32, chunkPtr / 4); // the upload
        for (let i = from; i <= to; i++) {
          const op = g.op[i]!;
          if (op === Op.PickRange) {
            const arg = g.arg(i, 0);
            if (g.op[arg] === Op.Input && arg >= from) sameCallSlices++;
          }
          if (op !== Op.Parameter && op !== Op.Input && op !== Op.PickRange) {
            memory.set(nodeValue(i), valPtr[i]! / 4); // the node's kernel
          }
        }
        auxTop += 4 * plan.floats;
        from = to + 1;
      }
      for (let i = 0; i < g.size; i++) {
        const want = nodeValue(i);
        const got = memory.subarray(valPtr[i]! / 4, valPtr[i]! / 4 + want.length);
        assert.deepEqual([...got], [...want], `seed ${seed}: node ${i} (op ${Op[g.op[i]!]}) at its address`);
      }
    }
    assert.ok(sameCallSlices > 0, "some cases slice an input made in the same call");
  });

  test("a chunk of nodes without inputs, lookups or sums is empty", () => {
    const g = new ComputationGraph();
    const x = input(g, [1]);
    tanh(tanh(x));
    assert.equal(planChunk(g, 1, 2).floats, 0);
  });
});

describe("GPU choices", () => {
  test("device strings: auto and cuda are GPU 0, cuda:N is GPU N, cpu is refused", () => {
    assert.equal(gpuIndexOf("auto"), 0);
    assert.equal(gpuIndexOf("cuda"), 0);
    assert.equal(gpuIndexOf("cuda:3"), 3);
    assert.throws(() => gpuIndexOf("cpu", "the eager engine"), /the eager engine runs on a GPU.*--device cpu/);
    assert.throws(() => gpuIndexOf("gpu7"), /expected "auto", "cpu", "cuda" or "cuda:N"/);
  });

  test("pool size: a quarter of the free memory, at most 4 GiB; launch grids", () => {
    assert.equal(defaultPoolBytes(8 * 1024 ** 3), 2 * 1024 ** 3);
    assert.equal(defaultPoolBytes(80 * 1024 ** 3), DEFAULT_POOL_CAP_BYTES);
    assert.equal(gridFor(1), 1);
    assert.equal(gridFor(257), 2);
    assert.equal(gridFor(1e9), 4096);
  });
});

describe("createEngine('eager') without a GPU", () => {
  const available = cudaAvailable();
  const hasGpu = available.ok ? "this machine has a usable GPU" : false;

  test("--device cpu with --engine eager is an error that says so", () => {
    const pc = new ParameterCollection();
    pc.addParameters([2, 2]);
    assert.throws(
      () => createEngine("eager", pc, { device: "cpu" }),
      (e: unknown) =>
        e instanceof EngineUnavailableError && /runs on a GPU and cannot run with --device cpu/.test(e.message),
    );
  });

  test("names the missing library and suggests --engine cpu", { skip: hasGpu }, () => {
    const pc = new ParameterCollection();
    pc.addParameters([2, 2]);
    for (const device of [undefined, "auto", "cuda:0"]) {
      assert.throws(
        () => createEngine("eager", pc, device === undefined ? {} : { device }),
        (e: unknown) => {
          assert.ok(e instanceof EngineUnavailableError, `got ${String(e)}`);
          assert.match(e.message, /the 'eager' engine needs a CUDA GPU/);
          assert.match(e.message, /libcuda\.so/);
          assert.match(e.message, /Use --engine cpu\.$/);
          return true;
        },
      );
    }
  });
});
