/**
 * The host side of VPPS's overlap, free of CUDA so that it can be tested without a GPU: a ring of slots (pinned
 * script buffer, loss and status words, events) that batches fill in turn, so the host builds and queues later
 * batches while the GPU runs earlier ones. Queuing never waits for the GPU unless every slot is still in flight;
 * finished batches are retired (status checked, loss taken) in order whenever the host comes by, and `fb` returns
 * the loss of the newest one. (With two slots and a wait for the previous batch at every launch, as before, a host
 * that launched two batches in one `fb` — schedule workers hand scripts back in bursts — blocked for a whole
 * kernel per batch.) Also the decoding of the kernel's status words (src/codegen/grid-barrier.ts and
 * codegen/interpreter.ts KERNEL_ERRORS).
 */
import { barrierTimeoutMessage, PersistentKernelError, readStatusError } from "../../../codegen/grid-barrier.js";
import { KERNEL_ERRORS } from "../codegen/interpreter.js";
import { PIPELINE_SLOTS } from "../options.js";

export { PIPELINE_SLOTS };

/** What the pipeline needs from the device, per slot. */
export interface SlotDevice {
  /** Blocks until the slot's last batch (its kernel and read-backs) has completed. */
  wait(slot: number): void;
  /** Whether the slot's last batch has completed, without waiting. */
  done(slot: number): boolean;
  /** The slot's batch loss, valid after wait(). */
  loss(slot: number): number;
  /** The slot's `STATUS_WORDS` status words, valid after wait(). */
  status(slot: number): Int32Array;
  /** Called once per completed batch, after wait() (timings). */
  retired?(slot: number, batch: number): void;
}

/** A failure the VPPS kernel reported through its status words; the message names the processor and the barrier. */
export class VppsKernelError extends PersistentKernelError {
  override readonly name = "VppsKernelError";
}

/** Turns the kernel's status words into an error, or undefined when `status[0]` is 0 (no error). */
export function decodeKernelStatus(
  status: ArrayLike<number>,
  kernel: string,
  batch: number,
): VppsKernelError | undefined {
  const e = readStatusError(status);
  if (e === undefined) return undefined;
  const { code, cta, a, b, c, pc, words: s } = e;
  const where = `kernel ${kernel}, batch ${batch}: processor (CTA) ${cta}`;
  switch (code) {
    case KERNEL_ERRORS.barrierTimeout:
      return new VppsKernelError(`VPPS ${where} ${barrierTimeoutMessage(e, `script word ${pc}`)}`, code, cta, a, s);
    case KERNEL_ERRORS.badOpcode:
      return new VppsKernelError(`VPPS ${where} met unknown opcode ${a} at script word ${pc}`, code, cta, -1, s);
    case KERNEL_ERRORS.badLength:
      return new VppsKernelError(
        a === 0 && b === 0 && c === 0
          ? `VPPS ${where}: the instruction at script word ${pc} runs past the script or the staging chunk`
          : `VPPS ${where}: the tile instruction at script word ${pc} is out of range: ${a} entries, ` +
              `first row ${b}, first column ${c} (limits: script/format.ts TILE and the matrix's shape)`,
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

/** Batches in flight: which slot a batch fills, when the host must wait, and whose loss `fb` returns. */
export class BatchPipeline {
  private readonly busy: boolean[];
  private readonly batchOf: number[];
  /** Busy slots, oldest first (a ring of `slots` entries starting at `head`). */
  private readonly queue: number[];
  private head = 0;
  private queued = 0;
  private submitted = 0;
  private latest = Number.NaN;
  /**
   * Called once per retired batch, in queuing order, with its number and loss (after its status was checked: a
   * batch whose kernel failed throws instead). For callers that need every batch's loss, not only the newest.
   */
  onRetired: ((batch: number, loss: number) => void) | undefined;

  constructor(
    private readonly device: SlotDevice,
    private readonly kernelName: () => string,
    readonly slots: number = PIPELINE_SLOTS,
  ) {
    if (!Number.isInteger(slots) || slots < 2) throw new RangeError(`BatchPipeline: slots must be >= 2; got ${slots}`);
    this.busy = new Array<boolean>(slots).fill(false);
    this.batchOf = new Array<number>(slots).fill(-1);
    this.queue = new Array<number>(slots).fill(-1);
  }

  /** Batches queued so far. */
  get batches(): number {
    return this.submitted;
  }

  /** The slot the next batch may fill; waits only when it still holds a batch (every slot in flight). */
  begin(): number {
    const s = this.submitted % this.slots;
    // slots are filled in turn, so a busy slot is the oldest in flight: everything before it is retired already
    while (this.busy[s]) this.retireOldest();
    return s;
  }

  /**
   * Marks `slot`'s batch as queued, retires every earlier batch that has finished (without waiting), and returns
   * the loss of the newest retired batch: NaN until one has finished.
   */
  end(slot: number): number {
    this.busy[slot] = true;
    this.batchOf[slot] = this.submitted++;
    this.queue[(this.head + this.queued) % this.slots] = slot;
    this.queued++;
    while (this.queued > 0 && this.device.done(this.queue[this.head]!)) this.retireOldest();
    return this.latest;
  }

  /** Waits for every queued batch and returns the loss of the last one (NaN when none ran). */
  drain(): number {
    while (this.queued > 0) this.retireOldest();
    return this.latest;
  }

  private retireOldest(): void {
    const s = this.queue[this.head]!;
    this.head = (this.head + 1) % this.slots;
    this.queued--;
    this.busy[s] = false;
    this.device.wait(s);
    const batch = this.batchOf[s]!;
    const err = decodeKernelStatus(this.device.status(s), this.kernelName(), batch);
    if (err) throw err;
    this.device.retired?.(s, batch);
    this.latest = this.device.loss(s);
    this.onRetired?.(batch, this.latest);
  }
}
