/**
 * Reads the resource report ptxas prints with `-v` (nvcc `-Xptxas -v`, NVRTC `--ptxas-options=-v`), so that tests
 * and the JIT can refuse a VPPS kernel whose register arrays fell to local memory: the whole point of VPPS is that
 * weights stay in registers, and a spill is silent otherwise.
 */

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
