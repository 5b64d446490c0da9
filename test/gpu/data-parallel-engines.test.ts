// The GPU engines under a GradientReducer on one GPU (src/engines/data-parallel.ts), with fake reducers of world
// size 1: the identity (every engine must train as without a reducer: eager and autobatch through DeviceParameters'
// bucketed all-reduce and touched-row exchange, VPPS in its gradient-export mode with the update after the kernel)
// and a "doubling" reducer (the sum of two ranks that computed the same gradients): training a batch under it must
// equal training, without a reducer, on the batch twice (the loss is a sum, so its gradient doubles). The 2-GPU test
// over NCCL is src/parallel/'s. Skipped, with the reason printed, without a GPU.

import assert from "node:assert/strict";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import {
  type CudaKernel,
  cudaAvailable,
  type DevicePtr,
  type GpuContext,
  type Handle,
  karg,
} from "../../src/cuda/index.js";
import { syntheticTrees } from "../../src/data/synthetic.js";
import type { TreeNode } from "../../src/data/tree.js";
import { Vocabulary } from "../../src/data/vocab.js";
import { AutobatchGpuEngine } from "../../src/engines/autobatch/gpu-engine.js";
import type { DataParallelEngine, GradientReducer } from "../../src/engines/data-parallel.js";
import { EagerEngine } from "../../src/engines/eager/engine.js";
import { DP_BUCKET_FLOATS } from "../../src/engines/gpu/parameters.js";
import { VppsEngine } from "../../src/engines/vpps/engine.js";
import { ComputationGraph } from "../../src/graph/graph.js";
import { TreeLstmModel } from "../../src/models/treelstm/model.js";
import { AdamTrainer, SimpleSGDTrainer, type Trainer } from "../../src/optim/trainers.js";

const available = cudaAvailable();
const skip = available.ok ? false : `no usable CUDA GPU: ${available.reason.split("\n")[0]}`;
if (skip) console.log(`skipping GPU tests: ${skip}`);

const MiB = 1024 ** 2;
const cacheDir = process.env["VPPS_TEST_CACHE"] ?? join(tmpdir(), "vpps-test-kernels");
const H = 32;
const BATCH = 4;
const STEPS = 6;
const trees = syntheticTrees(BATCH * STEPS, 17);
const vocab = Vocabulary.fromTrees(trees);
const makeModel = () => new TreeLstmModel({ vocabSize: vocab.size, embed: H, hidden: H, seed: 4, dropout: 0 });

/** A fake reducer of world size 1 that multiplies device sums by `factor` (1: identity; 2: two equal ranks). */
class FakeReducer implements GradientReducer {
  readonly rank = 0;
  readonly worldSize = 1;
  deviceCalls = 0;
  deviceFloats = 0;
  gathers = 0;
  private kernel: CudaKernel | undefined;

  constructor(
    private readonly ctx: GpuContext,
    private readonly factor: number,
  ) {}

  allReduceDevice(ptr: DevicePtr, count: number, stream: Handle): void {
    this.deviceCalls++;
    this.deviceFloats += count;
    if (this.factor === 1) return;
    this.kernel ??= this.ctx.kernels(
      "dp_test_scale.cu",
      `extern "C" __global__ void dp_test_scale(float* x, float f, int n) {
        for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) x[i] *= f;
      }`,
      ["dp_test_scale"],
    ).kernels.dp_test_scale;
    const grid = Math.max(1, Math.min(Math.ceil(count / 256), 1024));
    this.kernel.launch({ grid, block: 256, stream: this.ctx.stream }, [
      karg.ptr(ptr),
      karg.f32(this.factor),
      karg.i32(count),
    ]);
    assert.equal(stream, this.ctx.stream.handle, "the engine queues its sums on its own stream");
  }
  allReduceHost(data: Float32Array | Float64Array): void {
    for (let i = 0; i < data.length; i++) data[i]! *= this.factor;
  }
  allGatherHost(data: Int32Array): Int32Array[] {
    this.gathers++;
    return [data.slice()];
  }
}

interface Subject {
  readonly name: string;
  make(model: TreeLstmModel): { engine: DataParallelEngine; ctx: GpuContext };
  /** Relative tolerance of losses and weights (VPPS: float atomics reorder its sums). */
  readonly tol: number;
}

const subjects: Subject[] = [
  {
    name: "eager",
    tol: 1e-5,
    make: (m) => {
      const e = new EagerEngine(m.params, { poolBytes: 256 * MiB });
      return { engine: e, ctx: e.ctx };
    },
  },
  {
    name: "autobatch",
    tol: 1e-5,
    make: (m) => {
      const e = new AutobatchGpuEngine(m.params, { poolBytes: 256 * MiB });
      return { engine: e, ctx: (e.device as unknown as { ctx: GpuContext }).ctx };
    },
  },
  {
    name: "vpps",
    tol: 1e-4,
    make: (m) => {
      const e = new VppsEngine(m.params, {
        cacheDir,
        poolBytes: 256 * MiB,
        name: "dp_engines",
        variants: { rowsPerWarp: 1, ctasPerSm: 1, transposed: false },
      });
      return { engine: e, ctx: e.vpps.ctx };
    },
  },
];

