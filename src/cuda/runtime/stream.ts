// Streams and events. Timings in vpps come from events recorded on the stream (not host clocks), so that they
// measure the GPU's work and not the launch latency of the host.

import { type CudaDriver, EventFlags, getDriver, type Handle, NULL_STREAM, StreamFlags } from "../ffi/driver.js";

/** A CUDA stream. `CudaStream.null()` is the legacy default stream, which needs no creation or destruction. */
export class CudaStream {
  private destroyed = false;

  private constructor(
    readonly driver: CudaDriver,
    readonly handle: Handle,
    private readonly owned: boolean,
  ) {}

  /** A new stream; `nonBlocking` ones do not synchronise with the default stream. */
  static create(options: { nonBlocking?: boolean } = {}, driver: CudaDriver = getDriver()): CudaStream {
    const flags = options.nonBlocking ? StreamFlags.NonBlocking : StreamFlags.Default;
    return new CudaStream(driver, driver.streamCreate(flags), true);
  }

  /** A stream created elsewhere (another thread's, by its handle); destroy() leaves it alone. */
  static wrap(handle: Handle, driver: CudaDriver = getDriver()): CudaStream {
    return new CudaStream(driver, handle, false);
  }

  static null(driver: CudaDriver = getDriver()): CudaStream {
    return new CudaStream(driver, NULL_STREAM, false);
  }

  synchronize(): void {
    this.driver.streamSynchronize(this.handle);
  }

  /** Future work on this stream waits for the event's last record. */
  wait(event: CudaEvent): void {
    this.driver.streamWaitEvent(this.handle, event.handle);
  }

  destroy(): void {
    if (!this.owned || this.destroyed) return;
    this.destroyed = true;
    this.driver.streamDestroy(this.handle);
  }
}

/** A CUDA event, for ordering between streams and for timing. */
export class CudaEvent {
  private destroyed = false;

  private constructor(
    readonly driver: CudaDriver,
    readonly handle: Handle,
  ) {}

  /** `timing: false` makes record/wait cheaper where no elapsed time is read; `blockingSync` yields the CPU. */
  static create(
    options: { timing?: boolean; blockingSync?: boolean } = {},
    driver: CudaDriver = getDriver(),
  ): CudaEvent {
    let flags = EventFlags.Default as number;
    if (options.timing === false) flags |= EventFlags.DisableTiming;
    if (options.blockingSync) flags |= EventFlags.BlockingSync;
    return new CudaEvent(driver, driver.eventCreate(flags));
  }

  /** Captures the work queued so far on `stream` (the default stream when omitted). */
  record(stream?: CudaStream): this {
    this.driver.eventRecord(this.handle, stream ? stream.handle : NULL_STREAM);
    return this;
  }

  synchronize(): void {
    this.driver.eventSynchronize(this.handle);
  }

  /** True when the recorded work has completed. */
  query(): boolean {
    return this.driver.eventQuery(this.handle);
  }

  /** Milliseconds from `start` to this event; both must be recorded and this one completed (synchronize first). */
  elapsedMsSince(start: CudaEvent): number {
    return this.driver.eventElapsedMs(start.handle, this.handle);
  }

  /** Milliseconds between two events, after waiting for `end`. */
  static elapsedMs(start: CudaEvent, end: CudaEvent): number {
    end.synchronize();
    return end.elapsedMsSince(start);
  }

  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    this.driver.eventDestroy(this.handle);
  }
}
