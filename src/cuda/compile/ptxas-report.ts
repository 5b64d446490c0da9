/**
 * Spills of kernels that must keep their arrays in registers (VPPS, the persistent RNNs: the whole point is that
 * weights stay on chip, and a spill is silent otherwise). Two ways to see one: the resource report ptxas prints with
 * `-v` (nvcc `-Xptxas -v`, NVRTC `--ptxas-options=-v`), which the tests read, and the local memory a loaded kernel
 * uses (the driver's attribute), which the JIT checks with `checkNoSpills` before it runs anything.
 */
import { UserError } from "../../util/errors.js";

export interface PtxasFunctionReport {
  readonly name: string;
  readonly stackFrameBytes: number;
  readonly spillStoreBytes: number;
  readonly spillLoadBytes: number;
  readonly registers: number;
  readonly sharedBytes: number;
}

/** One entry per function whose properties the log reports, in order of appearance. */
export function parsePtxasReport(log: string): PtxasFunctionReport[] {
  const out: PtxasFunctionReport[] = [];
  let current: { name: string; stack?: number; stores?: number; loads?: number } | undefined;
  for (const line of log.split(/\r?\n/)) {
    const props = /Function properties for (\S+)/.exec(line);
    if (props) {
      current = { name: props[1]! };
      continue;
    }
    if (current === undefined) continue;
    const frame = /(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads/.exec(line);
    if (frame) {
      current.stack = Number(frame[1]);
      current.stores = Number(frame[2]);
      current.loads = Number(frame[3]);
      continue;
    }
    const used = /Used (\d+) registers(?:.*?(\d+) bytes smem)?/.exec(line);
    if (used) {
      out.push({
        name: current.name,
        stackFrameBytes: current.stack ?? 0,
        spillStoreBytes: current.stores ?? 0,
        spillLoadBytes: current.loads ?? 0,
        registers: Number(used[1]),
        sharedBytes: used[2] === undefined ? 0 : Number(used[2]),
      });
      current = undefined;
    }
  }
  return out;
}

/** Throws, naming the function and the bytes, if the report shows any spill or stack frame. */
export function assertNoSpills(report: PtxasFunctionReport): void {
  const { name, stackFrameBytes, spillStoreBytes, spillLoadBytes, registers } = report;
  if (stackFrameBytes > 0 || spillStoreBytes > 0 || spillLoadBytes > 0) {
    throw new Error(
      `${name}: expected 0 bytes of stack frame and spills (weights must stay in registers); ptxas reports ` +
        `${stackFrameBytes} bytes stack frame, ${spillStoreBytes} bytes spill stores, ${spillLoadBytes} bytes spill ` +
        `loads with ${registers} registers`,
    );
  }
}

/** A loaded kernel uses local memory: arrays that were meant to stay in registers spilled. */
export class KernelSpillError extends UserError {
  override readonly name = "KernelSpillError";
  constructor(
    message: string,
    readonly kernel: string,
    readonly registers: number,
    readonly localBytes: number,
  ) {
    super(message);
  }
}

/**
 * Refuses a loaded kernel that uses local memory (its `attributes()`: `localBytes` > 0 means register arrays or
 * spills went to local memory), naming the kernel, its registers per thread and its local bytes; `advice` says
 * what to do instead (default: give the kernel less to hold per thread).
 */
export function checkNoSpills(
  kernel: string,
  attributes: { readonly numRegs: number; readonly localBytes: number },
  advice = "give each thread less to hold in registers",
): void {
  const { numRegs, localBytes } = attributes;
  if (localBytes <= 0) return;
  throw new KernelSpillError(
    `${kernel}: uses ${localBytes} bytes of local memory per thread with ${numRegs} registers/thread; expected 0 ` +
      `(its arrays must stay in registers, and a spill makes every access a memory round trip): ${advice}`,
    kernel,
    numRegs,
    localBytes,
  );
}
