// Bindings to NVRTC (libnvrtc.so.*), the runtime CUDA C++ compiler, through koffi; and the compile error that
// carries the log, the options and the line-numbered source, so that a bad generated kernel can be read in place.

import type { LibraryHandle } from "koffi";
import { type LoadedLibrary, loadCudaLibrary } from "./find.js";

/** An nvrtcProgram handle. */
export type NvrtcProgram = bigint;

/** nvrtcResult names (nvrtc.h), for messages when nvrtcGetErrorString is unavailable (and for tests). */
export const NVRTC_RESULT_NAMES: Readonly<Record<number, string>> = {
  0: "NVRTC_SUCCESS",
  1: "NVRTC_ERROR_OUT_OF_MEMORY",
  2: "NVRTC_ERROR_PROGRAM_CREATION_FAILURE",
  3: "NVRTC_ERROR_INVALID_INPUT",
  4: "NVRTC_ERROR_INVALID_PROGRAM",
  5: "NVRTC_ERROR_INVALID_OPTION",
  6: "NVRTC_ERROR_COMPILATION",
  7: "NVRTC_ERROR_BUILTIN_OPERATION_FAILURE",
  8: "NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION",
  9: "NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION",
  10: "NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID",
  11: "NVRTC_ERROR_INTERNAL_ERROR",
};

const NVRTC_SUCCESS = 0;
const NVRTC_ERROR_COMPILATION = 6;

/** A failed NVRTC call other than a compile error: `nvrtcCreateProgram failed: NVRTC_ERROR_OUT_OF_MEMORY (1)`. */
export class NvrtcError extends Error {
  override readonly name = "NvrtcError";
  constructor(
    readonly call: string,
    readonly code: number,
    readonly codeName: string,
    readonly context?: string,
  ) {
    super(`${call} failed: ${codeName} (${code})${context ? ` — ${context}` : ""}`);
  }
}

// --- compile errors (pure: formatted and tested without NVRTC) ---

/** `  12 | text` for lines [from, to] (1-based, inclusive), marking `mark` with `>`. */
export function numberSourceLines(source: string, from = 1, to = Number.POSITIVE_INFINITY, mark?: number): string {
  const lines = source.split("\n");
  const last = Math.min(to, lines.length);
  const width = String(last).length;
  const out: string[] = [];
  for (let n = Math.max(1, from); n <= last; n++) {
    out.push(`${n === mark ? ">" : " "} ${String(n).padStart(width)} | ${lines[n - 1]}`);
  }
  return out.join("\n");
}

/**
 * The first line of `programName` that the log reports an error on. NVRTC writes `name(LINE): error: ...` (or
 * `catastrophic error`); errors inside headers name the header, so the program's own name is preferred.
 */
export function firstErrorLine(log: string, programName: string): number | undefined {
  let anyLine: number | undefined;
  for (const m of log.matchAll(/^(.*?)\((\d+)\): (?:catastrophic )?error/gm)) {
    const line = Number(m[2]);
    if (m[1] === programName) return line;
    anyLine ??= line;
  }
  return anyLine;
}

const CONTEXT_LINES = 4;
const LOG_LINES_IN_MESSAGE = 40;

export interface CompileFailure {
  programName: string;
  log: string;
  options: readonly string[];
  source: string;
}

/** The message of an NvrtcCompileError: the log, then the source around the first error line. */
export function formatCompileError({ programName, log, options, source }: CompileFailure): string {
  const logLines = log.trimEnd().split("\n");
  const shownLog =
    logLines.length > LOG_LINES_IN_MESSAGE
      ? [...logLines.slice(0, LOG_LINES_IN_MESSAGE), `... (${logLines.length - LOG_LINES_IN_MESSAGE} more log lines)`]
      : logLines;
  const parts = [
    `NVRTC could not compile ${programName} (options: ${options.length ? options.join(" ") : "none"}):`,
    shownLog.join("\n"),
  ];
  const line = firstErrorLine(log, programName);
  if (line !== undefined) {
    parts.push(`${programName} around line ${line}:`);
    parts.push(numberSourceLines(source, line - CONTEXT_LINES, line + CONTEXT_LINES, line));
  }
  return parts.join("\n");
}

