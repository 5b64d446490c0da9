// Data-parallel training without a GPU: the torchrun environment, the batch split, the NCCL bindings'
// table and missing-library line, the TCP process group (bit-identical sums, rendezvous timeout, a dying peer), the
// launcher, and `vpps train --gpus 2 --engine cpu` against the one-process run of the same global batch.

import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import koffi from "koffi";
import { runsOnGpu, withoutDevice } from "../src/cli/parallel.js";
import { CudaLibraryNotFoundError } from "../src/cuda/ffi/find.js";
import { NCCL_PROTOTYPES, Nccl, NcclUnavailableError, ncclTypes } from "../src/cuda/ffi/nccl.js";
import { readSafetensors } from "../src/model/safetensors.js";
import { checkBatchSplit, RankEnvError, rankEnvFrom, rankShare, rankSplitFromEnv } from "../src/parallel/env.js";
import { launchRanks, RankFailedError } from "../src/parallel/launcher.js";
import { decodeGathered, encodeGathered, FrameReader, frame } from "../src/parallel/wire.js";
import { tempDir } from "./cli-harness.js";

const ROOT = join(import.meta.dirname, "..");
const VPPS = join(ROOT, "bin", "vpps.js");
const RANK_SCRIPT = join(ROOT, "test", "parallel-rank.ts");

interface Ran {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  ms: number;
}

function run(args: string[], env: Record<string, string> = {}, onStart?: (c: ChildProcess) => void): Promise<Ran> {
  const t0 = Date.now();
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
    child.on("close", (code, signal) => resolve({ code, signal, stdout, stderr, ms: Date.now() - t0 }));
    onStart?.(child);
  });
}

let nextPort = 29700 + (process.pid % 200) * 10;
const rankEnv = (rank: number, worldSize: number, port: number, timeoutS = 20) => ({
  RANK: String(rank),
  WORLD_SIZE: String(worldSize),
  LOCAL_RANK: String(rank),
  MASTER_ADDR: "127.0.0.1",
  MASTER_PORT: String(port),
  VPPS_RENDEZVOUS_TIMEOUT: String(timeoutS),
});

test("torchrun's environment: parsed, defaulted, and refused in one line when malformed", () => {
  assert.equal(rankEnvFrom({}), null);
  assert.deepEqual(rankEnvFrom({ WORLD_SIZE: "4", RANK: "2" }), {
    rank: 2,
    worldSize: 4,
    localRank: 2,
    masterAddr: "127.0.0.1",
    masterPort: 29500,
  });
  assert.deepEqual(
    rankEnvFrom({ WORLD_SIZE: "8", RANK: "5", LOCAL_RANK: "1", MASTER_ADDR: "node0", MASTER_PORT: "1234" }),
    { rank: 5, worldSize: 8, localRank: 1, masterAddr: "node0", masterPort: 1234 },
  );
  assert.throws(() => rankEnvFrom({ WORLD_SIZE: "2" }), /RANK is not set/);
  assert.throws(() => rankEnvFrom({ WORLD_SIZE: "2", RANK: "2" }), /RANK 2 is not below WORLD_SIZE 2/);
  assert.throws(() => rankEnvFrom({ WORLD_SIZE: "two", RANK: "0" }), RankEnvError);
  assert.throws(() => rankEnvFrom({ WORLD_SIZE: "2", RANK: "0", MASTER_PORT: "70000" }), /MASTER_PORT must be/);
});

