// The eager engine's parts that need no GPU: the kernel source (compiled with nvcc when present), the host-side chunk
// layout, device and pool choices, and the errors createEngine gives on a machine without a usable GPU.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { cudaAvailable } from "../src/cuda/index.js";
import { planChunk } from "../src/engines/eager/chunk.js";
import { EAGER_KERNEL_NAMES, eagerKernelSource } from "../src/engines/eager/kernels.js";
import { DEFAULT_POOL_CAP_BYTES, defaultPoolBytes, gpuIndexOf } from "../src/engines/gpu/context.js";
import { OPTIMIZER_KERNEL_NAMES, optimizerKernelSource } from "../src/engines/gpu/optimizer-kernels.js";
import { gridFor } from "../src/engines/gpu/parameters.js";
import { createEngine, EngineUnavailableError } from "../src/engines/index.js";
import { ComputationGraph } from "../src/graph/graph.js";
import { ParameterCollection } from "../src/model/parameters.js";
import { input, lookup, sum, tanh } from "../src/ops/index.js";

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
});

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
    // 3 + 4 input floats, 3 lookups × 2 ints (7 → padded to 14 floats), then 4 args × 2 tables × 2 words
    assert.equal(plan.floats, 14 + 16);
    const words = new ArrayBuffer(4 * plan.floats);
    const buf = { f32: new Float32Array(words), i32: new Int32Array(words), u32: new Uint32Array(words) };
    const valPtr = new Float64Array(g.size);
    const gradPtr = new Float64Array(g.size);
    const tablePtr = new Float64Array(g.size);
    const values = 2 ** 33; // addresses above 4 GiB check the 64-bit split
    for (let i = 0; i < g.size; i++) {
      valPtr[i] = values + 4 * g.valueOffset[i]!;
      gradPtr[i] = 2 * values + 4 * g.valueOffset[i]!;
    }
    const chunkPtr = 3 * values;
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
