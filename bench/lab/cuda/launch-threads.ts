/**
 * Does issuing CUDA calls from several host threads raise the calls per second? (GLP4NN: with direct launches a
 * Caffe-style convolution is bound by one host thread issuing ~9 µs cuBLAS calls; bench/lab/cuda/launch-cost.ts.)
 * P worker threads (P in THREADS, default "1,2,4,8"), each with its own stream and cuBLAS handle on the process's
 * primary context, start together and issue CALLS calls each (a spin kernel keeps each stream busy so that no call
 * waits for the GPU); the rate is P·CALLS over the slowest thread's time, median of ROUNDS rounds.
 * bench/lab/cuda/launch-threads.cu does the same from C (std::thread).
 *
 *   node --import tsx bench/lab/cuda/launch-threads.ts [--json FILE]
 */
import { writeFileSync } from "node:fs";
import { isMainThread, parentPort, Worker, workerData } from "node:worker_threads";
import { moduleBootstrap } from "../../../src/util/worker-module.js";
import { median, openCalls } from "./calls.js";

const CALLS = Number(process.env["CALLS"] ?? 300);
const ROUNDS = Number(process.env["ROUNDS"] ?? 9);

interface Job {
  /** [0]: round started (generation), [1]: threads done. */
  sync: SharedArrayBuffer;
  kind: "sgemm" | "launch";
}

/** A thread's side: its stream, handle and buffers; per round: spin, wait for the start, issue, report its µs. */
function workerMain(job: Job): void {
  const { calls, busy, synchronize } = openCalls();
  const call = job.kind === "sgemm" ? calls.sgemm : calls["launch.raw"];
  const sync = new Int32Array(job.sync);
  parentPort!.on("message", (generation: number) => {
    busy();
    call(); // warm
    Atomics.add(sync, 1, 1);
    Atomics.notify(sync, 1);
    Atomics.wait(sync, 0, generation - 1); // the start
    const t0 = performance.now();
    for (let i = 0; i < CALLS; i++) call();
    const us = (performance.now() - t0) * 1000;
    synchronize();
    parentPort!.postMessage(us);
  });
  parentPort!.postMessage("ready");
}

const BOOT = moduleBootstrap("(e) => { console.error(e); process.exit(1); }", { uncaught: false });

async function main(): Promise<void> {
  const threads = (process.env["THREADS"] ?? "1,2,4,8").split(",").map(Number);
  const results: Record<string, Record<string, { callsPerMs: number; usPerCallPerThread: number }>> = {};
  for (const kind of ["sgemm", "launch"] as const) {
    results[kind] = {};
    for (const P of threads) {
      const sync = new SharedArrayBuffer(8);
      const s = new Int32Array(sync);
      const workers = Array.from(
        { length: P },
        () =>
          new Worker(BOOT, {
            eval: true,
            workerData: { entry: import.meta.url, tsx: import.meta.resolve("tsx/esm/api"), job: { sync, kind } },
          }),
      );
      const next = (w: Worker) =>
        new Promise<unknown>((resolve, reject) => {
          const fail = (e: Error) => reject(e);
          w.once("error", fail);
          w.once("message", (m) => {
            w.off("error", fail);
            resolve(m);
          });
        });
      await Promise.all(workers.map(next));
      const rates: number[] = [];
      const perThread: number[] = [];
      for (let r = 0; r <= ROUNDS; r++) {
        Atomics.store(s, 1, 0);
        const done = workers.map(next);
        for (const w of workers) w.postMessage(r + 1);
        while (Atomics.load(s, 1) < P) Atomics.wait(s, 1, Atomics.load(s, 1), 50);
        Atomics.store(s, 0, r + 1);
        Atomics.notify(s, 0);
        const us = (await Promise.all(done)) as number[];
        if (r === 0) continue;
        const slowest = Math.max(...us);
        rates.push((P * CALLS) / (slowest / 1000));
        perThread.push(median(us) / CALLS);
      }
      await Promise.all(workers.map((w) => w.terminate()));
      results[kind][String(P)] = { callsPerMs: median(rates), usPerCallPerThread: median(perThread) };
      console.log(
        `node ${kind} threads ${P}: ${median(rates).toFixed(1)} calls/ms in all, ` +
          `${median(perThread).toFixed(2)} µs per call per thread`,
      );
    }
  }
  const out = process.argv.indexOf("--json");
  if (out > 0) writeFileSync(process.argv[out + 1]!, `${JSON.stringify({ calls: CALLS, rounds: ROUNDS, results })}\n`);
}

if (isMainThread) await main();
else workerMain((workerData as { job: Job }).job);