test("rankShare: a global batch dealt by work in snake order, as many examples per rank, in the batch's order", () => {
  const batch = [10, 11, 12, 13, 14, 15, 16, 17];
  const units: Record<number, number> = { 10: 5, 11: 40, 12: 7, 13: 33, 14: 12, 15: 20, 16: 1, 17: 25 };
  const shares = [0, 1].map((r) => rankShare(batch, (i) => units[i]!, r, 2, "work"));
  // by weight: 11 (40), 13 (33), 17 (25), 15 (20), 14 (12), 12 (7), 10 (5), 16 (1) → 0, 1, 1, 0, 0, 1, 1, 0
  assert.deepEqual(shares, [
    [11, 14, 15, 16],
    [10, 12, 13, 17],
  ]);
  const work = shares.map((s) => s.reduce((a, i) => a + units[i]!, 0));
  assert.deepEqual(work, [73, 70]);
  assert.deepEqual(
    [...shares[0]!, ...shares[1]!].sort((a, b) => a - b),
    batch,
    "every example once",
  );
  // four ranks, a short last batch: sizes differ by one at most; ties go by position
  const four = [0, 1, 2, 3].map((r) => rankShare([1, 2, 3, 4, 5], () => 1, r, 4, "work"));
  assert.deepEqual(four, [[1], [2], [3], [4, 5]]);
  assert.deepEqual(
    rankShare([7], () => 1, 1, 2, "work"),
    [],
  );
  assert.deepEqual(
    [0, 1].map((r) => rankShare(batch, (i) => units[i]!, r, 2, "contiguous")),
    [
      [10, 11, 12, 13],
      [14, 15, 16, 17],
    ],
  );
  assert.equal(rankSplitFromEnv({ VPPS_RANK_SPLIT: "contiguous" }), "contiguous");
  assert.equal(rankSplitFromEnv({}), "work");
  assert.throws(() => rankSplitFromEnv({ VPPS_RANK_SPLIT: "rows" }), /VPPS_RANK_SPLIT is 'rows'; expected work/);
});

test("a global batch must divide evenly over the ranks", () => {
  checkBatchSplit(8, 4);
  assert.throws(() => checkBatchSplit(6, 4), /--batch 6 is the global batch .* 4 ranks .* use --batch 4 or 8/);
});

test("the launcher gives a GPU engine's rank r --device cuda:r; CPU engines sum over TCP", () => {
  assert.deepEqual(
    withoutDevice(["train", "treelstm", "--device", "cuda", "--gpus", "2", "--device=auto", "--out", "x"]),
    ["train", "treelstm", "--gpus", "2", "--out", "x"],
  );
  assert.equal(runsOnGpu("cpu", "auto"), false);
  assert.equal(runsOnGpu("autobatch", "cpu"), false);
  assert.equal(runsOnGpu("autobatch", "auto"), true);
  assert.equal(runsOnGpu("eager", "auto"), true);
  assert.equal(runsOnGpu("vpps", "cuda:1"), true);
});

test("frames survive any cut of the byte stream; gathered parts decode in rank order", () => {
  const frames = [frame(3, 0, Uint8Array.from([1, 2, 3, 4])), frame(6, 1), frame(5, 2, new Uint8Array(300).fill(7))];
  const bytes = Buffer.concat(frames);
  for (const cut of [1, 5, 12, 13, 100]) {
    const reader = new FrameReader();
    const got = [];
    for (let at = 0; at < bytes.length; at += cut) got.push(...reader.push(bytes.subarray(at, at + cut)));
    assert.deepEqual(
      got.map((f) => [f.kind, f.seq, f.payload.length]),
      [
        [3, 0, 4],
        [6, 1, 0],
        [5, 2, 300],
      ],
    );
  }
  const parts = [Uint8Array.of(1), new Uint8Array(0), Uint8Array.of(2, 3)];
  assert.deepEqual(decodeGathered(encodeGathered(parts)), parts);
});

