// Data-parallel training on two GPUs through NCCL: the process group's device all-reduce, then
// `vpps train --gpus 2` against `--gpus 1` at the same global batch over 10 steps — losses within 1e-5 relative on
// eager and autobatch, 1e-4 on VPPS (its float atomics reorder sums). Real processes (bin/vpps.js). Skipped, with
// the reason printed, with fewer than two GPUs or without NCCL.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { describe, test } from "node:test";
import { getNccl } from "../../src/cuda/ffi/nccl.js";
import { cudaAvailable, getDriver } from "../../src/cuda/index.js";

function why(): string | false {
  const available = cudaAvailable();
  if (!available.ok) return `no usable CUDA GPU: ${available.reason.split("\n")[0]}`;
  const count = getDriver().deviceCount();
  if (count < 2) return `data-parallel tests need 2 GPUs; this machine has ${count}`;
  try {
    getNccl();
  } catch (e) {
    return e instanceof Error ? e.message : String(e);
  }
  return false;
}
const skip = why();
if (skip) console.log(`skipping data-parallel GPU tests: ${skip}`);

const ROOT = join(import.meta.dirname, "..", "..");
const VPPS = join(ROOT, "bin", "vpps.js");

function run(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, args, { cwd: ROOT, env: { ...process.env, ...env } });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => {
      stdout += d;
    });
    child.stderr.on("data", (d) => {
      stderr += d;
    });
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