/** A kernel that did not compile. `log` is NVRTC's full log; `numberedSource` the whole program with line numbers. */
export class NvrtcCompileError extends Error {
  override readonly name = "NvrtcCompileError";
  readonly programName: string;
  readonly log: string;
  readonly options: readonly string[];
  readonly source: string;
  /** The first line of the program that the log reports an error on, if any. */
  readonly line: number | undefined;

  constructor(failure: CompileFailure) {
    super(formatCompileError(failure));
    this.programName = failure.programName;
    this.log = failure.log;
    this.options = [...failure.options];
    this.source = failure.source;
    this.line = firstErrorLine(failure.log, failure.programName);
  }

  get numberedSource(): string {
    return numberSourceLines(this.source);
  }
}

// --- the C prototypes (nvrtc.h). nvrtcProgram is `void *`; out-parameters are one-element typed arrays. ---

interface RawNvrtc {
  nvrtcGetErrorString(result: number): string;
  nvrtcVersion(major: Int32Array, minor: Int32Array): number;
  nvrtcGetNumSupportedArchs(count: Int32Array): number;
  nvrtcGetSupportedArchs(archs: Int32Array): number;
  nvrtcCreateProgram(
    out: BigUint64Array,
    src: string,
    name: string,
    numHeaders: number,
    headers: string[] | null,
    includeNames: string[] | null,
  ): number;
  nvrtcDestroyProgram(prog: BigUint64Array): number;
  nvrtcCompileProgram: ((prog: NvrtcProgram, numOptions: number, options: string[] | null) => number) & {
    /** koffi: the same call on a libuv worker thread; the result comes to `done` on the main thread. */
    async(
      prog: NvrtcProgram,
      numOptions: number,
      options: string[] | null,
      done: (err: unknown, result: number) => void,
    ): void;
  };
  nvrtcGetProgramLogSize(prog: NvrtcProgram, size: BigUint64Array): number;
  nvrtcGetProgramLog(prog: NvrtcProgram, log: Uint8Array): number;
  nvrtcGetCUBINSize(prog: NvrtcProgram, size: BigUint64Array): number;
  nvrtcGetCUBIN(prog: NvrtcProgram, cubin: Uint8Array): number;
  nvrtcGetPTXSize(prog: NvrtcProgram, size: BigUint64Array): number;
  nvrtcGetPTX(prog: NvrtcProgram, ptx: Uint8Array): number;
  nvrtcAddNameExpression(prog: NvrtcProgram, nameExpression: string): number;
  nvrtcGetLoweredName(prog: NvrtcProgram, nameExpression: string, lowered: string[]): number;
}

const NVRTC_PROTOTYPES: Record<keyof RawNvrtc, string> = {
  nvrtcGetErrorString: "const char *nvrtcGetErrorString(int result)",
  nvrtcVersion: "int nvrtcVersion(int *major, int *minor)",
  nvrtcGetNumSupportedArchs: "int nvrtcGetNumSupportedArchs(int *numArchs)",
  nvrtcGetSupportedArchs: "int nvrtcGetSupportedArchs(int *supportedArchs)",
  nvrtcCreateProgram:
    "int nvrtcCreateProgram(void **prog, const char *src, const char *name, int numHeaders, " +
    "const char **headers, const char **includeNames)",
  nvrtcDestroyProgram: "int nvrtcDestroyProgram(void **prog)",
  nvrtcCompileProgram: "int nvrtcCompileProgram(void *prog, int numOptions, const char **options)",
  nvrtcGetProgramLogSize: "int nvrtcGetProgramLogSize(void *prog, size_t *logSizeRet)",
  nvrtcGetProgramLog: "int nvrtcGetProgramLog(void *prog, char *log)",
  nvrtcGetCUBINSize: "int nvrtcGetCUBINSize(void *prog, size_t *cubinSizeRet)",
  nvrtcGetCUBIN: "int nvrtcGetCUBIN(void *prog, char *cubin)",
  nvrtcGetPTXSize: "int nvrtcGetPTXSize(void *prog, size_t *ptxSizeRet)",
  nvrtcGetPTX: "int nvrtcGetPTX(void *prog, char *ptx)",
  nvrtcAddNameExpression: "int nvrtcAddNameExpression(void *prog, const char *nameExpression)",
  nvrtcGetLoweredName:
    "int nvrtcGetLoweredName(void *prog, const char *nameExpression, _Out_ const char **loweredName)",
};

