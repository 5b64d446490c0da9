/** TD-LSTM's registry entry: SST sentences (or the synthetic task's), root accuracy, hidden = embedding = 256. */
import { rootTask } from "../shared/root-task.js";
import { SENTENCE_WORDS, SST_SENTENCES } from "../shared/sst-data.js";
import { TdLstmModel, tdLstmParameterShapes } from "./model.js";

export const tdLstmTask = rootTask({
  name: "td-lstm",
  title: "TD-LSTM",
  description: "the TD-LSTM sentence model: the TD-RNN's pyramid with the binary Tree-LSTM cell",
  data: SST_SENTENCES,
  vocabulary: SENTENCE_WORDS,
  defaults: { hidden: 256, embed: 256 },
  create: (o, vocabSize, seed) => new TdLstmModel({ vocabSize, hidden: o.hidden, embed: o.embed, seed }),
  parameterShapes: (o, vocabSize) => tdLstmParameterShapes({ vocabSize, hidden: o.hidden, embed: o.embed }),
});
