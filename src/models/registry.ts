/**
 * The models vpps trains, by name: `vpps train | eval | plan <name>` and `vpps bench` are generated from this list.
 * A new model is one folder under src/models/ and one line here (docs/ADDING_A_MODEL.md).
 */
import { biLstmTask } from "./bilstm/task.js";
import { charBiLstmTask } from "./bilstm-char/task.js";
import { cnnTask } from "./cnn/task.js";
import { rvnnTask } from "./rvnn/task.js";
import type { AnyTask } from "./task.js";
import { tdLstmTask } from "./td-lstm/task.js";
import { tdRnnTask } from "./td-rnn/task.js";
import { treeLstmTask } from "./treelstm/task.js";

export const MODELS: readonly AnyTask[] = [
  treeLstmTask,
  biLstmTask,
  charBiLstmTask,
  tdRnnTask,
  tdLstmTask,
  rvnnTask,
  cnnTask as unknown as AnyTask,
];

/** The model named `name`; an unknown name is refused with the list of known ones. */
export function findModel(name: string): AnyTask {
  const task = MODELS.find((t) => t.name === name);
  if (!task) throw new Error(`unknown model '${name}'; choose one of ${MODELS.map((t) => t.name).join(", ")}`);
  return task;
}
