/** TD-RNN's registry entry: SST sentences (or the synthetic task's), root accuracy, hidden = embedding = 512. */
import { rootTask } from "../shared/root-task.js";
import { SENTENCE_WORDS, SST_SENTENCES } from "../shared/sst-data.js";
import { TdRnnModel, tdRnnParameterShapes } from "./model.js";

export const tdRnnTask = rootTask({
  name: "td-rnn",
  title: "TD-RNN",
  description: "the TD-RNN sentence model: a pyramid of tanh compositions over adjacent words, an MLP on its top",
  data: SST_SENTENCES,
  vocabulary: SENTENCE_WORDS,
  defaults: { hidden: 512, embed: 512 },
  create: (o, vocabSize, seed) => new TdRnnModel({ vocabSize, hidden: o.hidden, embed: o.embed, seed }),
  parameterShapes: (o, vocabSize) => tdRnnParameterShapes({ vocabSize, hidden: o.hidden, embed: o.embed }),
});