/** Trains `STEPS` batches (each batch `repeat` times in one graph); returns the losses and the final weights. */
function train(
  s: Subject,
  makeTrainerFor: () => Trainer,
  repeat: number,
  factor: number | undefined,
): { losses: number[]; weights: Float32Array[]; reducer: FakeReducer | undefined } {
  const model = makeModel();
  const { engine, ctx } = s.make(model);
  try {
    const reducer = factor === undefined ? undefined : new FakeReducer(ctx, factor);
    if (reducer) engine.setGradientReducer(reducer);
    const trainer = makeTrainerFor();
    const losses: number[] = [];
    for (let k = 0; k < STEPS; k++) {
      const batch: TreeNode[] = [];
      for (let r = 0; r < repeat; r++) batch.push(...trees.slice(BATCH * k, BATCH * (k + 1)));
      const cg = new ComputationGraph();
      const loss = model.buildBatchLoss(cg, batch, vocab);
      losses.push(engine.forwardScalar(loss));
      engine.backward(loss);
      engine.update(trainer);
    }
    engine.syncToHost();
    return { losses, weights: model.params.all.map((p) => Float32Array.from(p.value)), reducer };
  } finally {
    engine.dispose();
  }
}

function assertClose(
  what: string,
  want: readonly number[] | Float32Array,
  got: readonly number[] | Float32Array,
  tol: number,
) {
  assert.equal(got.length, want.length, `${what}: length`);
  let scale = 0;
  for (const x of want) scale = Math.max(scale, Math.abs(x));
  for (let k = 0; k < want.length; k++) {
    const d = Math.abs(want[k]! - got[k]!);
    if (!(d <= tol * Math.max(1, scale)))
      assert.fail(`${what}[${k}]: expected ${want[k]}, got ${got[k]} (tolerance ${tol})`);
  }
}

const trainers: [string, () => Trainer][] = [
  ["SGD, clipping", () => new SimpleSGDTrainer({ learningRate: 0.1, clipThreshold: 1 })],
  ["Adam, clipping", () => new AdamTrainer({ learningRate: 0.01, clipThreshold: 5 })],
];

describe("GPU engines under a GradientReducer (one GPU, fake reducers)", { skip }, () => {
  for (const s of subjects) {
    for (const [tname, mk] of trainers) {
      test(`${s.name}, ${tname}: an identity reducer of world size 1 trains as no reducer`, () => {
        const plain = train(s, mk, 1, undefined);
        const dp = train(s, mk, 1, 1);
        assertClose("losses", plain.losses, dp.losses, s.tol);
        for (const [i, w] of plain.weights.entries()) assertClose(`weights of #${i}`, w, dp.weights[i]!, 10 * s.tol);
        assert.equal(dp.reducer!.gathers, STEPS, "one exchange of touched rows per update");
        assert.ok(dp.reducer!.deviceCalls >= STEPS, "the gradients were summed");
      });

      test(`${s.name}, ${tname}: a doubling reducer trains as the batch twice without one`, () => {
        const twice = train(s, mk, 2, undefined);
        const doubled = train(s, mk, 1, 2);
        assertClose(
          "losses",
          twice.losses,
          doubled.losses.map((l) => 2 * l),
          s.tol,
        );
        for (const [i, w] of twice.weights.entries())
          assertClose(`weights of #${i}`, w, doubled.weights[i]!, 10 * s.tol);
      });
    }
  }

  test("eager: the gradients are one region, summed in buckets of DP_BUCKET_FLOATS", () => {
    const model = makeModel();
    const e = new EagerEngine(model.params, { poolBytes: 256 * MiB });
    try {
      const reducer = new FakeReducer(e.ctx, 1);
      e.setGradientReducer(reducer);
      const region = e.device.gradRegion;
      let floats = 0;
      for (const p of model.params.all) floats += p.value.length;
      assert.ok(region.floats >= floats, "the region holds every gradient");
      for (const p of model.params.all) {
        const off = e.device.gradOffset[p.index]!;
        assert.ok(off >= region.offset && off + p.value.length <= region.offset + region.floats);
      }
      const cg = new ComputationGraph();
      const loss = model.buildBatchLoss(cg, trees.slice(0, BATCH), vocab);
      e.forwardScalar(loss);
      e.backward(loss);
      e.update(new SimpleSGDTrainer({ learningRate: 0.1 }));
      e.syncToHost();
      assert.equal(reducer.deviceFloats, region.floats, "one sum over the whole region (world size 1: no norm)");
      assert.equal(reducer.deviceCalls, Math.ceil(region.floats / DP_BUCKET_FLOATS));
    } finally {
      e.dispose();
    }
  });
});
