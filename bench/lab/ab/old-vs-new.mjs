// The restructured code (src/) against the code before it (.ab/old/src: a `git archive` of the old commit) in ONE
// process, alternating, so that the host's drift hits both sides alike: the Tree-LSTM on VPPS (fused cell, hidden 256, SST; sentences/s of
// chunks timed from the first graph build to the synchronize after the last batch) and the persistent RNN / LSTM
// 1152 at batch 4, T = 256 (runRnnBench: CUDA-event medians of 20 runs per round).
//   git archive <old commit> src bin package.json | tar -x -C .ab/old   (and echo /.ab/ >> .git/info/exclude)
//   node --import tsx bench/lab/ab/old-vs-new.mjs <SST train.txt> [rounds] [out.json]
import { writeFileSync } from "node:fs";

const root = new URL("../../../", import.meta.url);
const at = (p) => new URL(p, root).href;
const [data, roundsArg = "9", outFile] = process.argv.slice(2);
const ROUNDS = Number(roundsArg);
const CACHE = "/tmp/vk-ab";
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

async function side(name, dir) {
  const sst = await import(at(`${dir}/data/sst.ts`));
  const vocabMod = await import(at(`${dir}/data/vocab.ts`));
  const graph = await import(at(`${dir}/graph/graph.ts`));
  const model = await import(at(`${dir}/models/treelstm/model.ts`));
  const { Vpps } = await import(at(`${dir}/engines/vpps/vpps.ts`));
  const { runRnnBench } = await import(at(`${dir}/bench/rnn.ts`));
  const trees = sst.readTrees(data);
  const vocab = vocabMod.Vocabulary.fromTrees(trees);
  const net = new model.TreeLstmModel({ vocabSize: vocab.size, embed: 256, hidden: 256, cell: "fused", seed: 1 });
  const vpps = await Vpps.create(net.params, { cacheDir: CACHE, training: { learningRate: 0.05, clip: 5 } });
  const graphs = [new graph.ComputationGraph(), new graph.ComputationGraph(), new graph.ComputationGraph()];
  let next = 0;
  let k = 0;
  async function run(b, count) {
    const t0 = performance.now();
    for (let j = 0; j < count; j++) {
      const batch = [];
      for (let s = 0; s < b; s++) batch.push(trees[next++ % trees.length]);
      const cg = graphs[k++ % 3];
      cg.renew();
      vpps.fb(cg, net.buildBatchLoss(cg, batch, vocab));
    }
    const loss = await vpps.syncLatestLoss();
    if (!Number.isFinite(loss)) throw new Error(`${name}: loss ${loss}`);
    return (performance.now() - t0) / 1000;
  }
  const rnn = () =>
    runRnnBench({
      cells: ["rnn-tanh", "lstm"],
      hiddens: [1152],
      batches: [4],
      steps: 256,
      repeats: 20,
      precision: "fp32",
      device: 0,
    }).rows;
  return { name, vpps, run, rnn };
}

// AB_NEW_FIRST=1 creates (and so first warms, allocates and spawns the workers of) the new side first: a difference
// that follows the creation order rather than the code is the process's, not the restructuring's.
const sides = process.env.AB_NEW_FIRST
  ? [await side("new", "src"), await side("old", ".ab/old/src")]
  : [await side("old", ".ab/old/src"), await side("new", "src")];
const results = { vpps: [], rnn: {} };
for (const b of [1, 8, 128]) {
  for (const s of sides) await s.run(b, Math.max(5, Math.ceil(2048 / b)));
  const count = Math.max(32, Math.ceil(4096 / b));
  const rows = { old: [], new: [], ratio: [] };
  for (let r = 0; r < ROUNDS; r++) {
    const order = r % 2 === 0 ? sides : [...sides].reverse();
    const sps = {};
    for (const s of order) sps[s.name] = (b * count) / (await s.run(b, count));
    rows.old.push(sps.old);
    rows.new.push(sps.new);
    rows.ratio.push(sps.new / sps.old);
  }
  const row = {
    batch: b,
    oldMedian: median(rows.old),
    newMedian: median(rows.new),
    pairedRatioMedian: median(rows.ratio),
    ...rows,
  };
  results.vpps.push(row);
  console.log(
    `vpps batch ${b}: old ${row.oldMedian.toFixed(0)}, new ${row.newMedian.toFixed(0)} sentences/s; paired new/old ` +
      `${((row.pairedRatioMedian - 1) * 100).toFixed(1)}%`,
  );
}
for (const s of sides) s.vpps.dispose();
for (const s of sides) s.rnn(); // warm: compile both sides' kernels
const rr = {};
for (let r = 0; r < Math.min(ROUNDS, 5); r++) {
  const order = r % 2 === 0 ? sides : [...sides].reverse();
  for (const s of order) {
    for (const row of s.rnn()) {
      const key = `${row.cell} ${row.hidden} b${row.batch}`;
      rr[key] ??= { old: { rec: [], fwd: [], fb: [] }, new: { rec: [], fwd: [], fb: [] } };
      rr[key][s.name].rec.push(row.recurrentMs);
      rr[key][s.name].fwd.push(row.forwardMs);
      rr[key][s.name].fb.push(row.forwardBackwardMs);
    }
  }
}
for (const [key, v] of Object.entries(rr)) {
  const m = (side, f) => median(v[side][f]);
  results.rnn[key] = v;
  console.log(
    `${key}: recurrent old ${m("old", "rec").toFixed(3)} new ${m("new", "rec").toFixed(3)} ms ` +
      `(${((m("new", "rec") / m("old", "rec") - 1) * 100).toFixed(1)}%); forward ${m("old", "fwd").toFixed(3)} / ` +
      `${m("new", "fwd").toFixed(3)}; forward+backward ${m("old", "fb").toFixed(3)} / ${m("new", "fb").toFixed(3)}`,
  );
}
if (outFile)
  writeFileSync(
    outFile,
    `${JSON.stringify({ data, rounds: ROUNDS, created: sides.map((s) => s.name), results }, null, 2)}\n`,
  );
process.exit(0);
