/**
 * The host side of VPPS's overlap, free of CUDA so that it can be tested without a GPU: two slots (pinned script
 * buffer, loss and status words, events) alternate between batches, so the host builds batch k+1 while the GPU runs
 * batch k, and `fb` returns the loss of batch k−1 — the one batch that is certainly finished once k is queued behind
 * it on the stream. Also the decoding of the kernel's error word (kernel-static.ts, `report_error`).
 */
import { KERNEL_ERRORS, STATUS_WORDS } from "./kernel-static.js";

/** What the pipeline needs from the device, per slot (0 or 1). */
export interface SlotDevice {
  /** Blocks until the slot's last batch (its kernel and read-backs) has completed. */
  wait(slot: number): void;
  /** The slot's batch loss, valid after wait(). */
  loss(slot: number): number;
  /** The slot's `STATUS_WORDS` status words, valid after wait(). */
  status(slot: number): Int32Array;
  /** Called once per completed batch, after wait() (timings). */
  retired?(slot: number, batch: number): void;
}

/** A failure the kernel reported through its status words; the message names the processor and the barrier. */
export class VppsKernelError extends Error {
  override readonly name = "VppsKernelError";
  constructor(
    message: string,
    readonly code: number,
    /** The CTA (virtual processor) that reported it. */
    readonly processor: number,
    /** Barrier id for a timeout, else -1. */
    readonly barrier: number,
    readonly status: readonly number[],
  ) {
    super(message);
  }
}

/** Turns the kernel's status words into an error, or undefined when `status[0]` is 0 (no error). */
export function decodeKernelStatus(
  status: ArrayLike<number>,
  kernel: string,
  batch: number,
): VppsKernelError | undefined {
  const s = Array.from({ length: STATUS_WORDS }, (_, i) => status[i] ?? 0);
  const [code, cta, a, b, c, pc] = s as [number, number, number, number, number, number];
  if (code === 0) return undefined;
  const where = `kernel ${kernel}, batch ${batch}: processor (CTA) ${cta}`;
  switch (code) {
    case KERNEL_ERRORS.barrierTimeout:
      return new VppsKernelError(
        `VPPS ${where} timed out waiting on barrier ${a} at script word ${pc}: expected ${c} signals, saw ${b} ` +
          "(a processor failed earlier, the grid is not co-resident, or the schedule forgot a signal)",
        code,
        cta,
        a,
        s,
      );
    case KERNEL_ERRORS.badOpcode:
      return new VppsKernelError(`VPPS ${where} met unknown opcode ${a} at script word ${pc}`, code, cta, -1, s);
    case KERNEL_ERRORS.badLength:
      return new VppsKernelError(
        `VPPS ${where}: the instruction at script word ${pc} runs past the script or the staging chunk`,
        code,
        cta,
        -1,
        s,
      );
    case KERNEL_ERRORS.badMatrix:
      return new VppsKernelError(
        `VPPS ${where}: a matrix instruction at script word ${pc} names matrix ${a}, which this kernel does not hold`,
        code,
        cta,
        -1,
        s,
      );
    default:
      return new VppsKernelError(`VPPS ${where}: unknown error code ${code} (status ${s.join(",")})`, code, cta, -1, s);
  }
}

/** Double buffering of batches: which slot a batch fills, and whose loss `fb` returns. */
export class BatchPipeline {
  private readonly busy = [false, false];
  private readonly batchOf = [-1, -1];
  private submitted = 0;
  private latest = Number.NaN;
  private latestBatch = -1;

  constructor(
    private readonly device: SlotDevice,
    private readonly kernelName: () => string,
  ) {}

  /** Batches queued so far. */
  get batches(): number {
    return this.submitted;
  }

  /** The slot the next batch may fill; first waits for the batch that used it last (two batches ago). */
  begin(): number {
    const s = this.submitted % 2;
    if (this.busy[s]) this.retire(s);
    return s;
  }

  /**
   * Marks `slot`'s batch as queued and returns the loss of the batch before it, waiting for that one (which the
   * GPU finishes before it starts this one); NaN for the first batch.
   */
  end(slot: number): number {
    this.busy[slot] = true;
    this.batchOf[slot] = this.submitted++;
    const p = slot ^ 1;
    if (this.busy[p]) this.retire(p);
    return this.latestBatch === this.submitted - 2 ? this.latest : Number.NaN;
  }

  /** Waits for every queued batch and returns the loss of the last one (NaN when none ran). */
  drain(): number {
    const order = [0, 1].filter((s) => this.busy[s]).sort((a, b) => this.batchOf[a]! - this.batchOf[b]!);
    for (const s of order) this.retire(s);
    return this.latest;
  }

  private retire(s: number): void {
    this.busy[s] = false;
    this.device.wait(s);
    const batch = this.batchOf[s]!;
    const err = decodeKernelStatus(this.device.status(s), this.kernelName(), batch);
    if (err) throw err;
    this.device.retired?.(s, batch);
    this.latest = this.device.loss(s);
    this.latestBatch = batch;
  }
}
