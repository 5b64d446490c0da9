/**
 * Profile-guided choice of the kernel variant (DESIGN §6.1: rpw has few valid values; compile them and let a short
 * profile of the first batches pick the fastest). While profiling, every batch runs on every variant (learning rate
 * 0 on all but the last, which trains), so that the variants are timed on the same batches: with different batches
 * per variant, one tree's shape decides, and at small batches the profile then kept variants measurably slower than
 * the best. The choice is made once every variant has run `batches` batches of at least `nodes` graph nodes in all,
 * and kept until `restart` (the fastest variant depends on the batch size and shape).
 */
import type { VariantInfo } from "../codegen/compile.js";

export interface ProfilerOptions {
  /** Batches every variant runs before the choice (the first is a warm-up and not counted). */
  readonly batches: number;
  /** Graph nodes the profiled batches must have at least, in all. */
  readonly nodes: number;
  readonly log: (line: string) => void;
}

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? Number.NaN : s[Math.floor((s.length - 1) / 2)]!;
}

export class VariantProfiler<V extends { readonly name: string; readonly info: VariantInfo }> {
  private chosenVariant: V | undefined;
  private batches = 0;
  private nodes = 0;
  /** Kernel ms of each variant's profiled batches, in order. */
  private readonly samples: Map<V, number[]>;

  constructor(
    readonly variants: readonly V[],
    private readonly o: ProfilerOptions,
  ) {
    if (variants.length === 0) throw new Error("VariantProfiler: no variant to choose from");
    this.samples = new Map(variants.map((v) => [v, []]));
    if (variants.length === 1) this.chosenVariant = variants[0];
  }

  /** The variant in use; undefined while profiling. */
  get chosen(): V | undefined {
    return this.chosenVariant;
  }

  /** A timed kernel of variant v has finished (counted while profiling). */
  sample(v: V, ms: number): void {
    if (this.chosenVariant === undefined) this.samples.get(v)?.push(ms);
  }

  /** A batch of `nodes` graph nodes was launched on every variant; true once the profile has enough to choose. */
  batchRan(nodes: number): boolean {
    this.batches++;
    this.nodes += nodes;
    return this.batches >= this.o.batches && this.nodes >= this.o.nodes;
  }

  /**
   * Ends the profile (every profiled batch has finished): the same batches ran on every variant, so their mean
   * kernel time (the first left out: warm-up) is what a variant costs; the least stays.
   */
  choose(): V {
    for (const x of this.variants) {
      const all = this.samples.get(x)!;
      const t = all.slice(1);
      x.info.profileMs = t.length > 0 ? t.reduce((a, b) => a + b, 0) / t.length : median(all);
    }
    const best = [...this.variants].sort((a, b) => a.info.profileMs! - b.info.profileMs!)[0]!;
    this.chosenVariant = best;
    this.o.log(
      `vpps: profile: ${this.variants.map((x) => `${x.name} ${x.info.profileMs!.toFixed(3)} ms`).join(", ")}; ` +
        `keeping ${best.name}`,
    );
    return best;
  }

  /** Profiles again from the next batch (the caller has let every queued batch finish). */
  restart(): void {
    if (this.variants.length < 2) return;
    this.chosenVariant = undefined;
    this.batches = 0;
    this.nodes = 0;
    for (const s of this.samples.values()) s.length = 0;
  }
}
