// VPPS's launcher in data-parallel mode without a GPU (runtime/launcher.ts): a scheduled batch's exchange
// of touched rows is started when it is taken from the schedule workers, and the batch is held, in order, until the
// exchange is in, so that the host never waits for the other ranks while it has graphs to build; more held batches
// than pipeline slots, or a flush, wait. One process: the runtime and the pool are fakes that record what happens.
// Also the host timeline's report (instrument/host-trace.ts).

import assert from "node:assert/strict";
import { test } from "node:test";
import type { GradientReducer } from "../src/engines/data-parallel.js";
import { HostTrace, hostTraceFromEnv } from "../src/engines/vpps/instrument/host-trace.js";
import type { ModelLayout } from "../src/engines/vpps/plan/layout.js";
import {
  type DpExchange,
  KeptUnions,
  keptExchange,
  keptUnionsBytes,
  startRowsExchange,
} from "../src/engines/vpps/runtime/dp-exchange.js";
import { BatchLauncher, type BatchTag, type LaunchVariant } from "../src/engines/vpps/runtime/launcher.js";
import { ScriptCache } from "../src/engines/vpps/runtime/script-cache.js";
import type { VppsRuntime } from "../src/engines/vpps/runtime/submit.js";
import type { PooledBatch, SchedulePool } from "../src/engines/vpps/schedule/pool.js";
import type { ComputationGraph, Expression } from "../src/graph/graph.js";

interface FakeExchange extends DpExchange {
  done: boolean;
  waited: boolean;
}

/** What the fakes saw, in order. */
interface Log {
  events: string[];
  exchanges: Map<number, FakeExchange>;
  /** Batches whose exchange another rank did not flag to keep (so no rank keeps its union). */
  unflagged: Set<number>;
  /** Per launch: the batch and the union it launched with (its exchange's batch id, as the fake unions are). */
  unions: [number, number][];
}

function fakeRuntime(log: Log, dataParallel: boolean, slots: number) {
  const pipeline = { batches: 0, slots };
  const exchange = (id: number, keep = false): FakeExchange => {
    log.events.push(`start ${id}`);
    if (keep) log.events.push(`flag ${id}`);
    const x: FakeExchange = {
      done: false,
      waited: false,
      ready: () => x.done,
      union: () => {
        if (!x.done) {
          x.waited = true;
          log.events.push(`wait ${id}`);
          x.done = true;
        }
        return Int32Array.of(id);
      },
      keptByAll: () => {
        x.union();
        return keep && !log.unflagged.has(id);
      },
    };
    log.exchanges.set(id, x);
    return x;
  };
  const idOf = (s: unknown) => (s as { id: number }).id;
  return {
    pipeline,
    dataParallel,
    startExchange: (s: unknown, lr: number, keep = false) =>
      dataParallel && lr > 0 ? exchange(idOf(s), keep) : undefined,
    submit(
      _v: unknown,
      s: unknown,
      _inputs: Float32Array,
      lr: number,
      _clip: number,
      _timed: boolean,
      _adam: unknown,
      x?: DpExchange,
    ): number {
      // as the real one: a batch that needs an exchange and comes without one starts it and waits
      if (dataParallel && lr > 0) log.unions.push([idOf(s), (x ?? exchange(idOf(s))).union()[0]!]);
      log.events.push(`launch ${idOf(s)}`);
      pipeline.batches++;
      return Number.NaN;
    },
  };
}

/**
 * Batches become ready when `ready` says so; `take(true)` makes the head ready (a worker finishing); a batch in
 * `failing` throws when taken, as a scheduling error does (the pool drops it).
 */