function bindNvrtc(lib: LibraryHandle): RawNvrtc {
  const raw: Record<string, unknown> = {};
  for (const [key, prototype] of Object.entries(NVRTC_PROTOTYPES)) raw[key] = lib.func(prototype);
  return raw as unknown as RawNvrtc;
}

/** What to compile. Header names given in `headers` are found by `#include "name"`. */
export interface NvrtcSource {
  /** Program name, used by NVRTC in its log (`name(LINE): error`); by convention ends in `.cu`. */
  name: string;
  source: string;
  options?: readonly string[];
  headers?: Readonly<Record<string, string>>;
  /** Names (e.g. `kernel<4>`) whose mangled names are wanted back in `loweredNames`. */
  nameExpressions?: readonly string[];
}

export interface NvrtcOutput {
  /** SASS for one real architecture; present when the options name `sm_XX` (not `compute_XX`). */
  cubin: Uint8Array | undefined;
  ptx: string;
  log: string;
  loweredNames: Record<string, string>;
}

/** NVRTC with checked results. Obtain it with `getNvrtc()` (loads once). */
export class Nvrtc {
  private readonly raw: RawNvrtc;
  private readonly size = new BigUint64Array(1);
  private readonly handle = new BigUint64Array(1);

  constructor(readonly library: LoadedLibrary) {
    this.raw = bindNvrtc(library.handle);
  }

  /** Loads NVRTC. Throws CudaLibraryNotFoundError. */
  static load(): Nvrtc {
    return new Nvrtc(loadCudaLibrary("nvrtc"));
  }

  /** The library file in use (the mapped file when known, else the name that loaded). */
  get path(): string {
    return this.library.file ?? this.library.path;
  }

  errorName(code: number): string {
    const s = this.raw.nvrtcGetErrorString(code);
    return s || NVRTC_RESULT_NAMES[code] || `NVRTC_ERROR_${code}`;
  }

  private check(code: number, call: string, context?: () => string): void {
    if (code !== NVRTC_SUCCESS) throw new NvrtcError(call, code, this.errorName(code), context?.());
  }

  version(): { major: number; minor: number } {
    const major = new Int32Array(1);
    const minor = new Int32Array(1);
    this.check(this.raw.nvrtcVersion(major, minor), "nvrtcVersion");
    return { major: major[0]!, minor: minor[0]! };
  }

  /** The real architectures this NVRTC can emit SASS for, as numbers (`90` for sm_90). */
  supportedArchs(): number[] {
    const count = new Int32Array(1);
    this.check(this.raw.nvrtcGetNumSupportedArchs(count), "nvrtcGetNumSupportedArchs");
    const archs = new Int32Array(count[0]!);
    this.check(this.raw.nvrtcGetSupportedArchs(archs), "nvrtcGetSupportedArchs");
    return [...archs];
  }

  createProgram(src: NvrtcSource): NvrtcProgram {
    const names = Object.keys(src.headers ?? {});
    const bodies = names.map((n) => src.headers![n]!);
    this.check(
      this.raw.nvrtcCreateProgram(
        this.handle,
        src.source,
        src.name,
        names.length,
        names.length ? bodies : null,
        names.length ? names : null,
      ),
      "nvrtcCreateProgram",
      () => src.name,
    );
    return this.handle[0]!;
  }

  destroyProgram(prog: NvrtcProgram): void {
    this.check(this.raw.nvrtcDestroyProgram(new BigUint64Array([prog])), "nvrtcDestroyProgram");
  }

  /** Returns the raw result so that the caller can attach the log to a compile error. */
  compileProgram(prog: NvrtcProgram, options: readonly string[]): number {
    return this.raw.nvrtcCompileProgram(prog, options.length, options.length ? [...options] : null);
  }

