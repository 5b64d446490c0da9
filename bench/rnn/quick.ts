// Runs `runRnnBench` with sizes from the command line (used on the GPU machine before `vpps bench rnn` existed).
import { runRnnBench } from "../../src/bench/rnn.js";
import type { RnnCellName } from "../../src/rnn/plan.js";

const arg = (name: string, def: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1]! : def;
};
const res = runRnnBench(
  {
    cells: arg("cells", "rnn-tanh,lstm,gru").split(",") as RnnCellName[],
    hiddens: arg("hidden", "512,1152,1792,2304").split(",").map(Number),
    batches: arg("batch", "4").split(",").map(Number),
    steps: Number(arg("steps", "256")),
    repeats: Number(arg("repeats", "20")),
    precision: arg("precision", "fp32") as "fp32",
    device: 0,
  },
  (l) => console.log(l),
);
console.log(JSON.stringify({ device: res.device, largest: res.largest }));
