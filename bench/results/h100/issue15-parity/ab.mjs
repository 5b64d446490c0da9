// Old (be88246, unpacked into old/) and new VPPS in ONE process, alternating chunks of batches, so that the host
// CPU's drift (±25% within minutes on these VMs) hits both sides alike. Each side has its own modules (graph,
// model, data, engine) and its own Vpps instance over the same weights (same seed), sharing one kernel cache; a
// chunk is timed from its first graph build to the synchronize after its last batch.
//
//   node --import tsx bench/results/h100/issue15-parity/ab.mjs <SST train.txt> [rounds (default 15)] [out.json]
//
// Prints per batch size the median sentences/s of each side over the rounds and the median of the paired
// (same round) ratios new/old.
import { writeFileSync } from "node:fs";

const root = new URL("../../../../", import.meta.url);
const at = (p) => new URL(p, root).href;

const [data = ".gpu-data/sst/train.txt", roundsArg = "15", outFile] = process.argv.slice(2);
const ROUNDS = Number(roundsArg);
const BATCHES = [1, 8, 128];
const CACHE = "/tmp/vk-ab";

async function side(name, dir, create) {
  const sst = await import(at(`${dir}/data/sst.ts`));
  const vocabMod = await import(at(`${dir}/data/vocab.ts`));
  const graph = await import(at(`${dir}/graph/graph.ts`));
  const model = await import(at(`${dir}/models/${name === "old" ? "treelstm.ts" : "treelstm/model.ts"}`));
  const trees = sst.readTrees(data);
  const vocab = vocabMod.Vocabulary.fromTrees(trees);
  const net = new model.TreeLstmModel({ vocabSize: vocab.size, embed: 256, hidden: 256, cell: "fused", seed: 1 });
  const vpps = await create(net.params);
  const graphs = [new graph.ComputationGraph(), new graph.ComputationGraph(), new graph.ComputationGraph()];
  let next = 0;
  let k = 0;
  /** Trains `count` batches of `b` trees (the data's trees in order, cycling); returns the wall seconds. */
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
  return { name, vpps, run };
}

const oldSide = await side("old", "old/src", async (params) => {
  const { Vpps } = await import(at("old/src/engines/vpps/engine.ts"));
  return Vpps.create(params, { cacheDir: CACHE, learningRate: 0.05, clip: 5 });
});
const newSide = await side("new", "src", async (params) => {
  const { Vpps } = await import(at("src/engines/vpps/vpps.ts"));
  return Vpps.create(params, { cacheDir: CACHE, training: { learningRate: 0.05, clip: 5 } });
});
const sides = [oldSide, newSide];
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

const results = [];
for (const b of BATCHES) {
  // warm-up: profile-guided rpw settles on a variant and V8 optimises both sides' host code
  for (const s of sides) await s.run(b, Math.max(5, Math.ceil(2048 / b)));
  const count = Math.max(32, Math.ceil(4096 / b));
  const rows = { old: [], new: [], ratio: [] };
  for (let r = 0; r < ROUNDS; r++) {
    // alternate which side goes first, so neither always follows the other
    const order = r % 2 === 0 ? sides : [...sides].reverse();
    const sps = {};
    for (const s of order) sps[s.name] = (b * count) / (await s.run(b, count));
    rows.old.push(sps.old);
    rows.new.push(sps.new);
    rows.ratio.push(sps.new / sps.old);
  }
  const row = {
    batch: b,
    sentencesPerChunk: b * count,
    rounds: ROUNDS,
    oldMedian: median(rows.old),
    newMedian: median(rows.new),
    pairedRatioMedian: median(rows.ratio),
    old: rows.old,
    new: rows.new,
  };
  results.push(row);
  console.log(
    `batch ${b}: old ${row.oldMedian.toFixed(0)}, new ${row.newMedian.toFixed(0)} sentences/s (medians of ${ROUNDS}); ` +
      `paired new/old median ${((row.pairedRatioMedian - 1) * 100).toFixed(1)}%; ` +
      `old ${rows.old.map((x) => x.toFixed(0)).join(" ")} | new ${rows.new.map((x) => x.toFixed(0)).join(" ")}`,
  );
}
for (const s of sides) s.vpps.dispose();
if (outFile) writeFileSync(outFile, `${JSON.stringify({ data, results }, null, 2)}\n`);