function fakePool(log: Log) {
  const queue: { id: number; tag: BatchTag }[] = [];
  const ready = new Set<number>();
  const failing = new Set<number>();
  let next = 0;
  const stats = { snapshotMs: 0, waitMs: 0, scheduleMs: 0 };
  return {
    size: 1,
    stats,
    ready,
    failing,
    get pending() {
      return queue.length;
    },
    post(_g: unknown, _l: unknown, _v: number, tag: BatchTag) {
      log.events.push(`post ${next}`);
      queue.push({ id: next++, tag });
    },
    postBuilt(_r: unknown, _v: number, tag: BatchTag) {
      log.events.push(`post ${next}`);
      queue.push({ id: next++, tag });
    },
    take(block: boolean): PooledBatch<BatchTag> | undefined {
      const head = queue[0];
      if (head === undefined) return undefined;
      if (!ready.has(head.id) && !block) return undefined;
      queue.shift();
      if (failing.has(head.id)) throw new Error(`batch ${head.id} failed (in schedule worker)`);
      return {
        id: head.id,
        variant: 0,
        tag: head.tag,
        batch: { id: head.id, script: Uint32Array.of(head.id, 7), liveNodes: 1 },
        inputs: Float32Array.of(head.id),
        scheduleMs: 1,
        dropout: false,
      } as unknown as PooledBatch<BatchTag>;
    },
    release(b: PooledBatch<BatchTag>) {
      log.events.push(`release ${b.id}`);
    },
  };
}

function setup(dataParallel: boolean, slots = 3, trace?: HostTrace) {
  const log: Log = { events: [], exchanges: new Map(), unflagged: new Set(), unions: [] };
  const runtime = fakeRuntime(log, dataParallel, slots);
  const pool = fakePool(log);
  const variant = { index: 0, plan: { ctas: 1 } } as unknown as LaunchVariant;
  const launcher = new BatchLauncher(
    runtime as unknown as VppsRuntime,
    pool as unknown as SchedulePool<BatchTag>,
    () => variant,
    { scheduleAhead: 100, timing: false, profiling: () => false },
    {},
  );
  launcher.trace = trace;
  const tag: BatchTag = { lr: 0.1, clip: 5, adam: undefined, quiet: false };
  const fb = () => launcher.run(variant, {} as ComputationGraph, {} as Expression, tag);
  /** A training step the workers build, its batch named by `examples`; `recurring`: fixed batches. */
  const built = (examples: number[], recurring = true) =>
    launcher.runBuilt(variant, { examples: Int32Array.from(examples), training: true, dropoutKey: 1, recurring }, tag);
  const launched = () => log.events.filter((e) => e.startsWith("launch")).map((e) => Number(e.split(" ")[1]));
  return { log, pool, launcher, fb, built, launched };
}

test("VPPS data-parallel: batches wait for their exchange without blocking the host, and launch in order", () => {
  const { log, pool, launcher, fb, launched } = setup(true);
  fb();
  fb();
  fb();
  assert.deepEqual(launched(), [], "nothing is scheduled yet");
  for (const id of [0, 1, 2]) pool.ready.add(id);
  fb(); // batch 3 posted; 0, 1, 2 taken: their exchanges start, none is in
  assert.deepEqual(
    log.events.filter((e) => e.startsWith("start")),
    ["start 0", "start 1", "start 2"],
  );
  assert.deepEqual(launched(), [], "held, not waited for");
  log.exchanges.get(0)!.done = true;
  log.exchanges.get(2)!.done = true;
  fb(); // 0 is in and launches; 2 is in but waits behind 1
  assert.deepEqual(launched(), [0]);
  log.exchanges.get(1)!.done = true;
  fb();
  assert.deepEqual(launched(), [0, 1, 2]);
  assert.ok(![0, 1, 2].some((id) => log.exchanges.get(id)!.waited), "no launch waited for another rank");
  // a flush waits for every posted batch, in order: the workers', then the exchanges
  launcher.flush();
  assert.deepEqual(launched(), [0, 1, 2, 3, 4, 5]);
  assert.equal(log.events.filter((e) => e.startsWith("release")).length, 6, "every batch's buffers go back");
});

