// GLP4NN's resource tracker (src/glp4nn/tracker.ts) on a fake device: streams with a timeline, events that read it,
// kernels with fixed attributes and durations, and a host clock that advances by a fixed launch cost. Checks what is
// recorded per kernel and shape, that only the first launches are timed, the durations and launch cost, the profiles
// handed to the analyser, and the events' reuse. test/gpu/streams.test.ts runs it on a GPU.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { H100_SXM } from "../src/cuda/hw/device-model.js";
import {
  analyseConcurrency,
  loadSolver,
  median,
  ResourceTracker,
  type TimingEvent,
  type TrackedKernel,
} from "../src/glp4nn/index.js";

/** A stream is a timeline: work queued on it starts when the previous work ends. */
class FakeStream {
  busyUntilUs = 0;
}

/** An event completes when its stream reaches it: after the work queued before it, and not before it was recorded. */
class FakeEvent implements TimingEvent<FakeStream> {
  at = Number.NaN;
  constructor(private readonly device: FakeDevice) {}
  record(stream?: FakeStream): void {
    this.at = Math.max(stream!.busyUntilUs, this.device.hostUs);
  }
  synchronize(): void {}
  elapsedMsSince(start: TimingEvent<FakeStream>): number {
    return (this.at - (start as FakeEvent).at) / 1000;
  }
  destroy(): void {
    this.device.destroyed++;
  }
}

/** The fake device: a host clock (µs) that each launch call advances, and events that read stream timelines. */
class FakeDevice {
  hostUs = 0;
  created = 0;
  destroyed = 0;
  readonly launchCostUs = 4;

  event(): TimingEvent<FakeStream> {
    this.created++;
    return new FakeEvent(this);
  }

  /** A kernel of `durationUs` queued on `stream`: the call costs the host launchCostUs. */
  launch(stream: FakeStream, durationUs: number): void {
    this.hostUs += this.launchCostUs;
    stream.busyUntilUs = Math.max(stream.busyUntilUs, this.hostUs) + durationUs;
  }
}

function fakeKernel(name: string, numRegs: number, sharedBytes: number, calls: { attributes: number }): TrackedKernel {
  return {
    name,
    attributes() {
      calls.attributes++;
      return { numRegs, sharedBytes, maxThreadsPerBlock: 1024, localBytes: 0 };
    },
    maxActiveBlocksPerSm: (blockSize: number) => Math.floor(2048 / blockSize),
  };
}

