/**
 * The critical path of one VPPS launch, from the timeline a kernel rendered with `trace: true` records
 * (codegen/template.ts TRACE_SLOTS): per CTA the global time at which each instruction ended, and for each signal
 * the barrier's count before it. A wait for `count` signals was released by the signal that saw `count − 1`, so the
 * path can be followed back from the CTA that finished last, across processors, to the start: every nanosecond of
 * the launch's span is either an instruction on the path (its own time on its CTA), a barrier hop (from the
 * releasing signal to the end of the wait it released), or the weight loads at the start. Summed per label
 * ("matvec U_iou", "lstm.bwd", "hop", …), that says what the kernel is waiting for — which the per-opcode cycle
 * counters of profile.ts cannot: they sum over all CTAs, most of which are off the path.
 */
import { instructionWords, OPCODES, Opcode } from "../script/format.js";

/**
 * u64 words per CTA of a traced kernel's `profile` argument: [0] the CTA's start and [1] the end of its weight loads
 * (global ns), [2] how many instructions it ran, then per instruction (up to TRACE_SLOTS − 3 of them) the ns since
 * [1] at which it ended in the low 32 bits and, for a signal, the barrier's count before it in the high 32 bits.
 */
export const TRACE_SLOTS = 4096;

export interface TracePathItem {
  /** `matvec U_iou`, `lstm`, `hop` (signal → released wait), `wait` (a wait whose signal was already there), `load`. */
  readonly label: string;
  readonly ns: number;
  /** Instructions (or hops) with this label on the path. */
  readonly count: number;
  /** List entries of the matrix instructions with this label on the path (0 for other labels). */
  readonly entries: number;
}

export interface TraceAnalysis {
  /** From the first CTA's start to the last CTA's last instruction, ns. */
  readonly spanNs: number;
  /** The critical path, most time first; its items sum to `pathNs`. */
  readonly path: readonly TracePathItem[];
  /** From the start of the CTA the path begins on to the end of the launch (the span less that CTA's late start). */
  readonly pathNs: number;
  /** Barrier hops on the path. */
  readonly hops: number;
  /** The CTAs with the most time outside waits, most first (at most 5), and the mean over CTAs that ran. */
  readonly busiest: readonly { readonly cta: number; readonly busyNs: number }[];
  readonly meanBusyNs: number;
  /** The smallest nonzero step between two records of one CTA: the timer's resolution, as far as it shows. */
  readonly resolutionNs: number;
}

interface Ins {
  readonly op: number;
  readonly n: number;
  /** Operand word 1 (wait: count; list instructions: table offset) and 2 (list instructions: entries). */
  readonly a: number;
  readonly b: number;
}

/** The matrix list instructions (run by a matrix's holders; their count is the list's entries). */
function isList(op: number): boolean {
  return op === Opcode.MatVec || op === Opcode.MatVecBwd || op === Opcode.MatVecAcc;
}

/** Labels by opcode, with the matrix named for list instructions (names: plan matrices, then transposed copies). */
function labelOf(ins: Ins, matrices: readonly string[]): string {
  const m = OPCODES[ins.op]?.mnemonic ?? `op${ins.op}`;
  if (isList(ins.op)) return `${m} ${matrices[ins.n] ?? `m${ins.n}`}`;
  return m;
}

/** Each CTA's instructions in script order (up to and including `end`). */
function decode(script: Uint32Array, ctas: number): Ins[][] {
  const header = ctas + 1;
  const out: Ins[][] = [];
  for (let c = 0; c < ctas; c++) {
    const list: Ins[] = [];
    const end = header + script[c + 1]!;
    for (let at = header + script[c]!; at < end; at += instructionWords(script, at)) {
      const pre = script[at]!;
      list.push({ op: pre & 0xff, n: pre >>> 8, a: script[at + 1] ?? 0, b: script[at + 2] ?? 0 });
      if ((pre & 0xff) === Opcode.End) break;
    }
    out.push(list);
  }
  return out;
}

/**
 * Follows the critical path of the launch whose script is `script` (the batch's `BatchSchedule.script`) through its
 * trace `words` (`TRACE_SLOTS`·ctas u64 words as the kernel wrote them). `matrices` names the plan's matrices.
 */
