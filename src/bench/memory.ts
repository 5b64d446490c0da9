/** Device memory per engine, device-wide through the driver (cuMemGetInfo: total − free). */
import { type CudaDevice, type DeviceProperties, openDevice, type PoolStats } from "../cuda/index.js";

const MiB = 1024 * 1024;

/** What one engine held on the device, in MiB (see MemoryProbe). */
export interface MemoryRecord {
  /** Device-wide used memory (total − free) before the engine was created. */
  baselineMiB: number;
  /** The highest device-wide used memory sampled while it lived. */
  peakMiB: number;
  /** peakMiB − baselineMiB: what the engine added. */
  peakOverBaselineMiB: number;
  samples: number;
  /** The engine's DevicePool: its reservation, and the most of it in use at once. */
  poolCapacityMiB: number | null;
  poolPeakMiB: number | null;
}

/** Samples of device-wide used memory for one engine's lifetime. */
export class MemoryTrack {
  readonly baseline: number;
  private peak: number;
  private count = 0;

  constructor(private readonly used: () => number) {
    this.baseline = used();
    this.peak = this.baseline;
  }

  sample(): void {
    const u = this.used();
    this.count++;
    if (u > this.peak) this.peak = u;
  }

  record(pool: PoolStats | null): MemoryRecord {
    return {
      baselineMiB: this.baseline / MiB,
      peakMiB: this.peak / MiB,
      peakOverBaselineMiB: (this.peak - this.baseline) / MiB,
      samples: this.count,
      poolCapacityMiB: pool ? pool.capacityBytes / MiB : null,
      poolPeakMiB: pool ? pool.peakBytes / MiB : null,
    };
  }
}

/**
 * Device-wide used memory through the driver. It holds GPU 0's primary context for the whole run, so that the driver
 * can be asked between engines (each engine's own hold is released when it is disposed) and so that the context's
 * own memory is in every baseline rather than appearing and vanishing.
 */
export class MemoryProbe {
  private constructor(private readonly device: CudaDevice) {}

  /** Opens GPU 0 (the device the engines' default `auto` picks). */
  static open(): MemoryProbe {
    return new MemoryProbe(openDevice(0));
  }

  get deviceName(): string {
    return this.device.props.name;
  }

  get props(): DeviceProperties {
    return this.device.props;
  }

  usedBytes(): number {
    const { free, total } = this.device.memInfo();
    return total - free;
  }

  /** A track whose baseline is the used memory now. */
  track(): MemoryTrack {
    return new MemoryTrack(() => this.usedBytes());
  }

  close(): void {
    this.device.close();
  }
}
