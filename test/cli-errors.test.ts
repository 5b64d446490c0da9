/**
 * The command line's error cases: the one error handler (known errors as one line `vpps: …`, usage errors, bugs with
 * their trace), --version, devices, empty paths, damaged data files, checkpoints and state.json, sizes, the VPPS
 * plan's refusal, a closed stdout, and long tokens cut. Run in-process (test/cli-harness.ts) except where a real
 * process is the point (a pipe closed by its reader).
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { CommanderError } from "commander";
import { BenchError, BenchUsageError } from "../src/bench/errors.js";
import { CliError } from "../src/cli/errors.js";
import { EXIT_STATUS, reportError } from "../src/cli/main.js";
import { OutputClosed } from "../src/cli/output.js";
import { H100_SXM } from "../src/cuda/hw/device-model.js";
import { CudaError, cudaFailure, DevicePoolOutOfMemory } from "../src/cuda/index.js";
import { TreeFormatError } from "../src/data/sst.js";
import { DataError } from "../src/data/text-file.js";
import { EngineUnavailableError } from "../src/engines/registry.js";
import { plansFor } from "../src/engines/vpps/codegen/compile.js";
import { resolveOptions } from "../src/engines/vpps/options.js";
import { VppsPlanError } from "../src/engines/vpps/plan/plan.js";
import { ShapeError } from "../src/graph/graph.js";
import { checkModelSize, ModelSizeError, onChipMatrices, ParameterCollection } from "../src/model/parameters.js";
import { CheckpointError } from "../src/model/safetensors.js";
import { treeLstmTask } from "../src/models/treelstm/task.js";
import { isUserError, UsageError, UserError } from "../src/util/errors.js";
import { cut, quote } from "../src/util/text.js";
import { cli, copyRun, dataDir, hasTrace, savedRun, snapshot, TINY, tempDir } from "./cli-harness.js";

const bin = join(import.meta.dirname, "..", "bin", "vpps.js");

/** Asserts a one-line refusal: status `code`, stderr exactly one line `vpps: …` matching `message`, no trace. */
function oneLine(r: { code: number; stderr: string }, code: number, message: RegExp): void {
  assert.equal(r.code, code, r.stderr);
  const lines = r.stderr.split("\n");
  assert.equal(lines.length, 2, `one line and its newline: ${JSON.stringify(r.stderr)}`);
  assert.equal(lines[1], "");
  assert.match(lines[0]!, /^vpps: /);
  assert.match(lines[0]!, message);
  assert.ok(lines[0]!.length < 1000, `a readable line (${lines[0]!.length} characters)`);
}

/** Captures what `reportError` writes. */
function report(e: unknown): { status: number; stderr: string } {
  let stderr = "";
  const write = process.stderr.write;
  process.stderr.write = ((s: string) => {
    stderr += s;
    return true;
  }) as typeof process.stderr.write;
  try {
    return { status: reportError(e, null), stderr };
  } finally {
    process.stderr.write = write;
  }
}