  programLog(prog: NvrtcProgram): string {
    this.check(this.raw.nvrtcGetProgramLogSize(prog, this.size), "nvrtcGetProgramLogSize");
    const buf = new Uint8Array(Number(this.size[0]!));
    if (buf.length === 0) return "";
    this.check(this.raw.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog");
    return decodeCString(buf);
  }

  cubin(prog: NvrtcProgram): Uint8Array {
    this.check(this.raw.nvrtcGetCUBINSize(prog, this.size), "nvrtcGetCUBINSize");
    const buf = new Uint8Array(Number(this.size[0]!));
    this.check(this.raw.nvrtcGetCUBIN(prog, buf), "nvrtcGetCUBIN");
    return buf;
  }

  ptx(prog: NvrtcProgram): string {
    this.check(this.raw.nvrtcGetPTXSize(prog, this.size), "nvrtcGetPTXSize");
    const buf = new Uint8Array(Number(this.size[0]!));
    this.check(this.raw.nvrtcGetPTX(prog, buf), "nvrtcGetPTX");
    return decodeCString(buf);
  }

  addNameExpression(prog: NvrtcProgram, expression: string): void {
    this.check(this.raw.nvrtcAddNameExpression(prog, expression), "nvrtcAddNameExpression", () => expression);
  }

  loweredName(prog: NvrtcProgram, expression: string): string {
    const out: string[] = [""];
    this.check(this.raw.nvrtcGetLoweredName(prog, expression, out), "nvrtcGetLoweredName", () => expression);
    return out[0]!;
  }

  /**
   * Compiles one program. Throws NvrtcCompileError (log, options, numbered source) when the source does not compile.
   * The CUBIN is only produced for a real architecture (`--gpu-architecture=sm_90`), the PTX always.
   */
  compile(src: NvrtcSource): NvrtcOutput {
    const prog = this.prepare(src);
    try {
      return this.output(src, prog, this.compileProgram(prog, src.options ?? []));
    } finally {
      this.destroyProgram(prog);
    }
  }

  /**
   * `compile` with the compilation itself (nvrtcCompileProgram, seconds for a large kernel) on a libuv worker thread,
   * so that several programs compile at once and the event loop stays free. NVRTC allows concurrent compiles of
   * different programs.
   */
  async compileAsync(src: NvrtcSource): Promise<NvrtcOutput> {
    const prog = this.prepare(src);
    try {
      const options = src.options ?? [];
      const code = await new Promise<number>((resolve, reject) => {
        this.raw.nvrtcCompileProgram.async(prog, options.length, options.length ? [...options] : null, (err, r) =>
          err ? reject(err) : resolve(r),
        );
      });
      return this.output(src, prog, code);
    } finally {
      this.destroyProgram(prog);
    }
  }

  private prepare(src: NvrtcSource): NvrtcProgram {
    const prog = this.createProgram(src);
    try {
      for (const e of src.nameExpressions ?? []) this.addNameExpression(prog, e);
    } catch (e) {
      this.destroyProgram(prog);
      throw e;
    }
    return prog;
  }

  /** The result of nvrtcCompileProgram (`code`) as an NvrtcOutput, or the compile error with log and source. */
  private output(src: NvrtcSource, prog: NvrtcProgram, code: number): NvrtcOutput {
    const options = src.options ?? [];
    const log = this.programLog(prog);
    if (code === NVRTC_ERROR_COMPILATION) {
      throw new NvrtcCompileError({ programName: src.name, log, options, source: src.source });
    }
    this.check(code, "nvrtcCompileProgram", () => `${src.name}; log:\n${log}`);
    const realArch = options.some((o) => /(?:^|[=\s])sm_\d/.test(o));
    const loweredNames: Record<string, string> = {};
    for (const e of src.nameExpressions ?? []) loweredNames[e] = this.loweredName(prog, e);
    return { cubin: realArch ? this.cubin(prog) : undefined, ptx: this.ptx(prog), log, loweredNames };
  }
}

/** Text up to the first NUL (NVRTC's sizes count the terminator). */
function decodeCString(buf: Uint8Array): string {
  const end = buf.indexOf(0);
  return new TextDecoder().decode(end < 0 ? buf : buf.subarray(0, end));
}

let nvrtcInstance: Nvrtc | undefined;
let nvrtcFailure: Error | undefined;

/** The process-wide NVRTC, loaded on first use (a failure is remembered and rethrown). */
export function getNvrtc(): Nvrtc {
  if (nvrtcInstance) return nvrtcInstance;
  if (nvrtcFailure) throw nvrtcFailure;
  try {
    nvrtcInstance = Nvrtc.load();
    return nvrtcInstance;
  } catch (e) {
    nvrtcFailure = e instanceof Error ? e : new Error(String(e));
    throw nvrtcFailure;
  }
}