test("VPPS data-parallel: more held batches than pipeline slots wait for the oldest exchange", () => {
  const { log, pool, fb, launched } = setup(true, 2);
  for (let id = 0; id < 6; id++) pool.ready.add(id);
  fb(); // 0 held
  fb(); // 1 held
  assert.deepEqual(launched(), []);
  fb(); // 2 held: three batches, two slots: 0 is waited for
  assert.deepEqual(launched(), [0]);
  assert.ok(log.exchanges.get(0)!.waited);
  assert.ok(!log.exchanges.get(1)!.waited);
});

test("VPPS on one process: a scheduled batch launches as soon as it is taken, with no exchange", () => {
  const { log, pool, fb, launched } = setup(false);
  pool.ready.add(0);
  fb();
  assert.deepEqual(launched(), [0]);
  fb();
  assert.deepEqual(launched(), [0]);
  pool.ready.add(1);
  fb();
  assert.deepEqual(launched(), [0, 1]);
  assert.equal(log.exchanges.size, 0);
});

test("VPPS host trace: medians per step and per batch, in one line; off unless VPPS_DP_TRACE is set", () => {
  assert.equal(hostTraceFromEnv({}), false);
  assert.equal(hostTraceFromEnv({ VPPS_DP_TRACE: "0" }), false);
  assert.equal(hostTraceFromEnv({ VPPS_DP_TRACE: "1" }), true);
  const trace = new HostTrace();
  assert.equal(trace.report("rank 0/2"), undefined, "nothing recorded: no line");
  const { pool, fb } = setup(true, 8, trace);
  let now = 0;
  for (let step = 0; step < 5; step++) {
    pool.ready.add(step);
    // the caller's graph takes 3 ms, fb 1 ms, of which 0.25 ms is an exchange wait
    now += 3;
    trace.enterStep(now);
    fb();
    trace.add("exchange", 0.25);
    now += 1;
    trace.exitStep(now);
  }
  trace.sample("gpuBusy", 2);
  trace.sample("gpuIdle", 0.5);
  trace.sample("gpuBusy", 3);
  trace.sample("gpuIdle", 0.25);
  trace.sample("gpuBusy", 2);
  trace.sample("gpuIdle", 1.5);
  const line = trace.report("rank 1/2")!;
  assert.match(line, /^vpps host trace rank 1\/2: 4 steps; median ms per step: step 4\.00 = build 3\.00 \+ fb 1\.00 /);
  assert.match(line, /exchange 0\.25/);
  assert.match(line, /schedule 1\.00 on a worker/);
  assert.match(line, /GPU busy 2\.00, idle 0\.50 before the batch \(3 timed\)/);
  // the sums: every batch's busy time; the idle time after the first batch, its longest gap, and the first's wait
  assert.match(line, /summed: busy 7\.00, idle 1\.75 after the first batch \(longest 1\.50; before the first 0\.50\)/);
  assert.equal(trace.report("rank 1/2"), undefined, "a report forgets what it reported");
});

