/**
 * A schedule worker's thread (started by pool.ts, which documents the protocol). It rebuilds the model
 * layout and a VppsScheduler per plan variant from the plain data it was started with, then for each job rebuilds
 * the graph over its lent node arrays (shared memory, no copy), schedules it and sends back the detached schedule
 * (script and layout arrays transferred) with the input buffer (the batch's input values, for the main thread's
 * upload). With a graph builder (`SchedulePool.setGraphBuilder`: a model's module, imported here) a job may instead
 * name a batch (`build`): the worker builds its graph itself, schedules it, and sends back its input values.
 * Scripts are written into buffers the main thread sends back once it has uploaded them (a few kept here), so that
 * a warm worker allocates no script memory.
 * After every message it bumps the shared counter and notifies, so that a main thread blocked in `Atomics.wait`
 * wakes up.
 */
import { receiveMessageOnPort, workerData } from "node:worker_threads";
import type { BuildBatch, GraphBuilderModule, GraphBuilderSpec } from "../../../graph/builder.js";
import { ComputationGraph } from "../../../graph/graph.js";
import { Op } from "../../../graph/opcodes.js";
import { firstNonFinite } from "../../../model/safetensors.js";
import { isUserError } from "../../../util/errors.js";
import { createModelLayout } from "../plan/layout.js";
import { detachSchedule, scheduledBuffers } from "./batch.js";
import type { BuilderMessage, ScheduleJob, ScheduleReply, ScheduleWorkerData } from "./pool.js";
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

/** The graph builder (setGraphBuilder), and the graph it builds into (renewed per batch). */
let builder: { build: BuildBatch; graph: ComputationGraph; module: string } | undefined;

/**
 * Imports the builder's module and makes the builder; answers "builder-ready" or "builder-failed". The main thread
 * waits for every worker's answer before it posts a batch to build, so no job arrives while the import is pending.
 */
async function setBuilder(spec: GraphBuilderSpec): Promise<void> {
  try {
    const mod = (await import(spec.module)) as Partial<GraphBuilderModule>;
    if (typeof mod.createGraphBuilder !== "function") {
      throw new Error(`graph builder ${spec.module} does not export createGraphBuilder`);
    }
    builder = {
      build: mod.createGraphBuilder(spec.data, data.params),
      graph: new ComputationGraph(),
      module: spec.module,
    };
    reply({ kind: "builder-ready" }, []);
  } catch (e) {
    const err = e instanceof Error ? e : new Error(String(e));
    reply({ kind: "builder-failed", message: err.message, stack: err.stack ?? "" }, []);
  }
}

type Message = ScheduleJob | BuilderMessage;

port.on("message", (first: Message) => {
  if ("kind" in first) {
    void setBuilder(first.spec);
    return;
  }
  run(first);
  let until = performance.now() + POLL_MS;
  for (;;) {
    const m = receiveMessageOnPort(port);
    if (m !== undefined) {
      const message = m.message as Message;
      if ("kind" in message) {
        void setBuilder(message.spec); // back to the event loop, where the import completes
        return;
      }
      run(message);
      until = performance.now() + POLL_MS;
    } else if (performance.now() > until) return;
  }
});

/**
 * The job's graph and loss node, and the buffer and count of its input values: rebuilt over the lent arrays, or built
 * by the builder (its input values copied into the job's buffer, or a larger one).
 */
function graphOf(job: ScheduleJob): { g: ComputationGraph; loss: number; inputs: ArrayBuffer; inputSize: number } {
  if (job.build === undefined) {
    const lent = job.graph!;
    const g = ComputationGraph.fromLent(lent, new Float32Array(job.inputs, 0, lent.inputSize), data.params);
    return { g, loss: job.loss, inputs: job.inputs, inputSize: lent.inputSize };
  }
  if (builder === undefined) throw new Error("no graph builder was set (SchedulePool.setGraphBuilder)");
  const g = builder.graph;
  g.renew();
  g.training = job.build.training;
  g.dropoutKey = job.build.dropoutKey;
  const loss = builder.build(g, job.build);
  const bad = firstNonFinite(g.inputData.subarray(0, g.inputSize));
  if (bad !== null) {
    throw new Error(
      `graph builder ${builder.module}: input value ${bad.index} of the batch is ${bad.value}; check the data`,
    );
  }
  // the main thread reads only the input values of a built batch
  const n = g.inputSize;
  const inputs = job.inputs.byteLength >= 4 * n ? job.inputs : new ArrayBuffer(Math.max(4 * n, 1024));
  new Float32Array(inputs, 0, n).set(g.inputData.subarray(0, n));
  return { g, loss, inputs, inputSize: n };
}

function run(job: ScheduleJob): void {
  const t0 = performance.now();
  if (job.spare !== undefined && spares.length < SPARES) spares.push(job.spare);
  let inputs = job.inputs;
  try {
    const built = graphOf(job);
    inputs = built.inputs;
    const s = schedulerOf(job.variant).schedule(built.g, built.g.expression(built.loss), scriptArray);
    const batch = detachSchedule(s);
    const ms = performance.now() - t0;
    // whether the script depends on the graph's dropout key (a batch whose script is kept must match it)
    const dropout = built.g.op.subarray(0, built.g.size).includes(Op.Dropout);
    reply({ kind: "done", id: job.id, batch, ms, inputs, inputSize: built.inputSize, dropout }, [
      ...scheduledBuffers(batch),
      inputs,
    ]);
  } catch (e) {
    const err = e instanceof Error ? e : new Error(String(e));
    // a refusal of the user's graph (an op VPPS cannot run, a bad shape) stays a one-line user error on the main thread
    const user = isUserError(err);
    reply({ kind: "failed", id: job.id, name: err.name, message: err.message, stack: err.stack ?? "", user, inputs }, [
      inputs,
    ]);
  }
}
reply({ kind: "ready" }, []);
