/** RvNN's registry entry: SST trees (or the synthetic tree task), root accuracy, hidden = embedding = 512. */
import { rootTask } from "../shared/root-task.js";
import { SST_TREES, TREE_WORDS } from "../shared/sst-data.js";
import { RvnnModel, rvnnParameterShapes } from "./model.js";

export const rvnnTask = rootTask({
  name: "rvnn",
  title: "RvNN",
  description: "the recursive NN over the parse tree, untied leaf and internal weights, an MLP on the root",
  data: SST_TREES,
  vocabulary: TREE_WORDS,
  defaults: { hidden: 512, embed: 512 },
  create: (o, vocabSize, seed) => new RvnnModel({ vocabSize, hidden: o.hidden, embed: o.embed, seed }),
  parameterShapes: (o, vocabSize) => rvnnParameterShapes({ vocabSize, hidden: o.hidden, embed: o.embed }),
});