test("kept scripts: a recurring batch is kept when taken, then launched from the copy, in order, never released", () => {
  for (const dataParallel of [false, true]) {
    const { log, pool, launcher, built, launched } = setup(dataParallel);
    launcher.scripts = new ScriptCache(1 << 20);
    const posts = () => log.events.filter((e) => e.startsWith("post")).length;
    const releases = () => log.events.filter((e) => e.startsWith("release")).length;
    built([1, 2]); // batch 0
    built([3, 4]); // batch 1
    built([5, 6], false); // batch 2: not recurring, never kept
    for (const id of [0, 1, 2]) pool.ready.add(id);
    launcher.flush();
    assert.deepEqual(launched(), [0, 1, 2]);
    assert.equal(launcher.scripts.size, 2, "the two recurring batches are kept");
    assert.equal(releases(), 3, "the pool's buffers go back: the cache holds copies");
    // the next epoch: batch [3, 4] recurs behind a new, unscheduled batch, and must wait for it
    built([7, 8]); // batch 3, posted
    built([3, 4]); // kept: no post
    built([1, 2]); // kept: no post
    assert.equal(posts(), 4, "a kept batch is not posted");
    assert.deepEqual(launched(), [0, 1, 2], "the kept batches wait behind the posted one");
    pool.ready.add(3);
    built([9, 9], false); // batch 4, posted: its turn after the kept ones
    // (data-parallel: held until their exchanges are in, which the flush below waits for)
    if (!dataParallel) {
      assert.deepEqual(launched(), [0, 1, 2, 3, 1, 0], "in order: batch 3, then the kept copies of 1 and 0");
    }
    launcher.flush();
    assert.deepEqual(launched(), [0, 1, 2, 3, 1, 0, 4]);
    assert.equal(releases(), 5, "kept batches are never handed back to the pool");
    assert.equal(launcher.stats.keptBatches, 2);
    assert.equal(launcher.scripts.hits, 2);
  }
});

test("kept scripts: a batch whose scheduling failed is dropped from the order, the next one launches", () => {
  const { pool, launcher, built, launched } = setup(false);
  launcher.scripts = new ScriptCache(1 << 20);
  built([1]); // batch 0 fails
  built([2]); // batch 1
  pool.failing.add(0);
  pool.ready.add(0);
  pool.ready.add(1);
  assert.throws(() => launcher.flush(), /batch 0 failed/);
  launcher.flush();
  assert.deepEqual(launched(), [1]);
  built([2]); // kept
  launcher.flush();
  assert.deepEqual(launched(), [1, 1]);
  assert.equal(launcher.scripts.size, 1, "the failed batch is not kept");
});

test("kept unions (data-parallel): a recurring batch every rank flagged launches again with no exchange", () => {
  const { log, pool, launcher, built, launched } = setup(true);
  launcher.scripts = new ScriptCache(1 << 20);
  launcher.unions = new KeptUnions(1 << 20);
  built([1, 2]); // batch 0
  built([3, 4]); // batch 1
  built([5, 6], false); // batch 2: not recurring, not flagged
  for (const id of [0, 1, 2]) pool.ready.add(id);
  launcher.flush();
  const starts = () => log.events.filter((e) => e.startsWith("start") || e.startsWith("flag"));
  assert.deepEqual(starts(), ["start 0", "flag 0", "start 1", "flag 1", "start 2"]);
  assert.equal(launcher.unions.size, 2);
  // the next epoch, in another order: the kept scripts launch with the kept unions, no rank's host waited for
  built([3, 4]);
  built([1, 2]);
  launcher.flush();
  assert.deepEqual(launched(), [0, 1, 2, 1, 0]);
  assert.equal(starts().length, 5, "no exchange started for the kept batches");
  assert.deepEqual(log.unions.slice(3), [
    [1, 1],
    [0, 0],
  ]);
  assert.equal(launcher.unions.hits, 2);
});

test("kept unions (data-parallel): not kept where another rank did not flag it; an earlier run decides first", () => {
  const { log, pool, launcher, built, launched } = setup(true);
  launcher.scripts = new ScriptCache(1 << 20);
  launcher.unions = new KeptUnions(1 << 20);
  log.unflagged.add(0); // another rank did not flag batch 0 (its room was full)
  built([1, 2]);
  pool.ready.add(0);
  launcher.flush();
  assert.equal(launcher.unions.size, 0);
  built([1, 2]); // the script is kept, the union is not: it is exchanged again (and flagged again)
  launcher.flush();
  assert.deepEqual(
    log.events.filter((e) => e.startsWith("start") || e.startsWith("flag")),
    ["start 0", "flag 0", "start 0", "flag 0"],
  );
  assert.deepEqual(launched(), [0, 0]);

  // the same recurring batch twice before the first has launched: the second waits for the first's gather, which
  // every rank flagged, and launches with its union
  const b = setup(true);
  b.launcher.scripts = new ScriptCache(1 << 20);
  b.launcher.unions = new KeptUnions(1 << 20);
  b.built([7, 8]); // batch 0, not ready yet
  b.pool.ready.add(0);
  b.pool.ready.add(1);
  b.built([7, 8]); // batch 1 (its script not kept yet: posted)
  assert.deepEqual(b.log.events, [
    "post 0",
    "post 1",
    "start 0",
    "flag 0",
    "wait 0",
    "launch 0",
    "release 0",
    "launch 1",
    "release 1",
  ]);
  assert.deepEqual(b.log.unions, [
    [0, 0],
    [1, 0],
  ]);
});

