// Ctrl-C and SIGTERM while the command waits on work off the main thread (VPPS's JIT runs NVRTC on libuv's worker
// threads, src/cli/stop-signals.ts): a real process whose threadpool is busy in native code (pbkdf2 of many
// iterations, as a compile of many seconds keeps NVRTC busy) ends within 2 s of the signal, by that signal, after
// exactly one line naming it — not after the threads' work, as a normal exit (which joins them) would.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { describe, test } from "node:test";

const stopSignals = join(import.meta.dirname, "..", "src", "cli", "stop-signals.ts");

/** A child that keeps every libuv thread busy for minutes inside `stoppable`, and says "busy" once it is. */
const CHILD = `
import { pbkdf2 } from "node:crypto";
import { stoppable } from ${JSON.stringify(stopSignals)};
const spin = () => new Promise((resolve, reject) =>
  pbkdf2("secret", "salt", 200_000_000, 64, "sha512", (e, key) => (e ? reject(e) : resolve(key))));
await stoppable("compiling the test's kernels", async () => {
  const work = Promise.all([spin(), spin(), spin(), spin()]);
  setTimeout(() => process.stdout.write("busy\\n"), 300);
  await work;
});
process.stdout.write("finished\\n");
`;

async function stopWhileBusy(signal: NodeJS.Signals) {
  const child = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", CHILD], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stderr.on("data", (d) => {
    stderr += String(d);
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>((resolve) =>
    child.on("exit", (code, sig) => resolve({ code, signal: sig, at: performance.now() })),
  );
  await new Promise<void>((resolve) =>
    child.stdout.on("data", (d) => {
      stdout += String(d);
      if (stdout.includes("busy")) resolve();
    }),
  );
  const sent = performance.now();
  child.kill(signal);
  const end = await Promise.race([exited, new Promise<undefined>((r) => setTimeout(() => r(undefined), 15_000))]);
  if (end === undefined) child.kill("SIGKILL");
  assert.ok(end, `still running 15 s after ${signal}`);
  return { ms: end.at - sent, code: end.code, signal: end.signal, stdout, stderr };
}

describe("stopping the command while worker threads are busy", () => {
  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    test(`${signal}: the process ends within 2 s, by ${signal}, after one line`, async () => {
      const r = await stopWhileBusy(signal);
      assert.ok(r.ms <= 2000, `ended ${r.ms.toFixed(0)} ms after ${signal}`);
      assert.equal(r.signal, signal, `exit code ${r.code}; stderr: ${r.stderr}`);
      assert.equal(r.stderr, `vpps: stopped by ${signal} while compiling the test's kernels\n`);
      assert.ok(!r.stdout.includes("finished"), r.stdout);
    });
  }
});