export function analyzeKernelTrace(
  script: Uint32Array,
  ctas: number,
  words: BigUint64Array,
  slots: number,
  matrices: readonly string[],
): TraceAnalysis {
  if (words.length < ctas * slots) {
    throw new Error(`analyzeKernelTrace: ${words.length} trace words for ${ctas} CTAs of ${slots} slots`);
  }
  const code = decode(script, ctas);
  const begin = new Float64Array(ctas);
  const start = new Float64Array(ctas);
  const ends: Float64Array[] = [];
  const signals = new Map<string, { cta: number; k: number; t: number }>();
  let first = Number.POSITIVE_INFINITY;
  let last = Number.NEGATIVE_INFINITY;
  let lastCta = -1;
  let resolution = Number.POSITIVE_INFINITY;
  const busy: { cta: number; busyNs: number }[] = [];
  for (let c = 0; c < ctas; c++) {
    const base = c * slots;
    const ran = Number(words[base + 2]!);
    if (ran > slots - 3) {
      throw new Error(`analyzeKernelTrace: CTA ${c} ran ${ran} instructions; the trace holds ${slots - 3} per CTA`);
    }
    if (ran > code[c]!.length) {
      throw new Error(`analyzeKernelTrace: CTA ${c} ran ${ran} instructions; its script has ${code[c]!.length}`);
    }
    // times relative to the first CTA's start would lose nothing, but absolute ns exceed 2^53 only after 104 days
    begin[c] = Number(words[base]!);
    start[c] = Number(words[base + 1]!);
    first = Math.min(first, begin[c]!);
    const e = new Float64Array(ran);
    let prev = start[c]!;
    let b = 0;
    for (let k = 0; k < ran; k++) {
      const w = words[base + 3 + k]!;
      e[k] = start[c]! + Number(w & 0xffffffffn);
      const d = e[k]! - prev;
      if (d > 0 && d < resolution) resolution = d;
      const ins = code[c]![k]!;
      if (ins.op !== Opcode.Wait) b += d;
      if (ins.op === Opcode.Signal) signals.set(`${ins.n}:${Number(w >> 32n)}`, { cta: c, k, t: e[k]! });
      prev = e[k]!;
    }
    ends.push(e);
    if (ran > 0) {
      busy.push({ cta: c, busyNs: b });
      if (e[ran - 1]! > last) {
        last = e[ran - 1]!;
        lastCta = c;
      }
    }
  }
  if (lastCta < 0) throw new Error("analyzeKernelTrace: no CTA recorded an instruction");

  const items = new Map<string, { ns: number; count: number; entries: number }>();
  const add = (label: string, ns: number, entries = 0) => {
    const it = items.get(label) ?? { ns: 0, count: 0, entries: 0 };
    it.ns += ns;
    it.count += 1;
    it.entries += entries;
    items.set(label, it);
  };
  let c = lastCta;
  let k = ends[c]!.length - 1;
  let hops = 0;
  // every step moves to an earlier instruction or an earlier signal, so the walk ends
  while (k >= 0) {
    const e = ends[c]!;
    const ins = code[c]![k]!;
    const s = k > 0 ? e[k - 1]! : start[c]!;
    if (ins.op === Opcode.Wait) {
      // A run of consecutive waits is polled at once (the kernel groups them): the run ends with the latest of the
      // signals that release its waits; before that, the run stood still on that signal's processor.
      let k0 = k;
      while (k0 > 0 && code[c]![k0 - 1]!.op === Opcode.Wait) k0--;
      const s0 = k0 > 0 ? e[k0 - 1]! : start[c]!;
      let sig: { cta: number; k: number; t: number } | undefined;
      for (let j = k0; j <= k; j++) {
        const w = code[c]![j]!;
        const got = w.a > 0 ? signals.get(`${w.n}:${w.a - 1}`) : undefined;
        if (got !== undefined && (got.cta !== c || got.k < k0) && (sig === undefined || got.t > sig.t)) sig = got;
      }
      if (sig !== undefined && sig.t > s0) {
        add("hop", Math.max(0, e[k]! - sig.t));
        hops++;
        c = sig.cta;
        k = sig.k;
        continue;
      }
      add("wait", e[k]! - s0);
      k = k0 - 1;
      continue;
    } else {
      const list = isList(ins.op);
      add(labelOf(ins, matrices), e[k]! - s, list ? ins.b : 0);
    }
    k--;
  }
  add("load", start[c]! - begin[c]!);
  const path = [...items.entries()].map(([label, it]) => ({ label, ...it })).sort((x, y) => y.ns - x.ns);
  busy.sort((x, y) => y.busyNs - x.busyNs);
  return {
    spanNs: last - first,
    path,
    pathNs: last - begin[c]!,
    hops,
    busiest: busy.slice(0, 5),
    meanBusyNs: busy.reduce((s, x) => s + x.busyNs, 0) / busy.length,
    resolutionNs: Number.isFinite(resolution) ? resolution : 0,
  };
}

/** A few lines for a log: span, path share per label (above 1%), hops and the busiest CTAs. */
export function formatKernelTrace(a: TraceAnalysis): string {
  const us = (ns: number) => `${(ns / 1000).toFixed(1)} us`;
  const lines = [
    `launch span ${us(a.spanNs)}; critical path ${us(a.pathNs)} with ${a.hops} barrier hops ` +
      `(${a.hops > 0 ? us((a.path.find((p) => p.label === "hop")?.ns ?? 0) / a.hops) : "-"} each); ` +
      `timer steps >= ${a.resolutionNs} ns`,
  ];
  for (const p of a.path) {
    if (p.ns < 0.01 * a.pathNs) continue;
    const entries = p.entries > 0 ? `, ${p.entries} entries` : "";
    lines.push(
      `  ${p.label.padEnd(20)} ${((100 * p.ns) / a.pathNs).toFixed(1).padStart(5)}%  ${us(p.ns)} in ${p.count}${entries}`,
    );
  }
  lines.push(
    `busiest CTAs (time outside waits): ${a.busiest.map((b) => `${b.cta} ${us(b.busyNs)}`).join(", ")}; ` +
      `mean ${us(a.meanBusyNs)}`,
  );
  return lines.join("\n");
}