describe("the resource tracker on a fake device", () => {
  test("records attributes, shape and occupancy per kernel and shape; times the first launches only", () => {
    const dev = new FakeDevice();
    const stream = new FakeStream();
    const tracker = new ResourceTracker<FakeStream>({
      event: () => dev.event(),
      samples: 3,
      warmup: 0,
      clockUs: () => dev.hostUs,
    });
    const calls = { attributes: 0 };
    const im2col = fakeKernel("im2col", 33, 0, calls);
    const gemm = fakeKernel("gemm", 96, 8192, calls);
    // the stream starts busy (a long kernel queued first), so events time the kernels and not the launch gaps
    stream.busyUntilUs = 1000;
    for (let n = 0; n < 5; n++) {
      tracker.launch(im2col, { grid: 18, block: 512 }, stream, () => dev.launch(stream, 20 + n));
      tracker.launch(gemm, { grid: [4, 3], block: [16, 16], sharedBytes: 1024 }, stream, () => dev.launch(stream, 100));
    }
    tracker.launch(im2col, { grid: 36, block: 512 }, stream, () => dev.launch(stream, 40));
    tracker.timeCall("cublasSgemm", stream, () => dev.launch(stream, 70));
    assert.equal(tracker.complete(), false, "the wider im2col has 1 of 3 samples");
    tracker.collect();

    const [a, g, wide, blas] = tracker.records();
    assert.equal(calls.attributes, 2, "attributes read once per kernel");
    assert.deepEqual(a!.shape, {
      blocks: 18,
      threadsPerBlock: 512,
      grid: [18, 1, 1],
      block: [512, 1, 1],
      dynamicSharedBytes: 0,
      registersPerThread: 33,
      staticSharedBytes: 0,
      maxThreadsPerBlock: 1024,
      localBytes: 0,
      blocksPerSm: 4,
    });
    assert.deepEqual([g!.shape!.blocks, g!.shape!.threadsPerBlock, g!.shape!.blocksPerSm], [12, 256, 8]);
    assert.equal(a!.launches, 5);
    assert.deepEqual(a!.durationsUs, [20, 21, 22], "the first three launches, each its own duration");
    assert.deepEqual(g!.durationsUs, [100, 100, 100]);
    assert.deepEqual(wide!.durationsUs, [40]);
    assert.equal(blas!.shape, undefined, "an opaque call has no footprint");
    assert.deepEqual(tracker.opaque(), [{ name: "cublasSgemm", durationUs: 70 }]);
    assert.equal(tracker.launchUs(), 4);

    const profiles = tracker.profiles(64);
    assert.deepEqual(
      profiles.map((p) => [
        p.name,
        p.blocks,
        p.threadsPerBlock,
        p.registersPerThread,
        p.sharedBytesPerBlock,
        p.durationUs,
      ]),
      [
        ["im2col", 18, 512, 33, 0, 21],
        ["gemm", 12, 256, 96, 9216, 100],
        ["im2col", 36, 512, 33, 0, 40],
      ],
    );
    assert.ok(profiles.every((p) => p.instances === 64));

    // 8 timed launches, 16 events, reused after collect: a new timed launch creates none
    assert.equal(dev.created, 16);
    tracker.launch(im2col, { grid: 36, block: 512 }, stream, () => dev.launch(stream, 40));
    assert.equal(dev.created, 16);
    tracker.dispose();
    assert.equal(dev.destroyed, 16);
  });

  test("without a busy stream, events count the launch gap: the reason to profile with the stream ahead", () => {
    const dev = new FakeDevice();
    const stream = new FakeStream();
    const tracker = new ResourceTracker<FakeStream>({ event: () => dev.event(), clockUs: () => dev.hostUs, warmup: 0 });
    const k = fakeKernel("tiny", 16, 0, { attributes: 0 });
    tracker.launch(k, { grid: 1, block: 32 }, stream, () => dev.launch(stream, 2));
    tracker.collect();
    assert.deepEqual(tracker.records()[0]!.durationsUs, [2 + dev.launchCostUs]);
    tracker.dispose();
  });

  test("the first launch of each kernel and of each opaque call runs untimed (lazy loading, cuBLAS's first call)", () => {
    const dev = new FakeDevice();
    const stream = new FakeStream();
    stream.busyUntilUs = 1_000_000;
    const tracker = new ResourceTracker<FakeStream>({
      event: () => dev.event(),
      samples: 2,
      clockUs: () => dev.hostUs,
    });
    const k = fakeKernel("im2col", 16, 0, { attributes: 0 });
    // the H100's first cuBLAS GEMM: 111,708 µs, then 82 and 83 µs
    const gemm = [111_708, 82, 83];
    const im2col = [5_000, 20, 21];
    for (let n = 0; n < 3; n++) {
      tracker.timeCall("cublasSgemm", stream, () => dev.launch(stream, gemm[n]!));
      tracker.launch(k, { grid: 8, block: 256 }, stream, () => dev.launch(stream, im2col[n]!));
      assert.equal(tracker.complete(), n === 2, `complete after warm-up + 2 samples only (launch ${n + 1})`);
    }
    tracker.collect();
    const [blas, a] = tracker.records();
    assert.deepEqual(blas!.durationsUs, [82, 83], "the first GEMM is not timed");
    assert.deepEqual(a!.durationsUs, [20, 21], "nor the first im2col");
    assert.equal(a!.launches, 3);
    assert.equal(a!.launchHostUs.length, 2);
    assert.throws(
      () => new ResourceTracker({ event: () => dev.event(), warmup: -1 }),
      /warmup must be an integer ≥ 0; got -1/,
    );
    tracker.dispose();
  });

  test("the profiles feed the analyser", async () => {
    const dev = new FakeDevice();
    const stream = new FakeStream();
    stream.busyUntilUs = 10_000;
    const tracker = new ResourceTracker<FakeStream>({ event: () => dev.event(), clockUs: () => dev.hostUs });
    const k = fakeKernel("sample", 32, 0, { attributes: 0 });
    for (let n = 0; n < 5; n++) tracker.launch(k, { grid: 66, block: 256 }, stream, () => dev.launch(stream, 60));
    tracker.collect();
    const choice = analyseConcurrency(
      {
        label: "a fake layer",
        kernels: tracker.profiles(4),
        device: H100_SXM,
        launchUs: tracker.launchUs(),
        connections: 8,
      },
      await loadSolver(),
    );
    // 66 blocks of 256 threads are small; ⌈60/4⌉ = 15 and 8 queues do not bind before the 4 samples
    assert.equal(choice.poolSize, 4);
    tracker.dispose();
  });

  test("refuses a block larger than the kernel allows, and a sample count below 1", () => {
    const dev = new FakeDevice();
    assert.throws(
      () => new ResourceTracker({ event: () => dev.event(), samples: 0 }),
      /samples must be an integer ≥ 1; got 0/,
    );
    const tracker = new ResourceTracker<FakeStream>({ event: () => dev.event() });
    const k = fakeKernel("k", 16, 0, { attributes: 0 });
    assert.throws(
      () => tracker.launch(k, { grid: 1, block: 2048 }, new FakeStream(), () => {}),
      /kernel 'k' launched with 2048 threads per block; it allows at most 1024/,
    );
    assert.equal(median([3, 1, 2]), 2);
    assert.equal(median([4, 1, 2, 3]), 2.5);
  });
});
