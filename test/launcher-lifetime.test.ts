// The data-parallel launcher (`vpps train --gpus N`) bounds its ranks by the machine (cores on the CPU, devices on a
// GPU) and takes them down with it: a launcher killed by SIGKILL (which it cannot see) or SIGTERM leaves no rank
// training as an orphan, and the run directory's lock is released, so the next run starts. Real processes on the
// CPU; the signal and the moment it comes are generated.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { CliError } from "../src/cli/errors.js";
import { checkLaunch, releaseRankLock, runDirOf } from "../src/cli/parallel.js";
import { rankEnvFrom } from "../src/parallel/env.js";
import { RandomStream } from "../src/util/random.js";
import { cli, hasTrace, tempDir } from "./cli-harness.js";

const VPPS = join(import.meta.dirname, "..", "bin", "vpps.js");
const rng = new RandomStream(Number(process.env.VPPS_PROBE_SEED ?? 42));
const int = (n: number): number => Math.floor(rng.uniform() * n);

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return !readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.startsWith("Z");
  } catch {
    return false;
  }
};

function childrenOf(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

test("CPU ranks beyond the cores are refused in one line with the most that fit", async () => {
  const cores = availableParallelism();
  // generated counts above the cores, each with a batch that splits evenly
  for (let k = 0; k < 4; k++) {
    const n = cores + 1 + int(300);
    const r = await cli("train", "treelstm", "--engine", "cpu", "--gpus", String(n), "--batch", String(n * 2));
    assert.equal(r.code, 1, r.stderr);
    assert.ok(!hasTrace(r.stderr));
    assert.equal(
      r.stderr,
      `vpps: --gpus ${n} with the 'cpu' engine on the CPU starts ${n} processes, more than this machine's ${cores} ` +
        `CPU core(s); use --gpus ${cores} or less\n`,
    );
  }
  // the bound is the cores given: at or under it passes
  const c = 2 + int(30);
  assert.doesNotThrow(() => checkLaunch(c, c, "cpu", "auto", false, c));
  assert.throws(() => checkLaunch(c + 1, c + 1, "cpu", "auto", false, c), CliError);
});

test("the launcher's run directory and the lock of ended ranks", () => {
  assert.equal(runDirOf(["train", "x", "--out", "a", "--epochs", "2"]), "a");
  assert.equal(runDirOf(["train", "x", "--resume=b"]), "b");
  assert.equal(runDirOf(["train", "x"]), undefined);
  const dir = tempDir("lock");
  const lock = join(dir, "vpps.lock");
  writeFileSync(lock, "123456 host\n");
  releaseRankLock(dir, [999]);
  assert.ok(existsSync(lock), "another process's lock stays");
  releaseRankLock(dir, [999, 123456]);
  assert.ok(!existsSync(lock), "a rank's lock goes");
  assert.equal(rankEnvFrom({ WORLD_SIZE: "2", RANK: "1", VPPS_LAUNCHER_PID: "4242" })?.launcherPid, 4242);
  assert.equal(rankEnvFrom({ WORLD_SIZE: "2", RANK: "1" })?.launcherPid, undefined);
});

// the two launchers run side by side (most of their time is the ranks' start)
describe("a killed launcher", { concurrency: true }, () => {
  for (const signal of ["SIGKILL", "SIGTERM"] as const) {
    test(`a launcher killed by ${signal} takes its ranks down and releases the --out lock`, async () => {
      const out = join(tempDir("orphans"), "run");
      const launcher = spawn(
        process.execPath,
        [VPPS, "train", "treelstm", "--engine", "cpu", "--hidden", "8", "--embed", "8", "--epochs", "500"].concat([
          "--gpus",
          "2",
          "--out",
          out,
        ]),
        { stdio: ["ignore", "pipe", "pipe"] },
      );
      let stderr = "";
      let stdout = "";
      launcher.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
      launcher.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
      const closed = new Promise<void>((r) => launcher.on("close", () => r()));
      try {
        // wait until both ranks train (rank 0 has printed its data-parallel line and holds the lock)
        const t0 = Date.now();
        // (the progress bar says whose loss it shows: rank 0's share; the epoch line's is over all ranks)
        while (
          !(
            stdout.includes("data-parallel: 2 ranks") &&
            existsSync(join(out, "vpps.lock")) &&
            /loss \(rank 0\) \d/.test(stderr)
          )
        ) {
          assert.ok(Date.now() - t0 < 60_000, `the ranks never started: ${stderr}`);
          await sleep(100);
        }
        const ranks = childrenOf(launcher.pid!);
        assert.equal(ranks.length, 2, `ranks: ${ranks}`);
        await sleep(int(1500)); // a generated moment within training
        const killedAt = Date.now();
        process.kill(launcher.pid!, signal);
        while (ranks.some(alive)) {
          assert.ok(Date.now() - killedAt < 8000, `ranks still running 8 s after the launcher's ${signal}: ${stderr}`);
          await sleep(50);
        }
        // the lock goes with them (removed by rank 0's communication thread, or by the launcher after the ranks)
        while (existsSync(join(out, "vpps.lock"))) {
          assert.ok(Date.now() - killedAt < 10_000, `the lock stayed: ${readFileSync(join(out, "vpps.lock"), "utf8")}`);
          await sleep(50);
        }
        if (signal === "SIGKILL")
          assert.match(stderr, /vpps: rank [01]: the launcher \(vpps train --gpus 2, pid \d+\) is gone/);
        assert.ok(!hasTrace(stderr), stderr);
      } finally {
        if (launcher.exitCode === null && launcher.signalCode === null) launcher.kill("SIGKILL");
        for (const pid of childrenOf(launcher.pid!)) process.kill(pid, "SIGKILL");
        await closed;
      }
    });
  }
});