test("NCCL: the binding table parses, and a missing library is one line naming what was looked for", () => {
  ncclTypes();
  for (const [name, prototype] of Object.entries(NCCL_PROTOTYPES)) {
    assert.doesNotThrow(() => koffi.proto(prototype), `prototype of ${name}`);
  }
  const tried: string[] = [];
  let error: unknown;
  try {
    Nccl.load({
      env: { CUDA_HOME: "/nonexistent-cuda" },
      listDir: () => undefined,
      load: (path) => {
        tried.push(path);
        throw new Error("cannot open shared object file");
      },
    });
  } catch (e) {
    error = e;
  }
  assert.ok(error instanceof NcclUnavailableError, String(error));
  assert.ok(error.notFound instanceof CudaLibraryNotFoundError);
  assert.deepEqual(tried, ["libnccl.so.2", "libnccl.so"]);
  assert.equal(error.message.includes("\n"), false);
  assert.match(
    error.message,
    /needs NCCL, and NCCL library \(libnccl\.so\*\) not found \(tried 2 paths: libnccl\.so\.2/,
  );
  assert.match(error.message, /LD_LIBRARY_PATH, or train on one GPU \(--gpus 1\)$/);
  // this machine has no NCCL (CI): the real search ends the same way
  let real: unknown;
  try {
    Nccl.load();
  } catch (e) {
    real = e;
  }
  if (real !== undefined) assert.ok(real instanceof NcclUnavailableError, String(real));
});

test("three ranks over TCP get bit-identical sums (added in rank order), gathers (waited for or not) and broadcasts", async () => {
  const port = nextPort++;
  const runs = await Promise.all([0, 1, 2].map((r) => run(["--import", "tsx", RANK_SCRIPT], rankEnv(r, 3, port))));
  const out = runs.map((r) => {
    assert.equal(r.code, 0, r.stderr);
    return JSON.parse(r.stdout) as {
      f32: number[];
      f64: number[];
      gathered: number[][];
      id: number[];
      started: number[][][];
      mid: number;
    };
  });
  // rank 0 adds ((a0 + a1) + a2) in float32
  const f32 = (r: number) => Float32Array.from([0.1 * (r + 1), 1e8 * (r % 2 === 0 ? 1 : -1), 1 / (r + 3), r]);
  const sum = f32(0);
  for (const r of [1, 2]) for (let i = 0; i < 4; i++) sum[i] = sum[i]! + f32(r)[i]!;
  for (const o of out) {
    assert.deepEqual(o.f32, Array.from(new Uint32Array(sum.buffer)));
    assert.deepEqual(o.f64, [3, 0.1 + 0.2]);
    assert.deepEqual(o.gathered, [[0], [10, 11], [20, 21, 22]]);
    assert.deepEqual(o.id, [7, 42]);
    assert.deepEqual(o.started, [
      [[300], [301], [302]],
      [[100], [101], [102]],
      [[], [210], [220, 221]],
    ]);
    assert.equal(o.mid, 6);
  }
});

test("a rendezvous that cannot complete ends in one line naming the ranks and the address", async () => {
  const port = nextPort++;
  const [lonely, master] = await Promise.all([
    run(["--import", "tsx", RANK_SCRIPT], rankEnv(1, 2, port + 1, 1)),
    run(["--import", "tsx", RANK_SCRIPT], rankEnv(0, 3, port, 1)),
  ]);
  assert.notEqual(lonely.code, 0);
  assert.match(
    lonely.stderr,
    /rank 1: rendezvous timed out after 1 s: rank 1 could not join rank 0 at 127\.0\.0\.1:\d+ \(last error: ECONNREFUSED\)/,
  );
  assert.notEqual(master.code, 0);
  assert.match(master.stderr, /rank\(s\) 1, 2 of WORLD_SIZE 3 never connected/);
});

test("a rank killed while the others wait in a collective ends them within seconds, naming it", async () => {
  const port = nextPort++;
  const runs = await Promise.all(
    [0, 1, 2].map((r) => run(["--import", "tsx", RANK_SCRIPT, "hang"], rankEnv(r, 3, port))),
  );
  assert.equal(runs[1]!.signal, "SIGKILL");
  for (const r of [0, 2]) {
    const ran = runs[r]!;
    assert.notEqual(ran.code, 0, `rank ${r} should have failed`);
    assert.match(ran.stderr, new RegExp(`vpps: rank ${r}: rank 1 stopped \\(.*\\).*; stopping this rank`));
    assert.doesNotMatch(ran.stdout, /not reached/);
  }
});

test("the launcher stops the other ranks when one fails, and says which in one line", async () => {
  const t0 = Date.now();
  const sleeper = [process.execPath, "-e", "setTimeout(() => {}, 60000)"];
  let error: unknown;
  try {
    await launchRanks({
      worldSize: 3,
      command: (rank) =>
        rank === 1 ? [process.execPath, "-e", "setTimeout(() => process.kill(process.pid, 'SIGKILL'), 300)"] : sleeper,
      graceMs: 1000,
    });
  } catch (e) {
    error = e;
  }
  assert.ok(error instanceof RankFailedError, String(error));
  assert.match(error.message, /^rank 1 of 3 was killed by SIGKILL \(signal 9\); stopped rank\(s\) 0, 2/);
  assert.equal(error.exitStatus, 137);
  assert.ok(Date.now() - t0 < 10_000, `took ${Date.now() - t0} ms`);
  await launchRanks({ worldSize: 2, command: () => [process.execPath, "-e", "process.exit(0)"] });
  await assert.rejects(
    launchRanks({ worldSize: 2, command: (r) => [process.execPath, "-e", `process.exit(${r === 0 ? 3 : 0})`] }),
    /rank 0 of 2 exited with code 3/,
  );
});

/** The final weights of a run saved with --out, by tensor name. */
function weights(dir: string, epoch: number): Map<string, Float32Array> {
  const { tensors } = readSafetensors(join(dir, `epoch-${epoch}.safetensors`));
  const out = new Map<string, Float32Array>();
  for (const [name, t] of tensors) if (t.data instanceof Float32Array) out.set(name, t.data);
  return out;
}

function assertClose(a: number, b: number, what: string, rel = 1e-5): void {
  assert.ok(Math.abs(a - b) <= rel * Math.max(Math.abs(a), Math.abs(b), 1e-3), `${what}: ${a} vs ${b}`);
}

// 8 trees, global batch 4: 2 steps per epoch, 5 epochs = 10 steps
const SMALL = ["--hidden", "8", "--embed", "8", "--epochs", "5", "--batch", "4", "--max-sentences", "8", "--json"];

for (const engine of [
  ["--engine", "cpu"],
  ["--engine", "autobatch", "--device", "cpu"],
]) {
  test(`--gpus 2 ${engine.join(" ")} over 10 steps equals the one-process run of the same global batch`, async () => {
    const one = tempDir("dp1");
    const two = tempDir("dp2");
    const [a, b] = await Promise.all([
      run([VPPS, "train", "treelstm", ...SMALL, ...engine, "--out", one]),
      run([VPPS, "train", "treelstm", ...SMALL, ...engine, "--out", two, "--gpus", "2"]),
    ]);
    assert.equal(a.code, 0, a.stderr);
    assert.equal(b.code, 0, b.stderr);
    const sa = JSON.parse(a.stdout) as { epochs: { trainLoss: number; devAccuracy: number }[] };
    const sb = JSON.parse(b.stdout) as { epochs: { trainLoss: number; devAccuracy: number }[] };
    assert.equal(sb.epochs.length, 5);
    sa.epochs.forEach((e, i) => {
      assertClose(sb.epochs[i]!.trainLoss, e.trainLoss, `epoch ${i + 1} loss`);
      assert.equal(sb.epochs[i]!.devAccuracy, e.devAccuracy);
    });
    const wa = weights(one, 5);
    const wb = weights(two, 5);
    assert.ok(wa.size > 0);
    assert.deepEqual([...wb.keys()].sort(), [...wa.keys()].sort());
    for (const [name, va] of wa) {
      const vb = wb.get(name)!;
      let worst = 0;
      for (let i = 0; i < va.length; i++) worst = Math.max(worst, Math.abs(va[i]! - vb[i]!));
      assert.ok(worst <= 1e-5 * Math.max(1, ...Array.from(va, Math.abs)), `${name}: max difference ${worst}`);
    }
    // only rank 0 wrote the run
    assert.equal(JSON.parse(readFileSync(join(two, "state.json"), "utf8")).epochs.length, 5);
  });
}

test("--shuffle batches --gpus 2 (fixed batches, each rank's share the same every epoch) equals one process", async () => {
  const args = [VPPS, "train", "treelstm", ...SMALL, "--engine", "cpu", "--shuffle", "batches"];
  const [a, b] = await Promise.all([run(args), run([...args, "--gpus", "2"])]);
  assert.equal(a.code, 0, a.stderr);
  assert.equal(b.code, 0, b.stderr);
  const sa = JSON.parse(a.stdout) as { shuffle: string; epochs: { trainLoss: number }[] };
  const sb = JSON.parse(b.stdout) as { shuffle: string; epochs: { trainLoss: number }[] };
  assert.equal(sb.shuffle, "batches");
  assert.equal(sb.epochs.length, 5);
  for (const [i, e] of sa.epochs.entries()) assertClose(sb.epochs[i]!.trainLoss, e.trainLoss, `epoch ${i + 1} loss`);
});

// the persistent-RNN op (`--rnn persistent`: one rnn node per batch) under data parallelism: its weight gradients are
// summed like every other parameter's
const TAGGER = ["--rnn", "persistent", "--embed", "6", "--hidden", "6", "--mlp", "6", "--max-sentences", "16"];
for (const engine of [
  ["--engine", "cpu"],
  ["--engine", "autobatch", "--device", "cpu"],
]) {
  test(`bilstm --rnn persistent --gpus 2 ${engine.join(" ")} equals the one-process run of the same global batch`, async () => {
    const args = [VPPS, "train", "bilstm", ...TAGGER, ...engine, "--batch", "4", "--epochs", "3", "--json"];
    const [a, b] = await Promise.all([run(args), run([...args, "--gpus", "2"])]);
    assert.equal(a.code, 0, a.stderr);
    assert.equal(b.code, 0, b.stderr);
    const la = (JSON.parse(a.stdout) as { epochs: { trainLoss: number }[] }).epochs.map((e) => e.trainLoss);
    const lb = (JSON.parse(b.stdout) as { epochs: { trainLoss: number }[] }).epochs.map((e) => e.trainLoss);
    assert.equal(lb.length, 3);
    for (const [i, x] of la.entries()) assertClose(lb[i]!, x, `epoch ${i + 1} loss`);
    assert.notEqual(la[2], la[0], "it trains");
  });
}

test("killing one rank of `vpps train --gpus 2` ends the job within seconds with a line naming it", async () => {
  let killedAt = 0;
  const ran = await run(
    [VPPS, "train", "treelstm", "--engine", "cpu", "--hidden", "8", "--embed", "8", "--epochs", "200", "--gpus", "2"],
    {},
    (launcher) => {
      // once training runs, SIGKILL the launcher's child whose environment says RANK=1
      const poll = setInterval(() => {
        let children: string[] = [];
        try {
          children = readFileSync(`/proc/${launcher.pid}/task/${launcher.pid}/children`, "utf8").trim().split(/\s+/);
        } catch {
          return;
        }
        for (const pid of children.filter(Boolean)) {
          let environ = "";
          try {
            environ = readFileSync(`/proc/${pid}/environ`, "utf8");
          } catch {
            continue;
          }
          if (environ.split("\0").includes("RANK=1") && killedAt === 0) {
            setTimeout(() => {
              killedAt = Date.now();
              process.kill(Number(pid), "SIGKILL");
            }, 2500);
            clearInterval(poll);
          }
        }
      }, 100);
      launcher.on("close", () => clearInterval(poll));
    },
  );
  assert.ok(killedAt > 0, `rank 1 was never found: ${ran.stderr}`);
  assert.equal(ran.code, 137, ran.stderr);
  assert.match(ran.stderr, /vpps: rank 1 of 2 was killed by SIGKILL \(signal 9\); stopped rank\(s\) 0/);
  const after = Date.now() - killedAt;
  assert.ok(after < 8000, `the job ended ${after} ms after the kill`);
});

test("--gpus refuses what cannot work, in one line, before any rank starts", async () => {
  const odd = await run([VPPS, "train", "treelstm", "--engine", "cpu", "--gpus", "3", "--batch", "4"]);
  assert.equal(odd.code, 1);
  assert.match(odd.stderr, /^vpps: --batch 4 is the global batch and must split evenly over the 3 ranks/);
  assert.equal(odd.stderr.trim().split("\n").length, 1);
  const gpu = await run([VPPS, "train", "treelstm", "--engine", "eager", "--gpus", "2"]);
  assert.equal(gpu.code, 1);
  assert.equal(gpu.stderr.trim().split("\n").length, 1, gpu.stderr);
});
