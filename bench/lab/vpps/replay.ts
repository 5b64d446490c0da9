/**
 * A latency replay of VPPS scripts on the CPU: a MODEL of the kernel's critical path, not a measurement. It schedules
 * batches of the six dynamic models (their `vpps bench <model>` data and default size, the default plan for an
 * H100) and replays each script with fixed costs: every instruction INS µs, a list FWD (forward) or BWD (backward) µs
 * per entry on top, a tile TILE µs, a signal SIG µs, and a wait that blocks resumes HOP µs after the last signal it
 * needs. It prints, per model and batch size, the modelled kernel µs, the barrier hops on the critical path (the
 * waits that blocked along it), the waits in the script and how many of them are covered (their processor has
 * already synchronised with every signal they count, through earlier waits: removing them changes nothing).
 *
 *   node --import tsx bench/lab/vpps/replay.ts
 *   BASE=/path/to/other/checkout node --import tsx bench/lab/vpps/replay.ts    # the same batches on another scheduler
 *
 * Environment: MODELS (default all six), SIZES (default 1,8,128), BATCHES (per size, default 8), HOP, INS, FWD, BWD,
 * TILE, SIG (µs; defaults 1.0, 0.3, 0.3, 0.8, 1.0, 0.2: the list costs are the journal's H100 Tree-LSTM figures).
 * Calibration: for the Tree-LSTM at hidden 256 the defaults give 162 / 345 µs at batch 1 / 8 against measured kernels
 * of 185 / 461 µs (H100, docs/journal/vpps.md, e460425); at batch 128 they give 0.6 ms against 2.2 ms (tiles and
 * bandwidth are not modelled). Use it to rank scheduler changes before a GPU run, never to report speed.
 */
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { benchModel } from "../../../src/bench/models/index.js";
import { H100_SXM } from "../../../src/cuda/hw/device-model.js";
import { createModelLayout } from "../../../src/engines/vpps/plan/layout.js";
import { planVpps } from "../../../src/engines/vpps/plan/plan.js";
import { VppsScheduler } from "../../../src/engines/vpps/schedule/scheduler.js";
import { waitCoverage } from "../../../src/engines/vpps/script/coverage.js";
import { instructionWords, Opcode } from "../../../src/engines/vpps/script/format.js";
import { ComputationGraph } from "../../../src/graph/graph.js";
import { onChipMatrices } from "../../../src/model/parameters.js";

const env = process.env;
const num = (k: string, d: number) => Number(env[k] ?? d);
const COST = { hop: num("HOP", 1), ins: num("INS", 0.3), fwd: num("FWD", 0.3), bwd: num("BWD", 0.8) };
const TILE_US = num("TILE", 1);
const SIG_US = num("SIG", 0.2);
const models = (env["MODELS"] ?? "treelstm,bilstm,bilstm-char,td-rnn,td-lstm,rvnn").split(",");
const sizes = (env["SIZES"] ?? "1,8,128").split(",").map(Number);
const batches = num("BATCHES", 8);
const base = env["BASE"];

type SchedulerClass = typeof VppsScheduler;
const schedulers: { name: string; S: SchedulerClass }[] = [{ name: "this", S: VppsScheduler }];
if (base !== undefined) {
  const url = pathToFileURL(join(resolve(base), "src/engines/vpps/schedule/scheduler.ts")).href;
  schedulers.push({ name: "base", S: ((await import(url)) as { VppsScheduler: SchedulerClass }).VppsScheduler });
}

interface Replayed {
  us: number;
  hops: number;
  waits: number;
  covered: number;
}

for (const name of models) {
  const bm = benchModel(name);
  const task = bm.load(undefined, 2000);
  const net = task.net(bm.sizes[0]!, bm.variants[0]!.name);
  const plan = planVpps(onChipMatrices(net.params), H100_SXM);
  for (const { name: who, S } of schedulers) {
    const layoutOf = base !== undefined && who === "base" ? await baseLayout() : createModelLayout;
    const sched = new S(layoutOf(net.params.all, plan), {});
    const cells: string[] = [];
    for (const size of sizes) {
      const sum: Replayed = { us: 0, hops: 0, waits: 0, covered: 0 };
      for (let k = 0; k < batches; k++) {
        const cg = new ComputationGraph();
        const r = replay(sched.schedule(cg, net.batchLoss(cg, task.batch(size, k))).script, plan.ctas);
        sum.us += r.us;
        sum.hops += r.hops;
        sum.waits += r.waits;
        sum.covered += r.covered;
      }
      const m = (x: number) => (x / batches).toFixed(0);
      cells.push(`b${size}: ${m(sum.us)} µs, ${m(sum.hops)} hops, ${m(sum.waits)} waits (${m(sum.covered)} covered)`);
    }
    console.log(`${name.padEnd(11)} ${who.padEnd(4)} ${cells.join(" | ")}`);
  }
}

async function baseLayout(): Promise<typeof createModelLayout> {
  const url = pathToFileURL(join(resolve(base!), "src/engines/vpps/plan/layout.ts")).href;
  return ((await import(url)) as { createModelLayout: typeof createModelLayout }).createModelLayout;
}

/**
 * Replays one script: processors run in turn until each blocks on a wait whose signals have not all been given;
 * time and the hop count follow the latest signal a wait needed. Covered waits: script/coverage.ts.
 */
function replay(script: Uint32Array, ctas: number): Replayed {
  const header = ctas + 1;
  const pc = Int32Array.from({ length: ctas }, (_, c) => header + script[c]!);
  const t = new Float64Array(ctas);
  const hops = new Int32Array(ctas);
  const given = new Map<number, { t: number; hops: number; count: number }>();
  for (let moved = true; moved; ) {
    moved = false;
    for (let c = 0; c < ctas; c++) {
      for (const end = header + script[c + 1]!; pc[c]! < end; ) {
        const at = pc[c]!;
        const code = script[at]! & 0xff;
        const n = script[at]! >>> 8;
        if (code === Opcode.Wait) {
          const g = given.get(n);
          if (g === undefined || g.count < script[at + 1]!) break;
          if (g.t + COST.hop > t[c]!) {
            t[c] = g.t + COST.hop;
            hops[c] = g.hops + 1;
          }
        } else if (code === Opcode.Signal) {
          t[c]! += SIG_US;
          const g = given.get(n) ?? { t: 0, hops: 0, count: 0 };
          g.count++;
          if (t[c]! > g.t) {
            g.t = t[c]!;
            g.hops = hops[c]!;
          }
          given.set(n, g);
        } else t[c]! += cost(code, script[at + 2]!);
        pc[c] = at + instructionWords(script, at);
        moved = true;
      }
    }
  }
  const waits = waitCoverage(script, ctas);
  let last = 0;
  for (let c = 1; c < ctas; c++) if (t[c]! > t[last]!) last = c;
  return { us: t[last]!, hops: hops[last]!, waits: waits.length, covered: waits.filter((w) => w.covered).length };
}

/** Modelled µs of one instruction (`count`: a list's entries). */
function cost(code: Opcode, count: number): number {
  switch (code) {
    case Opcode.MatVec:
    case Opcode.MatVecAcc:
      return COST.ins + COST.fwd * count;
    case Opcode.MatVecBwd:
      return COST.ins + COST.bwd * count;
    case Opcode.Tile:
    case Opcode.TileAcc:
    case Opcode.TileXbar:
    case Opcode.TileWbar:
      return TILE_US;
    default:
      return COST.ins;
  }
}