describe("the one error handler", () => {
  test("every known error class is one line `vpps: …`, status 1 (2 for usage errors), no trace", () => {
    const known: [Error, number][] = [
      [new CliError("a"), 1],
      [new DataError("a"), 1],
      [new TreeFormatError("f.txt", 1, 2, "a"), 1],
      [new EngineUnavailableError("a"), 1],
      [new ShapeError("a"), 1],
      [new CheckpointError("a"), 1],
      [new ModelSizeError("a"), 1],
      [new VppsPlanError("a"), 1],
      [new BenchError("a"), 1],
      [new UserError("a"), 1],
      [new UsageError("a"), 2],
      [new BenchUsageError("a"), 2],
    ];
    for (const [e, status] of known) {
      assert.ok(isUserError(e), e.name);
      const r = report(e);
      assert.equal(r.status, status, e.name);
      assert.match(r.stderr, /^vpps: (f\.txt:1:2: )?a\n$/, e.name);
    }
    // a message of several lines is still printed as one
    assert.equal(report(new CliError("first\n  second")).stderr, "vpps: first second\n");
  });

  test("CUDA failures a user can cause: one line with what to do and the CUresult name, status 1, no trace", () => {
    const cases: [Error, RegExp][] = [
      [
        cudaFailure("cuMemAlloc_v2", 2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory", "asked for 90.0 GiB"),
        /^vpps: the GPU is out of memory: use a smaller --batch or --hidden, or free the GPU \(nvidia-smi .*\) \[cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY \(2\), asked for 90\.0 GiB\]\n$/,
      ],
      [
        cudaFailure("cuInit", 100, "CUDA_ERROR_NO_DEVICE"),
        /^vpps: no CUDA GPU is visible: check nvidia-smi .*--engine cpu \[cuInit: CUDA_ERROR_NO_DEVICE \(100\)\]\n$/,
      ],
      [
        cudaFailure("cuDevicePrimaryCtxRetain", 46, "CUDA_ERROR_DEVICE_UNAVAILABLE"),
        /^vpps: the GPU is busy or unavailable .*--device \[cuDevicePrimaryCtxRetain: CUDA_ERROR_DEVICE_UNAVAILABLE \(46\)\]\n$/,
      ],
      [
        cudaFailure("cuLaunchCooperativeKernel", 720, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", undefined, "kernel k"),
        /^vpps: a persistent kernel needs more of the GPU than is free .* \[cuLaunchCooperativeKernel: CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE \(720\), kernel k\]\n$/,
      ],
      [
        new DevicePoolOutOfMemory(
          8 << 20,
          1024,
          { capacityBytes: 1 << 20, usedBytes: 4096, peakBytes: 4096, persistentBytes: 4096 },
          "node values",
        ),
        /^vpps: asked for 8\.0 MiB for node values at offset 1024, pool 1\.0 MiB, .*: the batch or model does not fit the GPU's memory pool; use a smaller --batch or --hidden\n$/,
      ],
    ];
    for (const [e, line] of cases) {
      const r = report(e);
      assert.equal(r.status, 1, e.message);
      assert.match(r.stderr, line);
      assert.ok(!hasTrace(r.stderr), r.stderr);
    }
    // a CUDA failure that only a bug in vpps causes keeps its trace
    const bug = cudaFailure("cuLaunchKernel", 1, "CUDA_ERROR_INVALID_VALUE");
    assert.ok(bug instanceof CudaError);
    assert.equal(report(bug).status, 70);
  });

  test("anything else is a bug: its trace and a line saying so, status 70", () => {
    for (const e of [new TypeError("x is undefined"), new RangeError("Invalid typed array length"), "a string"]) {
      const r = report(e);
      assert.equal(r.status, EXIT_STATUS.bug);
      assert.equal(r.status, 70);
      const lines = r.stderr.trim().split("\n");
      assert.match(
        lines.at(-1)!,
        /^vpps: this is a bug in vpps 0\.\d+\.\d+ .*please report it .*with the command line/,
      );
      if (typeof e !== "string") assert.ok(hasTrace(r.stderr), r.stderr);
    }
  });

  test("help and version print nothing more (status 0); a closed stdout is quiet (status 141)", () => {
    assert.deepEqual(report(new CommanderError(0, "commander.helpDisplayed", "(outputHelp)")), {
      status: 0,
      stderr: "",
    });
    assert.deepEqual(report(new OutputClosed()), { status: 141, stderr: "" });
    assert.deepEqual(report(Object.assign(new Error("write EPIPE"), { code: "EPIPE" })), { status: 141, stderr: "" });
  });

  test("usage errors: one line with where the help is, status 2", async () => {
    oneLine(
      await cli("train", "treelstm", "--batch", "0"),
      2,
      /--batch must be a positive integer; got '0' \(see vpps train treelstm --help\)$/,
    );
    oneLine(
      await cli("train", "treelstm", "--bogus"),
      2,
      /unknown option '--bogus' \(see vpps train treelstm --help\)$/,
    );
    oneLine(await cli("train", "nope"), 2, /unknown command 'nope'/);
    oneLine(await cli("eval", "treelstm"), 2, /required option '--run <dir>' not specified/);
    // values a bare Number() would take
    for (const v of ["", " 5", "0x10", "1e3", "5.0", "9007199254740993"]) {
      oneLine(await cli("train", "treelstm", "--epochs", v), 2, /^vpps: --epochs must be /);
    }
    oneLine(await cli("train", "treelstm", "--seed", ""), 2, /--seed must be an integer; got ''/);
    oneLine(await cli("train", "treelstm", "--lr", "Infinity"), 2, /--lr must be a positive number/);
  });

  test("vpps --version prints package.json's version", async () => {
    const { version } = JSON.parse(readFileSync(join(import.meta.dirname, "..", "package.json"), "utf8"));
    for (const flag of ["--version", "-V"]) {
      const r = await cli(flag);
      assert.equal(r.code, 0);
      assert.equal(r.stdout, `${version}\n`);
    }
  });
});

describe("item 4: devices, empty paths, bad values in state.json, invalid UTF-8", () => {
  test("--device banana is refused for every engine, before any data is read", async () => {
    for (const engine of ["cpu", "autobatch", "vpps"]) {
      for (const device of ["banana", "cuda:", "cuda:-1", "gpu0", ""]) {
        oneLine(
          await cli("train", "treelstm", "--engine", engine, "--device", device, "--data", "/no/such/dir"),
          2,
          /--device must be auto, cpu, cuda or cuda:N/,
        );
      }
    }
    oneLine(await cli("eval", "treelstm", "--run", "x", "--data", "y", "--device", "banana"), 2, /--device must be/);
  });

  test("--device cuda:7 with the CPU engine is refused (it would be ignored), before any data is read", async () => {
    for (const device of ["cuda:7", "cuda", "CUDA:0"]) {
      oneLine(
        await cli("train", "treelstm", "--device", device, "--data", "/no/such/dir"),
        1,
        /the 'cpu' engine runs on the CPU, but --device \S+ asks for a GPU; choose a GPU engine .* or leave --device out$/,
      );
    }
    oneLine(
      await cli("eval", "treelstm", "--run", "/no/such/run", "--data", "y", "--device", "cuda:7"),
      1,
      /the 'cpu' engine runs on the CPU/,
    );
  });

  test('--data "" (and every other path option given empty) is refused, not taken as "no --data"', async () => {
    oneLine(await cli("train", "treelstm", "--data", ""), 2, /--data must be a directory; got ''/);
    oneLine(await cli("train", "treelstm", "--data", "  "), 2, /--data must be a directory/);
    oneLine(await cli("train", "treelstm", "--out", ""), 2, /--out must be a directory; got ''/);
    oneLine(await cli("train", "treelstm", "--resume", ""), 2, /--resume must be a directory of a run/);
    oneLine(await cli("eval", "treelstm", "--run", "", "--data", "x"), 2, /--run must be a directory of a run/);
    oneLine(await cli("eval", "treelstm", "--run", "x", "--data", ""), 2, /--data must be a file; got ''/);
    oneLine(await cli("train", "treelstm", "--data", "a\0b"), 2, /--data must be a directory; got 'a\\u0000b'/);
  });

  test("state.json with cell 'bogus' (or another bad option) is refused by --resume and by vpps eval --run", async () => {
    const data = dataDir();
    const run = await savedRun(data);
    for (const [key, value, message] of [
      ["cell", "bogus", /options\.cell must be one of fused, ops; got 'bogus'$/],
      ["hidden", -3, /options\.hidden must be a positive integer; got -3$/],
      ["embed", "8", /options\.embed must be a positive integer; got '8'$/],
      ["hidden", { a: 1 }, /options\.hidden must be a positive integer; got \{"a":1\}$/],
    ] as const) {
      const dir = copyRun(run);
      const state = JSON.parse(readFileSync(join(dir, "state.json"), "utf8"));
      state.options[key] = value;
      writeFileSync(join(dir, "state.json"), JSON.stringify(state));
      const before = snapshot(dir);
      oneLine(await cli("train", "treelstm", "--resume", dir, "--epochs", "2"), 1, message);
      oneLine(await cli("eval", "treelstm", "--run", dir, "--data", join(data, "dev.txt")), 1, message);
      assert.equal(snapshot(dir), before, "the run is untouched");
    }
  });

  test("invalid UTF-8 in a data file is refused with its file and line", async () => {
    const data = dataDir();
    const lines = readFileSync(join(data, "train.txt"), "utf8").split("\n");
    const bad = Buffer.concat([
      Buffer.from(`${lines.slice(0, 3).join("\n")}\n(2 (1 caf`),
      Buffer.from([0xe9]), // Latin-1 é
      Buffer.from(") (1 b))\n"),
    ]);
    writeFileSync(join(data, "train.txt"), bad);
    oneLine(await cli("train", "treelstm", "--data", data), 1, /train\.txt:4: invalid UTF-8; save the file as UTF-8$/);
    const run = await savedRun(dataDir());
    writeFileSync(join(data, "dev.txt"), bad);
    oneLine(
      await cli("eval", "treelstm", "--run", run, "--data", join(data, "dev.txt")),
      1,
      /tree file .*dev\.txt:4: invalid UTF-8; save the file as UTF-8$/,
    );
  });
});

describe("item 8: data files the file system refuses", () => {
  test("train.txt a directory, missing, unreadable: one line naming the file", async (t) => {
    const data = dataDir();
    rmSync(join(data, "train.txt"));
    oneLine(await cli("train", "treelstm", "--data", data), 1, /--data .*: no train\.txt there/);
    mkdirSync(join(data, "train.txt"));
    oneLine(await cli("train", "treelstm", "--data", data), 1, /tree file .*train\.txt is a directory, not a file$/);
    oneLine(
      await cli("train", "treelstm", "--data", join(data, "dev.txt")),
      1,
      /--data .*dev\.txt: no train\.txt there/,
    );
    oneLine(await cli("eval", "treelstm", "--run", data, "--data", join(data, "none.txt")), 1, /no such file/);
    rmSync(join(data, "train.txt"), { recursive: true });
    writeFileSync(join(data, "train.txt"), "(3 (2 a) (2 b))\n");
    chmodSync(join(data, "train.txt"), 0o000);
    if (process.getuid?.() === 0) {
      t.diagnostic("running as root, which reads any file: the unreadable case is not reproducible here");
      return;
    }
    oneLine(await cli("train", "treelstm", "--data", data), 1, /train\.txt cannot be read \(permission denied\)$/);
  });
});

describe("item 9: damaged checkpoints and state.json, through --resume and vpps eval --run", async () => {
  const data = dataDir();
  const run = await savedRun(data);
  const checkpoint = "epoch-1.safetensors";
  const bytes = readFileSync(join(run, checkpoint));
  const headerEnd = 8 + Number(bytes.readBigUInt64LE(0));

  /** Applies `damage` to a copy of the run; both commands refuse it in one line and write nothing. */
  async function refused(damage: (dir: string) => void, message: RegExp): Promise<void> {
    const dir = copyRun(run);
    damage(dir);
    const before = snapshot(dir);
    oneLine(await cli("train", "treelstm", "--resume", dir, "--epochs", "2"), 1, message);
    oneLine(await cli("eval", "treelstm", "--run", dir, "--data", join(data, "dev.txt")), 1, message);
    assert.equal(snapshot(dir), before, "the run is untouched");
  }
  const writeCheckpoint = (b: Uint8Array) => (dir: string) => writeFileSync(join(dir, checkpoint), b);
  const editState = (edit: (s: Record<string, unknown>) => unknown) => (dir: string) => {
    const state = JSON.parse(readFileSync(join(dir, "state.json"), "utf8"));
    const replaced = edit(state);
    writeFileSync(join(dir, "state.json"), JSON.stringify(replaced === undefined ? state : replaced));
  };

  test("a truncated checkpoint (in the header length, the header, the data)", async () => {
    await refused(
      writeCheckpoint(bytes.subarray(0, 5)),
      /not a safetensors file \(shorter than its 8-byte header length\)/,
    );
    await refused(writeCheckpoint(bytes.subarray(0, 40)), /header length \d+ exceeds the file size 40/);
    await refused(writeCheckpoint(bytes.subarray(0, bytes.length - 3)), /data offsets .* do not fit/);
  });

  test("a bad header: garbage, not an object, wrong fields, a length pointing elsewhere", async () => {
    const withHeader = (json: string) => {
      const h = Buffer.from(json);
      const b = Buffer.alloc(8 + h.length);
      b.writeBigUInt64LE(BigInt(h.length), 0);
      h.copy(b, 8);
      return Buffer.concat([b, bytes.subarray(headerEnd)]);
    };
    await refused(writeCheckpoint(withHeader("{not json")), /the safetensors header is not valid JSON/);
    await refused(writeCheckpoint(withHeader("null")), /the safetensors header is not a JSON object/);
    await refused(writeCheckpoint(withHeader("[1,2]")), /the safetensors header is not a JSON object/);
    const header = JSON.parse(bytes.subarray(8, headerEnd).toString());
    for (const [field, value, message] of [
      ["shape", "4x4", /tensor 'E' has shape "4x4"; expected sizes ≥ 0/],
      ["shape", [-1, 4], /tensor 'E' has shape \[-1,4\]/],
      ["data_offsets", [9, 1], /tensor 'E' has data offsets \[9, 1\] that do not fit/],
      ["dtype", 7, /tensor 'E' has dtype 7; expected F32/],
      ["dtype", "F16", /tensor 'E' has dtype F16; expected F32/],
    ] as const) {
      await refused(
        writeCheckpoint(withHeader(JSON.stringify({ ...header, E: { ...header.E, [field]: value } }))),
        message,
      );
    }
    await refused(
      writeCheckpoint(withHeader(JSON.stringify({ ...header, E: 3 }))),
      /tensor 'E' has dtype undefined; expected F32/,
    );
    const { W_out: _, ...noWout } = header;
    // the checksums name every tensor written: one taken out of the header is missed
    await refused(
      writeCheckpoint(withHeader(JSON.stringify(noWout))),
      /tensor 'W_out' was written but is not in the file/,
    );
    await refused(
      writeCheckpoint(withHeader(JSON.stringify({ ...header, __metadata__: { epoch: 1 } }))),
      /__metadata__\.epoch is not a string/,
    );
    const far = Buffer.from(bytes);
    far.writeBigUInt64LE(2n ** 62n, 0);
    await refused(writeCheckpoint(far), /header length \d+ exceeds the file size/);
  });

  test("the checkpoint a directory, or missing", async () => {
    await refused((dir) => {
      rmSync(join(dir, checkpoint));
      mkdirSync(join(dir, checkpoint));
    }, /epoch-1\.safetensors is not a regular file/);
    await refused(
      (dir) => rmSync(join(dir, checkpoint)),
      /the checkpoint .*epoch-1\.safetensors that state\.json names is missing/,
    );
  });

  test("changed shapes: state.json's sizes or vocabulary no longer those of the checkpoint", async () => {
    await refused(
      editState((s) => {
        (s.options as Record<string, unknown>).hidden = 5;
      }),
      // the checkpoint's identity records its shape
      /epoch-1\.safetensors belongs to another run than the state\.json beside it: its hidden is 4, the run's 5/,
    );
    await refused(
      editState((s) => {
        (s.vocabulary as string[]).push("extra-word");
      }),
      // state.json is compared with the run state the checkpoint was written with
      /state\.json beside .*epoch-1\.safetensors is not what the run wrote with it: its vocabulary\[\d+\] is "extra-word", the checkpoint's absent/,
    );
  });

  test("a bad vocabulary", async () => {
    await refused(
      editState((s) => {
        (s.vocabulary as string[])[0] = "the";
      }),
      /state\.json's vocabulary: Vocabulary\.fromJSON: entry 0 must be '<unk>'; got "the"$/,
    );
    await refused(
      editState((s) => {
        const v = s.vocabulary as string[];
        v[2] = v[1]!;
      }),
      /entry 2 .* duplicates entry 1$/,
    );
    await refused(
      editState((s) => {
        s.vocabulary = 12;
      }),
      /expected an array of words; got number$/,
    );
    await refused(
      editState((s) => {
        (s.vocabulary as unknown[])[1] = { w: 1 };
      }),
      /entry 1 must be a string; got object$/,
    );
  });

  test("state.json truncated, empty, not an object, a directory, not UTF-8, or with damaged fields: --resume and eval continue from the newest intact checkpoint, saying so", async () => {
    // the checkpoints carry the run's state, so a damaged state.json loses nothing
    const text = readFileSync(join(run, "state.json"));
    const damages: ((dir: string) => void)[] = [
      (dir) => writeFileSync(join(dir, "state.json"), text.subarray(0, 50)),
      (dir) => writeFileSync(join(dir, "state.json"), ""),
      (dir) => writeFileSync(join(dir, "state.json"), "null"),
      (dir) => {
        rmSync(join(dir, "state.json"));
        mkdirSync(join(dir, "state.json"));
      },
      (dir) =>
        writeFileSync(
          join(dir, "state.json"),
          Buffer.concat([text.subarray(0, 30), Buffer.from([0xff]), text.subarray(31)]),
        ),
      editState((s) => void (s.epochs = [])),
      editState((s) => void (s.epochs = "1")),
      editState((s) => void ((s.epochs as Record<string, unknown>[])[0]!.epoch = "1")),
      editState((s) => void ((s.epochs as Record<string, unknown>[])[0]!.trainLoss = null)),
      editState((s) => void (s.options = null)),
    ];
    for (const [k, damage] of damages.entries()) {
      const dir = copyRun(run);
      damage(dir);
      const ev = await cli("eval", "treelstm", "--run", dir, "--data", join(data, "dev.txt"));
      assert.equal(ev.code, 0, `damage ${k}: eval: ${ev.stderr}`);
      assert.match(
        ev.stderr + ev.stdout,
        /state\.json is .*; continuing from the newest intact checkpoint .*epoch-1\.safetensors/,
      );
      const tr = await cli("train", "treelstm", "--resume", dir, "--epochs", "2");
      if (k === 3) {
        // a directory where the run writes its state: refused before training, naming it
        oneLine(tr, 1, /state\.json is not a regular file \(a directory or another kind\); move it away/);
        continue;
      }
      assert.equal(tr.code, 0, `damage ${k}: train --resume: ${tr.stderr}`);
      assert.match(tr.stdout + tr.stderr, /continuing from the newest intact checkpoint/);
    }
  });
});

describe("item 11: sizes", () => {
  test("--hidden 100000 names the typed-array limit before allocating anything", async () => {
    const t0 = performance.now();
    oneLine(
      await cli("train", "treelstm", "--hidden", "100000", "--max-sentences", "5"),
      1,
      /the model is too large: parameter 'U_iou' \[300000x200000\] would hold 60,000,000,000 values; one parameter holds at most 4,294,967,296 \(the length limit of a JavaScript typed array\); lower --hidden or --embed; the largest --hidden that fits is \d+$/,
    );
    assert.ok(performance.now() - t0 < 5000, "refused from the shapes");
    // the API names the parameter too
    assert.throws(() => new ParameterCollection().addParameters([300000, 200000], undefined, "U"), ModelSizeError);
  });

  test("a model beyond the machine's memory is refused with what it needs", () => {
    const shapes = treeLstmTask.parameterShapes({ hidden: 20000, embed: 256, cell: "fused", dropout: 0 }, 100);
    assert.throws(
      () => checkModelSize(shapes, { bytesPerValue: 16, memoryBytes: 16e9, advice: "lower --hidden or --embed" }),
      /the model is too large for this machine: its 3,215,[\d,]+ parameter values need 51\.\d GB \(16 bytes each .*\), more than its 16\.0 GB of memory; lower --hidden or --embed$/,
    );
    checkModelSize(shapes, { bytesPerValue: 16, memoryBytes: 60e9, advice: "" });
  });

  test("vpps plan --hidden 20000 plans from the shapes alone: fast, nothing allocated, refused in one line", async () => {
    const buffers = process.memoryUsage().arrayBuffers;
    const t0 = performance.now();
    for (const json of [[], ["--json"]]) {
      oneLine(
        await cli("plan", "treelstm", "--hidden", "20000", "--embed", "20000", ...json),
        1,
        /^vpps: VPPS: the model's weight matrices hold 4400\d+ floats, more than the 4294967296 \(2\^32\) that the kernel's 32-bit offsets address; choose smaller hidden or embedding sizes$/,
      );
    }
    oneLine(
      await cli("plan", "treelstm", "--hidden", "9007199254740991"),
      1,
      /floats, more than the 4294967296 \(2\^32\)/,
    );
    assert.ok(performance.now() - t0 < 3000, `${performance.now() - t0} ms`);
    assert.ok(process.memoryUsage().arrayBuffers - buffers < 50e6, "no weights were allocated");
  });

  test("vpps plan plans every size registers cannot hold by keeping matrices off chip; bad --off-chip is one line", async () => {
    for (const args of [
      ["--hidden", "768"],
      ["--hidden", "768", "--json"],
      ["--hidden", "768", "--transposed"],
      ["--hidden", "512", "--gradients", "registers", "--ctas-per-sm", "2"],
      ["--hidden", "2048", "--gradients", "gemm"],
      ["--hidden", "768", "--gpu", "h200", "--ctas-per-sm", "1", "--rpw", "1"],
    ]) {
      const r = await cli("plan", "treelstm", ...args);
      assert.equal(r.code, 0, `${args.join(" ")}: ${r.stderr}`);
      assert.match(
        r.stdout,
        args.includes("--json") ? /"placement":"off-chip"/ : /off chip: needed for the rest to fit/,
      );
    }
    oneLine(await cli("plan", "treelstm", "--off-chip", "U_iou,nope"), 1, /offChip names 'nope'/);
    oneLine(await cli("plan", "treelstm", "--off-chip", ""), 2, /--off-chip must be all or comma-separated/);
    oneLine(await cli("plan", "treelstm", "--gpu", "device"), 1, /--gpu device: no GPU can be opened here/);
  });

  test("a Tree-LSTM at hidden 1536 on an H100 (what `new VppsEngine` meets) is planned; a bad offChip is one line", () => {
    const shapes = treeLstmTask.parameterShapes({ hidden: 1536, embed: 256, cell: "fused", dropout: 0 }, 1);
    const plans = plansFor(onChipMatrices(shapes), H100_SXM, resolveOptions({}).variants);
    assert.ok(plans.length > 0);
    for (const p of plans) assert.ok(p.offChip.length > 0);
    let caught: unknown;
    try {
      plansFor(onChipMatrices(shapes), H100_SXM, resolveOptions({ variants: { offChip: ["U"] } }).variants);
    } catch (e) {
      caught = e;
    }
    assert.ok(caught instanceof VppsPlanError, String(caught));
    const r = report(caught);
    assert.equal(r.status, 1);
    assert.match(r.stderr, /^vpps: VPPS: offChip names 'U', which is not a weight matrix of this model; .*\n$/);
  });
});

describe("item 12: echoed tokens are cut", () => {
  test("cut and quote", () => {
    assert.equal(cut("short"), "short");
    assert.equal(quote("short"), "'short'");
    assert.equal(quote("a".repeat(1000), 5), "'aaaaa…' (1000 characters)");
    assert.equal(cut("😀".repeat(10), 3), "😀😀😀…", "no character is split");
    assert.equal(cut("a\nb\u0000"), "a\\nb\\u0000");
  });

  test("a 4 MB token in a tree file, an option value or an unknown option: one short line", async () => {
    const huge = "x".repeat(4 << 20);
    const data = dataDir();
    for (const line of [
      `(3 (2 a) (${huge} b))`,
      `(3 (2 a) (2 b)) ${huge}`,
      `(3 (9${"9".repeat(1 << 20)} a) (2 b))`,
      huge,
    ]) {
      writeFileSync(join(data, "train.txt"), `${line}\n`);
      const r = await cli("train", "treelstm", "--data", data);
      oneLine(r, 1, /train\.txt:1:\d+: .*…/);
      assert.ok(r.stderr.length < 300, r.stderr);
    }
    oneLine(
      await cli("train", "treelstm", "--cell", huge),
      2,
      /--cell must be one of fused, ops; got 'x+…' \(4194304 characters\)/,
    );
    oneLine(
      await cli("train", "treelstm", "--data", data, "--device", huge),
      2,
      /--device must be .*\(4194304 characters\)/,
    );
    oneLine(await cli("train", "treelstm", `--${huge}`), 2, /unknown option '--x+…' \(4194306 characters\)/);
    oneLine(await cli("bench", "treelstm", "--batches", huge), 2, /--batches: 'x+…' \(4194304 characters\) is not/);
  });
});

describe("item 13: a closed stdout", () => {
  test("vpps train … | head -1 ends quietly at its next line (status 141), without an EPIPE trace", async () => {
    const child = spawn(
      process.execPath,
      [bin, "train", "treelstm", "--hidden", "4", "--embed", "4", "--max-sentences", "40", "--epochs", "500"],
      { stdio: ["ignore", "pipe", "pipe"] },
    );
    let stderr = "";
    child.stderr.on("data", (d) => {
      stderr += d;
    });
    const first = await new Promise<string>((resolve) => {
      child.stdout.once("data", (d) => {
        child.stdout.destroy(); // as head -1 does after its line
        resolve(String(d));
      });
    });
    const code = await new Promise<number | null>((resolve) => child.on("close", (c) => resolve(c)));
    assert.match(first, /^data: /);
    assert.equal(code, 141, stderr);
    assert.doesNotMatch(stderr, /EPIPE|Error|vpps:/);
    assert.ok(!hasTrace(stderr), stderr);
    assert.doesNotMatch(stderr, /epoch 500\/500/, "it stopped early");
  });
});

test("the synthetic task still trains when no --data is given, and --out is written", async () => {
  const out = join(tempDir("ok"), "run");
  const r = await cli("train", "treelstm", ...TINY, "--max-sentences", "20", "--out", out);
  assert.equal(r.code, 0, r.stderr);
  assert.ok(existsSync(join(out, "state.json")));
});
