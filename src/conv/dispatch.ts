// The dispatch threads' protocol (threads.ts), apart from CUDA: the control words in shared memory, a thread's
// loop (wait for a job, issue its share in the order the events need, report), and the main thread's post and wait.
// thread-worker.ts runs the loop with ConvRunner's parts; test/conv-dispatch.test.ts runs it in worker threads
// with an issuer that records the order of the calls, which is how the protocol is tested without a GPU.

/** Control words (Int32Array over a SharedArrayBuffer of `controlBytes(maxLanes)`). */
export const CTRL = {
  /** Job generation, bumped by the main thread per job; −1 stops the threads. */
  GEN: 0,
  /** Threads done with the current job (and, before the first, threads started). */
  DONE: 1,
  /** Threads that failed. */
  ERROR: 2,
  /** Chain parts issued in the current job. */
  CHAIN: 3,
  /** Threads that have stopped (their cuBLAS handles destroyed) after GEN became −1. */
  STOPPED: 4,
  /** Ring of D·L slots (D the job's depth): slot n mod D·L holds n + 1 once sample n's lane part has been issued. */
  RING: 5,
} as const;

/** Bytes of the control words for jobs of up to `maxLanes` lanes and a depth of up to `maxDepth`. */
export function controlBytes(maxLanes: number, maxDepth = 1): number {
  return 4 * (CTRL.RING + maxDepth * maxLanes);
}

/** What a thread issues: its sample lanes (t of P), the chain lane or the side lane. */
export type ConvThreadRole =
  | { readonly kind: "samples"; readonly t: number; readonly P: number }
  | { readonly kind: "chain" }
  | { readonly kind: "side" };

/** A job as a thread sees it. */
export interface DispatchJob {
  readonly forward: boolean;
  /** Samples N and sample lanes L (sample n on lane n mod L). */
  readonly samples: number;
  readonly lanes: number;
  /** Whether the lanes and the chain share buffers (column buffers or product slots; false for a 1×1 layer summed by
   * a chain of GEMMs, which reads its input directly): then the chain waits for each sample's lane part and a lane
   * for the chain's part D·L samples before. */
  readonly ordered: boolean;
  /** D: samples a lane may be ahead of the chain (its product slots; 1 for a column buffer the chain reads). */
  readonly depth: number;
}

/** What a thread does with a job: its parts, issued in the order runDispatchThread decides. */
export interface DispatchIssuer {
  /** Reads the job in shared memory (called once per job, before any part). */
  begin(): DispatchJob;
  forwardSample(n: number): void;
  backwardLanePart(n: number): void;
  backwardChainPart(n: number): void;
  backwardBias(): void;
}

/**
 * How long a thread spins on a control word before it sleeps (ms). The counters it waits on and the next job (a
 * layer's backward follows its forward, the next layer's forward follows within the same step) usually change within
 * this; a sleeping thread's wake-up costs tens of µs and varies by more, which showed as 10–40% between iterations.
 */
export const THREAD_SPIN_MS = 1;
/** How long the main thread spins for the threads' issue of a job before it sleeps between checks (ms). */
export const MAIN_SPIN_MS = 50;

/** Spins until ctrl[i] satisfies `ok`, another thread failed, or `ms` have passed (the clock read every 256 polls). */
function spin(ctrl: Int32Array, i: number, ok: (v: number) => boolean, ms: number): boolean {
  const t0 = performance.now();
  for (let n = 1; ; n++) {
    if (ok(Atomics.load(ctrl, i))) return true;
    if ((n & 255) === 0 && (Atomics.load(ctrl, CTRL.ERROR) > 0 || performance.now() - t0 > ms)) return false;
  }
}

/** Waits until ctrl[i] satisfies `ok`, spinning first; throws when another thread failed or after `timeoutMs`. */
function waitFor(ctrl: Int32Array, i: number, ok: (v: number) => boolean, timeoutMs: number, what: () => string): void {
  if (spin(ctrl, i, ok, THREAD_SPIN_MS)) return;
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const v = Atomics.load(ctrl, i);
    if (ok(v)) return;
    if (Atomics.load(ctrl, CTRL.ERROR) > 0) throw new Error("another dispatch thread failed");
    if (performance.now() > deadline) throw new Error(`waited ${timeoutMs / 1000} s for ${what()}`);
    Atomics.wait(ctrl, i, v, 2);
  }
}

/**
 * One job's share of a thread: sample thread t issues the samples of the lanes k ≡ t mod P in sample order; the chain
 * thread the weight gradient's parts in sample order; the side thread the bias gradient. Every wait is issued after
 * the record it waits for: the chain issues sample n's part once n's lane part has been issued (ring slot n mod D·L
 * holds n + 1), and a lane issues sample n's part once the chain has issued sample n − D·L's (CHAIN > n − D·L), the
 * last to use the same buffer.
 */
