/**
 * A schedule worker's thread (started by pool.ts, which documents the protocol). It rebuilds the model
 * layout and a VppsScheduler per plan variant from the plain data it was started with, then for each job rebuilds
 * the graph over its lent node arrays (shared memory, no copy), schedules it and sends back the detached schedule
 * (script and layout arrays transferred) with the input buffer (the batch's input values, for the main thread's
 * upload).
 * Scripts are written into buffers the main thread sends back once it has uploaded them (a few kept here), so that
 * a warm worker allocates no script memory.
 * After every message it bumps the shared counter and notifies, so that a main thread blocked in `Atomics.wait`
 * wakes up.
 */
import { receiveMessageOnPort, workerData } from "node:worker_threads";
import { ComputationGraph } from "../../../graph/graph.js";
import { createModelLayout } from "../plan/layout.js";
import { detachSchedule, scheduledBuffers } from "./batch.js";
import type { ScheduleJob, ScheduleReply, ScheduleWorkerData } from "./pool.js";
import { VppsScheduler } from "./scheduler.js";

const data = workerData as ScheduleWorkerData;
const port = data.port;
const counter = new Int32Array(data.counter);
const schedulers: (VppsScheduler | undefined)[] = data.plans.map(() => undefined);
/** Script buffers back from the main thread, for reuse. */
const spares: ArrayBuffer[] = [];
const SPARES = 3;

/** A script array of `words` words in a spare buffer large enough, else in a new one with room to grow. */
function scriptArray(words: number): Uint32Array {
  for (let k = spares.length - 1; k >= 0; k--) {
    if (spares[k]!.byteLength >= 4 * words) return new Uint32Array(spares.splice(k, 1)[0]!, 0, words);
  }
  spares.pop(); // too small for batches this large: let it go
  return new Uint32Array(new ArrayBuffer(4 * Math.ceil(words * 1.25)), 0, words);
}

function reply(message: ScheduleReply, transfer: ArrayBuffer[]): void {
  port.postMessage(message, transfer);
  Atomics.add(counter, 0, 1);
  Atomics.notify(counter, 0);
}

function schedulerOf(variant: number): VppsScheduler {
  const plan = data.plans[variant];
  if (plan === undefined) throw new Error(`no plan variant ${variant} (the worker has ${data.plans.length})`);
  let s = schedulers[variant];
  if (s === undefined) {
    s = new VppsScheduler(createModelLayout(data.params, plan), data.options);
    schedulers[variant] = s;
  }
  return s;
}

/**
 * After a job the worker polls for the next one for this long before it returns to the event loop (and sleeps).
 * A sleeping thread wakes up later, often on another core with cold caches: a worker that slept between batches
 * scheduled several times slower per node than the same code on a busy main thread (docs/journal/). During training
 * batches come every fraction of a millisecond, so a polling worker never sleeps; an idle one stops after this.
 */
const POLL_MS = 2;

port.on("message", (first: ScheduleJob) => {
  run(first);
  let until = performance.now() + POLL_MS;
  for (;;) {
    const m = receiveMessageOnPort(port);
    if (m !== undefined) {
      run(m.message as ScheduleJob);
      until = performance.now() + POLL_MS;
    } else if (performance.now() > until) return;
  }
});

function run(job: ScheduleJob): void {
  const t0 = performance.now();
  if (job.spare !== undefined && spares.length < SPARES) spares.push(job.spare);
  try {
    const inputs = new Float32Array(job.inputs, 0, job.graph.inputSize);
    const g = ComputationGraph.fromLent(job.graph, inputs, data.params);
    const s = schedulerOf(job.variant).schedule(g, g.expression(job.loss), scriptArray);
    const batch = detachSchedule(s);
    const ms = performance.now() - t0;
    reply({ kind: "done", id: job.id, batch, ms, inputs: job.inputs }, [...scheduledBuffers(batch), job.inputs]);
  } catch (e) {
    const err = e instanceof Error ? e : new Error(String(e));
    reply(
      {
        kind: "failed",
        id: job.id,
        name: err.name,
        message: err.message,
        stack: err.stack ?? "",
        inputs: job.inputs,
      },
      [job.inputs],
    );
  }
}
reply({ kind: "ready" }, []);
