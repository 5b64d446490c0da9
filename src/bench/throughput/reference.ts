/**
 * The PyTorch reference of `vpps bench <model> --reference`: bench/pytorch/<model>.py's `bench` mode, run as a child
 * process of the same benchmark run on the same data, batch sizes, model size and optimiser (SGD, learning rate
 * 0.05, clip 5), on the device the suite runs on. Before timing, the script loads vpps's initial weights (written
 * here as safetensors) and reports its loss on the first batch of 8, which the suite checks against the CPU engine's
 * like every engine's: the reference must be the same function on the same data, not just a fast one.
 *
 * The interpreter is `python3`, or `VPPS_REFERENCE_PYTHON` when set (a virtual environment's python; the tests point
 * it at a stand-in). Without the script, the interpreter or torch, the reference is skipped with one line saying why.
 */
import { spawn, spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { PACKAGE_ROOT } from "../common.js";
import { errorMessage } from "../errors.js";

/** The reference's engine id in rows, runs and the plot. */
export const REFERENCE_ENGINE = "pytorch";
export const REFERENCE_LABEL = "PyTorch";

/** One batch size of the reference, as a result row. */
export interface ReferenceRow {
  engine: typeof REFERENCE_ENGINE;
  hidden: number;
  embed: number;
  batch: number;
  sentencesPerSecond: number;
  msPerBatch: number;
  /** ms per batch of each timed repeat (the row's value is their median). */
  repeats: number[];
  stepsPerRepeat: number;
  /** torch's name of the device it ran on. */
  device: string;
}

/** What the result file records about the reference. */
export interface ReferenceRecord {
  python: string;
  script: string;
  /** The arguments after the interpreter (the weights file is a temporary one). */
  args: string[];
  torch: string | null;
  cudnn: number | null;
  device: string | null;
  /** Examples and vocabulary size the script loaded (vpps's are in the file's header). */
  items: number | null;
  vocabulary: number | null;
}

/** What the script printed (its one JSON line), checked. */
export interface ReferenceResult {
  device: string;
  torch: string;
  cudnn: number | null;
  items: number;
  vocabulary: number;
  firstBatchLoss: number | null;
  rows: { batch: number; sentencesPerSecond: number; msPerBatch: number; repeats: number[]; stepsPerRepeat: number }[];
}

export function referencePython(env: NodeJS.ProcessEnv = process.env): string {
  const given = env.VPPS_REFERENCE_PYTHON?.trim();
  return given ? given : "python3";
}

export function referenceScript(model: string): string {
  return join(PACKAGE_ROOT, "bench", "pytorch", `${model}.py`);
}

const lastLine = (s: string | null | undefined): string =>
  (s ?? "")
    .trim()
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l !== "")
    .pop() ?? "";

/** torch's version when `python` can import it; otherwise why the reference cannot run here. */
export function probeReference(
  python: string,
  script: string,
): { ok: true; torch: string } | { ok: false; reason: string } {
  if (!existsSync(script)) {
    return {
      ok: false,
      reason: `${script} is not there (bench/pytorch/ comes with a checkout of vpps, not the package)`,
    };
  }
  const r = spawnSync(python, ["-c", "import torch; print(torch.__version__)"], {
    encoding: "utf8",
    timeout: 300_000,
  });
  if (r.error) {
    const code = (r.error as NodeJS.ErrnoException).code;
    return {
      ok: false,
      reason:
        code === "ENOENT"
          ? `${python} was not found (set VPPS_REFERENCE_PYTHON to a python with torch)`
          : `${python} could not be run (${errorMessage(r.error)})`,
    };
  }
  if (r.status !== 0) {
    return { ok: false, reason: `${python} cannot import torch (${lastLine(r.stderr) || `exit status ${r.status}`})` };
  }
  return { ok: true, torch: lastLine(r.stdout) };
}

const isNumber = (x: unknown): x is number => typeof x === "number" && Number.isFinite(x);

/** The script's result: its last stdout line, one JSON object; a malformed one is an Error saying what is wrong. */
export function parseReferenceOutput(stdout: string): ReferenceResult {
  const line = lastLine(stdout);
  let json: unknown;
  try {
    json = JSON.parse(line);
  } catch {
    throw new Error(`printed no JSON result (its last line: '${line.slice(0, 200)}')`);
  }
  if (typeof json !== "object" || json === null) throw new Error(`printed ${line.slice(0, 200)}, not a JSON object`);
  const o = json as Record<string, unknown>;
  const rows = o.rows;
  if (!Array.isArray(rows) || rows.length === 0) throw new Error("its JSON result has no rows");
  for (const r of rows as Record<string, unknown>[]) {
    for (const k of ["batch", "sentencesPerSecond", "msPerBatch", "stepsPerRepeat"]) {
      if (!isNumber(r[k]))
        throw new Error(`a row of its JSON result has ${k} ${JSON.stringify(r[k])}; expected a number`);
    }
    if (!Array.isArray(r.repeats) || !r.repeats.every(isNumber)) {
      throw new Error("a row of its JSON result has no list of repeats");
    }
  }
  if (o.firstBatchLoss !== null && !isNumber(o.firstBatchLoss)) {
    throw new Error(`its firstBatchLoss is ${JSON.stringify(o.firstBatchLoss)}; expected a number`);
  }
  return {
    device: String(o.device ?? "unknown"),
    torch: String(o.torch ?? "unknown"),
    cudnn: isNumber(o.cudnn) ? o.cudnn : null,
    items: isNumber(o.items) ? o.items : -1,
    vocabulary: isNumber(o.vocabulary) ? o.vocabulary : -1,
    firstBatchLoss: (o.firstBatchLoss as number | null | undefined) ?? null,
    rows: rows as ReferenceResult["rows"],
  };
}

/**
 * Runs `python args…`: its stderr (progress) goes to `onLine` line by line as it comes; resolves with its exit
 * status, its stdout and the last line of its stderr (for a failure's one line).
 */
export function runReferenceScript(
  python: string,
  args: readonly string[],
  onLine: (line: string) => void,
): Promise<{ code: number | null; stdout: string; lastError: string }> {
  return new Promise((resolve) => {
    const child = spawn(python, args, { stdio: ["ignore", "pipe", "pipe"] });
    // a benchmark stopped from outside (`timeout`, Ctrl-C) ends the reference too, so that it does not keep the
    // GPU busy after this process is gone
    const stop = (signal: NodeJS.Signals): void => {
      child.kill("SIGTERM");
      process.exit(signal === "SIGINT" ? 130 : 143);
    };
    process.once("SIGTERM", stop);
    process.once("SIGINT", stop);
    const release = (): void => {
      process.removeListener("SIGTERM", stop);
      process.removeListener("SIGINT", stop);
    };
    let stdout = "";
    let pending = "";
    let lastError = "";
    child.stdout.setEncoding("utf8").on("data", (s: string) => {
      stdout += s;
    });
    child.stderr.setEncoding("utf8").on("data", (s: string) => {
      pending += s;
      const lines = pending.split("\n");
      pending = lines.pop()!;
      for (const l of lines) {
        if (l.trim() === "") continue;
        lastError = l.trim();
        onLine(l);
      }
    });
    child.on("error", (e) => {
      release();
      resolve({ code: null, stdout, lastError: errorMessage(e) });
    });
    child.on("close", (code) => {
      release();
      if (pending.trim() !== "") {
        lastError = pending.trim();
        onLine(pending);
      }
      resolve({ code, stdout, lastError });
    });
  });
}