function runJob(ctrl: Int32Array, role: ConvThreadRole, issuer: DispatchIssuer, timeoutMs: number): void {
  const job = issuer.begin();
  const L = job.lanes;
  const ahead = job.depth * L;
  if (role.kind === "samples") {
    for (let n = 0; n < job.samples; n++) {
      if ((n % L) % role.P !== role.t) continue;
      if (job.forward) {
        issuer.forwardSample(n);
        continue;
      }
      // the lane's buffer is free once the chain has issued sample n − D·L's part (the wait it records for)
      if (job.ordered && n >= ahead) {
        waitFor(
          ctrl,
          CTRL.CHAIN,
          (v) => v > n - ahead,
          timeoutMs,
          () => `the chain to reach sample ${n - ahead}`,
        );
      }
      issuer.backwardLanePart(n);
      Atomics.store(ctrl, CTRL.RING + (n % ahead), n + 1);
      Atomics.notify(ctrl, CTRL.RING + (n % ahead));
    }
  } else if (!job.forward && role.kind === "chain") {
    for (let n = 0; n < job.samples; n++) {
      if (job.ordered) {
        waitFor(
          ctrl,
          CTRL.RING + (n % ahead),
          (v) => v === n + 1,
          timeoutMs,
          () => `sample ${n}'s columns`,
        );
      }
      issuer.backwardChainPart(n);
      Atomics.store(ctrl, CTRL.CHAIN, n + 1);
      Atomics.notify(ctrl, CTRL.CHAIN);
    }
  } else if (!job.forward) {
    issuer.backwardBias();
  }
}

/**
 * A dispatch thread's life after its setup: reports itself started, then runs each job the main thread posts (see
 * runJob) until the generation becomes −1. A job that throws is reported through `report` and counted in ERROR (the
 * main thread then throws the first message); the thread goes on to the next job. Returns when stopped; the caller
 * releases what it holds and then calls `stopped`.
 */
export function runDispatchThread(o: {
  readonly ctrl: Int32Array;
  readonly role: ConvThreadRole;
  readonly issuer: DispatchIssuer;
  readonly timeoutMs: number;
  readonly report: (message: string) => void;
}): void {
  const { ctrl } = o;
  Atomics.add(ctrl, CTRL.DONE, 1);
  Atomics.notify(ctrl, CTRL.DONE);
  let generation = 0;
  for (;;) {
    // the next job usually comes within THREAD_SPIN_MS; else sleep until the main thread posts one
    if (!spin(ctrl, CTRL.GEN, (v) => v !== generation, THREAD_SPIN_MS)) Atomics.wait(ctrl, CTRL.GEN, generation);
    const g = Atomics.load(ctrl, CTRL.GEN);
    if (g < 0) break;
    if (g === generation) continue;
    generation = g;
    try {
      runJob(ctrl, o.role, o.issuer, o.timeoutMs);
    } catch (e) {
      o.report(e instanceof Error ? e.message : String(e));
      Atomics.add(ctrl, CTRL.ERROR, 1);
    }
    Atomics.add(ctrl, CTRL.DONE, 1);
    Atomics.notify(ctrl, CTRL.DONE);
  }
}

/** Called by a thread once it has released what it held after runDispatchThread returned. */
export function reportStopped(ctrl: Int32Array): void {
  Atomics.add(ctrl, CTRL.STOPPED, 1);
  Atomics.notify(ctrl, CTRL.STOPPED);
}

/**
 * The main thread's post of a job of `lanes` lanes and depth `depth` (its words already written): counters reset,
 * generation bumped.
 */
export function postJob(ctrl: Int32Array, lanes: number, depth = 1): void {
  Atomics.store(ctrl, CTRL.DONE, 0);
  Atomics.store(ctrl, CTRL.CHAIN, 0);
  for (let k = 0; k < depth * lanes; k++) Atomics.store(ctrl, CTRL.RING + k, 0);
  Atomics.add(ctrl, CTRL.GEN, 1);
  Atomics.notify(ctrl, CTRL.GEN);
}

/**
 * The main thread's wait until `threads` threads are done with the job (or started): spins (it has nothing else to
 * do, and a futex wake-up costs tens of µs) for up to MAIN_SPIN_MS, then sleeps in 1 ms slices. Calls `failed` (which
 * throws) as soon as a thread has failed; throws after `timeoutMs`.
 */
export function awaitThreads(
  ctrl: Int32Array,
  threads: number,
  what: string,
  timeoutMs: number,
  failed: () => never,
): void {
  const t0 = performance.now();
  const deadline = t0 + timeoutMs;
  for (let spins = 1; ; spins++) {
    const done = Atomics.load(ctrl, CTRL.DONE);
    if (Atomics.load(ctrl, CTRL.ERROR) > 0) failed();
    if (done >= threads) return;
    if ((spins & 255) !== 0 || performance.now() - t0 < MAIN_SPIN_MS) continue;
    if (performance.now() > deadline) {
      throw new Error(
        `convolution dispatch threads: ${threads - done} of ${threads} did not finish the ${what} in ${timeoutMs / 1000} s`,
      );
    }
    Atomics.wait(ctrl, CTRL.DONE, done, 1);
  }
}

/** The main thread's stop: generation −1, then waits (at most `ms`) until `threads` threads report stopped. */
export function stopThreads(ctrl: Int32Array, threads: number, ms: number): void {
  Atomics.store(ctrl, CTRL.GEN, -1);
  Atomics.notify(ctrl, CTRL.GEN);
  const deadline = performance.now() + ms;
  for (let stopped = Atomics.load(ctrl, CTRL.STOPPED); stopped < threads; ) {
    if (performance.now() > deadline) break; // a thread that died never reports: its handles went with it
    Atomics.wait(ctrl, CTRL.STOPPED, stopped, 50);
    stopped = Atomics.load(ctrl, CTRL.STOPPED);
  }
}