describe("data-parallel on 2 GPUs", { skip }, () => {
  test("NCCL sums float32 device arrays of two ranks exactly (two buckets, timed with events)", async () => {
    const env = (rank: number) => ({
      RANK: String(rank),
      WORLD_SIZE: "2",
      LOCAL_RANK: String(rank),
      MASTER_ADDR: "127.0.0.1",
      MASTER_PORT: String(29400 + (process.pid % 100)),
    });
    const script = join(ROOT, "test", "parallel-rank.ts");
    const runs = await Promise.all([0, 1].map((r) => run(["--import", "tsx", script, "device"], env(r))));
    for (const r of runs) {
      assert.equal(r.code, 0, r.stderr);
      const o = JSON.parse(r.stdout) as { wrong: number; ms: number };
      assert.equal(o.wrong, 0);
      assert.ok(o.ms > 0, `all-reduce time ${o.ms} ms`);
    }
  });

  // 8 trees, global batch 4: 2 steps per epoch, 5 epochs = 10 steps
  const SMALL = ["--hidden", "32", "--embed", "32", "--epochs", "5", "--batch", "4", "--max-sentences", "8", "--json"];
  for (const [engine, rel] of [
    ["eager", 1e-5],
    ["autobatch", 1e-5],
    ["vpps", 1e-4],
  ] as const) {
    test(`--gpus 2 --engine ${engine}: 10 steps' losses equal --gpus 1 within ${rel} relative`, async () => {
      const one = await run([VPPS, "train", "treelstm", ...SMALL, "--engine", engine, "--gpus", "1"]);
      const two = await run([VPPS, "train", "treelstm", ...SMALL, "--engine", engine, "--gpus", "2"]);
      assert.equal(one.code, 0, one.stderr);
      assert.equal(two.code, 0, two.stderr);
      const a = JSON.parse(one.stdout) as { epochs: { trainLoss: number }[] };
      const b = JSON.parse(two.stdout) as { epochs: { trainLoss: number }[] };
      assert.equal(b.epochs.length, 5);
      a.epochs.forEach((e, i) => {
        const x = e.trainLoss;
        const y = b.epochs[i]!.trainLoss;
        assert.ok(Math.abs(x - y) <= rel * Math.abs(x), `epoch ${i + 1}: 1 GPU ${x}, 2 GPUs ${y}`);
      });
    });
  }

  // the persistent RNN layers (the BiLSTM tagger's `--rnn persistent`: one rnn node per batch, its weight gradients
  // summed like every other parameter's)
  for (const engine of ["eager", "autobatch"]) {
    test(`bilstm --rnn persistent --gpus 2 --engine ${engine}: losses equal --gpus 1 within 1e-5 relative`, async () => {
      const args = [VPPS, "train", "bilstm", "--rnn", "persistent", "--engine", engine, "--hidden", "32", "--embed"];
      const all = [...args, "32", "--max-sentences", "32", "--batch", "8", "--epochs", "3", "--json"];
      const one = await run([...all, "--gpus", "1"]);
      const two = await run([...all, "--gpus", "2"]);
      assert.equal(one.code, 0, one.stderr);
      assert.equal(two.code, 0, two.stderr);
      const a = (JSON.parse(one.stdout) as { epochs: { trainLoss: number }[] }).epochs.map((e) => e.trainLoss);
      const b = (JSON.parse(two.stdout) as { epochs: { trainLoss: number }[] }).epochs.map((e) => e.trainLoss);
      assert.equal(b.length, 3);
      for (const [i, x] of a.entries()) {
        assert.ok(Math.abs(x - b[i]!) <= 1e-5 * Math.abs(x), `epoch ${i + 1}: ${x} vs ${b[i]}`);
      }
    });
  }

  test("VPPS_DP_TRACE=1: each rank of a 2-GPU VPPS run writes its host timeline every epoch; losses unchanged", async () => {
    const plain = await run([VPPS, "train", "treelstm", ...SMALL, "--engine", "vpps", "--gpus", "2"]);
    const traced = await run([VPPS, "train", "treelstm", ...SMALL, "--engine", "vpps", "--gpus", "2"], {
      VPPS_DP_TRACE: "1",
    });
    assert.equal(plain.code, 0, plain.stderr);
    assert.equal(traced.code, 0, traced.stderr);
    assert.doesNotMatch(plain.stderr, /vpps host trace/);
    for (const r of [0, 1]) {
      const lines = traced.stderr.split("\n").filter((l) => l.startsWith(`vpps host trace rank ${r}/2: `));
      // 2 steps per epoch: the first epoch's first step has no step time, so every epoch reports (its last step's)
      assert.ok(lines.length >= 4, `rank ${r}: ${lines.length} trace lines in\n${traced.stderr}`);
      assert.match(lines[0]!, /exchange \d+\.\d+, slot .*GPU busy \d+\.\d+/);
    }
    const a = JSON.parse(plain.stdout) as { epochs: { trainLoss: number }[] };
    const b = JSON.parse(traced.stdout) as { epochs: { trainLoss: number }[] };
    a.epochs.forEach((e, i) => {
      const x = e.trainLoss;
      const y = b.epochs[i]!.trainLoss;
      assert.ok(Math.abs(x - y) <= 1e-4 * Math.abs(x), `epoch ${i + 1}: untraced ${x}, traced ${y}`);
    });
  });

  test("--shuffle batches on VPPS: kept scripts and kept unions (no exchange) train as 1 GPU does", async () => {
    const args = [VPPS, "train", "treelstm", ...SMALL, "--engine", "vpps", "--shuffle", "batches"];
    const one = await run([...args, "--gpus", "1"]);
    const two = await run([...args, "--gpus", "2"], { VPPS_DP_TRACE: "1" });
    const exchanged = await run([...args, "--gpus", "2"], { VPPS_KEPT_UNIONS_MB: "0" });
    for (const r of [one, two, exchanged]) assert.equal(r.code, 0, r.stderr);
    for (const r of [0, 1]) {
      const last = two.stderr
        .split("\n")
        .filter((l) => l.startsWith(`vpps host trace rank ${r}/2: `))
        .at(-1);
      // 2 batches per rank: from the second epoch on, both launch from kept scripts with kept unions
      assert.match(last ?? "", /kept unions 2 \(([3-9]|\d\d+) launched without an exchange\)/, two.stderr);
    }
    const losses = (r: { stdout: string }) =>
      (JSON.parse(r.stdout) as { epochs: { trainLoss: number }[] }).epochs.map((e) => e.trainLoss);
    const [a, b, c] = [losses(one), losses(two), losses(exchanged)];
    assert.equal(b.length, 5);
    a.forEach((x, i) => {
      assert.ok(Math.abs(x - b[i]!) <= 1e-4 * Math.abs(x), `epoch ${i + 1}: 1 GPU ${x}, 2 GPUs ${b[i]}`);
      // (float atomics reorder VPPS's sums from run to run: not bitwise)
      assert.ok(
        Math.abs(c[i]! - b[i]!) <= 1e-4 * Math.abs(x),
        `epoch ${i + 1}: kept unions ${b[i]}, exchanged ${c[i]}`,
      );
    });
  });

  test("killing one rank of a 2-GPU run ends the job within seconds with one line naming it", async () => {
    const t0 = Date.now();
    const child = spawn(
      process.execPath,
      [VPPS, "train", "treelstm", "--engine", "eager", "--gpus", "2", "--epochs", "100", "--hidden", "64"],
      { cwd: ROOT },
    );
    let stderr = "";
    child.stderr.on("data", (d) => {
      stderr += d;
    });
    const code = await new Promise<number | null>((resolve) => {
      // after start-up, rank 1 is the launcher's second child: find it by its environment
      const timer = setTimeout(async () => {
        const { readFileSync } = await import("node:fs");
        const kids = readFileSync(`/proc/${child.pid}/task/${child.pid}/children`, "utf8").trim().split(/\s+/);
        for (const pid of kids) {
          if (readFileSync(`/proc/${pid}/environ`, "utf8").split("\0").includes("RANK=1")) {
            process.kill(Number(pid), "SIGKILL");
          }
        }
      }, 20_000);
      child.on("close", (c) => {
        clearTimeout(timer);
        resolve(c);
      });
    });
    assert.equal(code, 137, stderr);
    assert.match(stderr, /vpps: rank 1 of 2 was killed by SIGKILL/);
    assert.ok(Date.now() - t0 < 30_000, `took ${Date.now() - t0} ms`);
  });
});
