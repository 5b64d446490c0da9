// GLP4NN's stream pool (src/cuda/runtime/stream-pool.ts) on a fake backend that logs what it is asked: streams and
// handles created once, round-robin lanes, extra lanes, event sets, the events of fork and join, growth, and disposal.
// The order these events impose on a convolution's work is checked in test/eager-conv.test.ts; test/gpu/streams.test.ts
// runs the pool on a GPU.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { type PoolBackend, StreamPool } from "../src/glp4nn/index.js";

function logging() {
  const log: string[] = [];
  let streams = 0;
  let events = 0;
  const backend: PoolBackend<string, string, string> = {
    stream: () => `s${streams++}`,
    event: () => `e${events++}`,
    blas: (s) => `blas(${s})`,
    record: (e, s) => log.push(`record ${e} on ${s}`),
    wait: (s, e) => log.push(`${s} waits ${e}`),
    destroyEvent: (e) => log.push(`destroy ${e}`),
    destroyLane: (s, b) => log.push(`destroy ${s} and ${b}`),
  };
  return { log, backend };
}

describe("the stream pool", () => {
  test("lanes round-robin, each stream with its own cuBLAS handle; extra lanes, event sets, fork and join", () => {
    const { log, backend } = logging();
    const pool = new StreamPool(backend, 3);
    assert.deepEqual(
      pool.lanes.map((l) => [l.index, l.stream, l.blas]),
      [
        [0, "s0", "blas(s0)"],
        [1, "s1", "blas(s1)"],
        [2, "s2", "blas(s2)"],
      ],
    );
    assert.deepEqual(
      [0, 1, 2, 3, 4, 7].map((k) => pool.lane(k).index),
      [0, 1, 2, 0, 1, 1],
    );
    assert.deepEqual(
      [0, 1, 2, 3].map((k) => pool.lane(k, 2).index),
      [0, 1, 0, 1],
      "the first 2 lanes",
    );
    // e0 is the fork's event, e1 … e3 the lanes' done events
    const side = pool.extraLane("side");
    assert.equal(pool.extraLane("side"), side, "an extra lane is made once");
    assert.deepEqual([side.index, side.stream, side.blas], [-1, "s3", "blas(s3)"]);
    assert.equal(pool.size, 3, "extra lanes are not round-robin lanes");
    const set = pool.eventSet("columns"); // e5 … e7, after the side lane's done event e4
    assert.equal(pool.eventSet("columns"), set);
    assert.equal(set.length, 3);
    pool.fork("origin", 2, [side]);
    pool.recordOn(set[0]!, pool.lane(0));
    pool.waitOn(side, set[0]!);
    pool.join("origin", 2, [side]);
    assert.deepEqual(log, [
      "record e0 on origin",
      "s0 waits e0",
      "s1 waits e0",
      "s3 waits e0",
      "record e5 on s0",
      "s3 waits e5",
      "record e1 on s0",
      "origin waits e1",
      "record e2 on s1",
      "origin waits e2",
      "record e4 on s3",
      "origin waits e4",
    ]);
    assert.throws(() => pool.join("origin", 2, [new StreamPool(backend, 1).extraLane("x")]), /another pool/);
  });

  test("grows, never shrinks; disposes every stream, handle and event once", () => {
    const { log, backend } = logging();
    const pool = new StreamPool(backend, 2);
    pool.grow(1);
    assert.equal(pool.size, 2);
    pool.grow(4);
    assert.equal(pool.size, 4);
    assert.throws(() => pool.grow(0), /StreamPool: size must be an integer ≥ 1; got 0/);
    log.length = 0;
    pool.dispose();
    pool.dispose();
    assert.equal(log.filter((l) => l.startsWith("destroy s")).length, 4);
    assert.equal(log.filter((l) => l.startsWith("destroy e")).length, 1 + 4);
  });
});