test("kept unions: the flag word travels with the rows; kept only where every rank flagged; VPPS_KEPT_UNIONS_MB", () => {
  const model = { params: [{ kind: "lookup", rows: 10 }, { kind: "matrix" }, { kind: "lookup", rows: 4 }] };
  /** Two ranks: this one sends `mine`, the other `other` (its flag word first). */
  const reducer = (other: Int32Array, sent: Int32Array[]) =>
    ({
      rank: 0,
      worldSize: 2,
      allGatherHost: (data: Int32Array) => {
        sent.push(data.slice());
        return [data.slice(), other];
      },
    }) as unknown as GradientReducer;
  const sent: Int32Array[] = [];
  const both = startRowsExchange(
    reducer(Int32Array.of(1, 2, 3, 0, 9), sent),
    model as unknown as ModelLayout,
    Int32Array.of(0, 9, 0, 1),
    true,
  );
  assert.deepEqual(Array.from(sent[0]!), [1, 0, 9, 0, 1], "the flag word, then this rank's pairs");
  assert.equal(both.ready(), true);
  assert.deepEqual(Array.from(both.union()), [0, 1, 0, 9, 2, 3], "the union, sorted, without the flag words");
  assert.equal(both.keptByAll(), true);
  const mineOnly = startRowsExchange(
    reducer(Int32Array.of(0, 2, 1), []),
    model as unknown as ModelLayout,
    Int32Array.of(0, 5),
    true,
  );
  assert.equal(mineOnly.keptByAll(), false, "the other rank did not flag it");
  const otherOnly = startRowsExchange(
    reducer(Int32Array.of(1), []),
    model as unknown as ModelLayout,
    Int32Array.of(0, 5),
    false,
  );
  assert.equal(otherOnly.keptByAll(), false);
  assert.deepEqual(Array.from(otherOnly.union()), [0, 5]);
  const bare = startRowsExchange(
    reducer(new Int32Array(0), []),
    model as unknown as ModelLayout,
    Int32Array.of(0, 5),
    true,
  );
  assert.throws(() => bare.union(), /rank 1 sent no flag word/);
  const kept = keptExchange(Int32Array.of(2, 3));
  assert.equal(kept.ready() && kept.keptByAll(), true);
  // room: only what this rank flags; a put always keeps
  const u = new KeptUnions(8);
  assert.equal(u.hasRoom(), true);
  u.put("a", Int32Array.of(1, 2, 3));
  assert.equal(u.hasRoom(), false);
  u.put("b", Int32Array.of(4));
  assert.equal(u.size, 2);
  u.clear();
  assert.equal(u.size + u.bytes, 0);
  assert.equal(keptUnionsBytes({}), 256 * 2 ** 20);
  assert.equal(keptUnionsBytes({ VPPS_KEPT_UNIONS_MB: "0" }), 0);
  assert.throws(
    () => keptUnionsBytes({ VPPS_KEPT_UNIONS_MB: "-1" }),
    /VPPS_KEPT_UNIONS_MB is '-1'; expected a whole number/,
  );
});
