// Starting a worker thread on a module of this package, from a source checkout (TypeScript run by tsx) or a built
// package (JavaScript). On Node 20 tsx's `--import` hook is registered in the main thread only, so a worker cannot
// import a .ts file by itself: a small CommonJS bootstrap (eval'd) imports the module and, when that fails for want
// of a TypeScript loader, registers tsx's ESM loader in the worker and imports it again. A failure to start is
// reported through `workerData.fatal` (a port and, optionally, a shared counter to bump), so that a main thread
// blocked in Atomics.wait wakes instead of hanging.

import type { MessagePort } from "node:worker_threads";

/** Where a worker reports a failure outside its own error handling. */
export interface WorkerFatal {
  readonly port: MessagePort;
  /** An Int32Array's buffer and the index to add 1 to (and notify) after posting. */
  readonly counter?: SharedArrayBuffer;
  readonly index?: number;
}

/** The module `name` (without extension) beside `from` (an import.meta.url): .ts when `from` is, else .js. */
export function siblingModule(from: string, name: string): { entry: string; tsx: string | undefined } {
  const here = new URL(from);
  const ts = here.pathname.endsWith(".ts");
  const entry = new URL(`./${name}.${ts ? "ts" : "js"}`, here).href;
  let tsx: string | undefined;
  if (ts) {
    try {
      tsx = import.meta.resolve("tsx/esm/api");
    } catch {
      tsx = undefined; // the worker then fails to load the .ts entry and reports why
    }
  }
  return { entry, tsx };
}

/**
 * A bootstrap to pass as `new Worker(code, { eval: true, workerData })`, where workerData has `entry` and `tsx`
 * (siblingModule): it imports the module, through tsx's loader where the worker has none. `onFatal` is the source of
 * a JavaScript function `(e) => …` run when the import fails and, with `uncaught`, on any later uncaught exception.
 */
export function moduleBootstrap(onFatal: string, opts: { uncaught: boolean }): string {
  return `
const { workerData } = require("node:worker_threads");
const fatal = ${onFatal.trim()};
${opts.uncaught ? 'process.on("uncaughtException", fatal);' : ""}
(async () => {
  try {
    await import(workerData.entry);
  } catch (e) {
    if (workerData.tsx === undefined || !e || e.code !== "ERR_UNKNOWN_FILE_EXTENSION") throw e;
    (await import(workerData.tsx)).register();
    await import(workerData.entry + "?tsx");
  }
})().catch(fatal);
`;
}

/**
 * The bootstrap of workers that report to their parent: workerData also has `fatal` (WorkerFatal), and a failure to
 * start or an uncaught exception posts `{ kind: "fatal", message, stack }` on its port and bumps its counter.
 */
export const MODULE_BOOTSTRAP = moduleBootstrap(
  `(e) => {
  try {
    const m = e instanceof Error ? e.message : String(e);
    workerData.fatal.port.postMessage({ kind: "fatal", message: m, stack: (e && e.stack) || "" });
  } finally {
    if (workerData.fatal.counter !== undefined) {
      const c = new Int32Array(workerData.fatal.counter);
      Atomics.add(c, workerData.fatal.index || 0, 1);
      Atomics.notify(c, workerData.fatal.index || 0);
    }
  }
}`,
  { uncaught: true },
);
