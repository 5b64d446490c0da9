// The public API of vpps.

export { CudaDeviceError, CudaError, DevicePoolOutOfMemory } from "./cuda/index.js";
export { parseTrees, readTrees, TreeFormatError } from "./data/sst.js";
export { splitSynthetic, syntheticTrees } from "./data/synthetic.js";
export { splitSyntheticTagged, syntheticTaggedSentences } from "./data/synthetic-tagged.js";
export { parseTagged, readTagged, TaggedFormatError, type TaggedSentence, TagSet } from "./data/tagged.js";
export { fnv1a32, loadTaggedSplits, splitBySeed, splitPart } from "./data/tagged-split.js";
export { formatTree, type TreeNode, treeHeight, treeSize, treeWords } from "./data/tree.js";
export { Vocabulary } from "./data/vocab.js";
export {
  CpuEngine,
  type CpuEngineOptions,
  type CreateEngineOptions,
  createEngine,
  createEvaluationEngine,
  ENGINES,
  type Engine,
  type EngineCapabilities,
  type EngineEntry,
  EngineUnavailableError,
  ForwardPasses,
  isPipelined,
  type PipelinedEngine,
  ScheduleWorkerError,
  Vpps,
  VppsEngine,
  type VppsHostOptions,
  type VppsInstrumentOptions,
  type VppsOptions,
  VppsPlanError,
  type VppsTrainingOptions,
  type VppsVariantOptions,
} from "./engines/index.js";
export { VppsKernelError } from "./engines/vpps/index.js";
export {
  CollectionMismatchError,
  ComputationGraph,
  Expression,
  type GraphParameter,
  Op,
  ShapeError,
} from "./graph/index.js";
export {
  type AnyParameter,
  type Init,
  LookupParameter,
  type MatrixShape,
  onChipMatrices,
  Parameter,
  ParameterCollection,
  type ParameterShape,
} from "./model/parameters.js";
export { CheckpointError, loadParameters, saveParameters } from "./model/safetensors.js";
export {
  BiLstmTagger,
  type BiLstmTaggerOptions,
  type EncodedSentence,
  type SpelledSentence,
} from "./models/bilstm/model.js";
export { biLstmTask, type TaggerOptions, TaggerTaskModel } from "./models/bilstm/task.js";
export { TaggerVocabulary } from "./models/bilstm/vocabulary.js";
export { CharBiLstmTagger, type CharTaggerOptions } from "./models/bilstm-char/model.js";
export { type CharTaggerTaskOptions, charBiLstmTask } from "./models/bilstm-char/task.js";
export { entities, entityF1, labelAccuracy, tokenAccuracy } from "./models/metrics.js";
export { findModel, MODELS } from "./models/registry.js";
export { RvnnModel, type RvnnOptions } from "./models/rvnn/model.js";
export { rvnnTask } from "./models/rvnn/task.js";
export { RootLabelHead } from "./models/shared/root-head.js";
export { type RootModel, RootTaskModel, type SentenceModelOptions } from "./models/shared/root-task.js";
export { type Sentence, sentenceOf } from "./models/shared/sst-data.js";
export type {
  AnyTask,
  Dataset,
  Metric,
  ModelOption,
  ModelOptions,
  Task,
  TaskData,
  TaskModel,
  TaskVocabulary,
} from "./models/task.js";
export { TdLstmModel, type TdLstmOptions } from "./models/td-lstm/model.js";
export { tdLstmTask } from "./models/td-lstm/task.js";
export { TdRnnModel, type TdRnnOptions } from "./models/td-rnn/model.js";
export { tdRnnTask } from "./models/td-rnn/task.js";
export { type CellFormulation, TreeLstmModel, type TreeLstmOptions } from "./models/treelstm/model.js";
export { type TreeLstmTaskOptions, treeLstmTask } from "./models/treelstm/task.js";
export * from "./ops/index.js";
export {
  AdamTrainer,
  makeTrainer,
  NonFiniteUpdateError,
  SimpleSGDTrainer,
  Trainer,
  type TrainerOptions,
} from "./optim/trainers.js";
export {
  CpuRnnBackend,
  type PackedSequence,
  PersistentRnn,
  type PersistentRnnOptions,
  packSequences,
  permuteStates,
  pruneRecurrent,
  RNN_CELLS,
  RNN_PRECISIONS,
  RNN_PRUNINGS,
  RnnArgumentError,
  type RnnBackend,
  type RnnCell,
  type RnnPrecision,
  type RnnPruning,
  type RnnSpec,
  recurrentFlopsPerStep,
  recurrentMaskCounts,
  rnnParameterLayout,
  sortByLength,
  unpackSequences,
  type WeightMask,
} from "./rnn/index.js";
export { isRunError, RUN_ERRORS, RunDirError, TrainingDivergedError } from "./train/errors.js";
export { evaluate, predict } from "./train/evaluate.js";
export { type EpochResult, type TrainConfig, type TrainProgress, type TrainSummary, train } from "./train/loop.js";
export type { RunSettings, RunState } from "./train/run-state.js";
export { evaluateTreeLstm, type TrainTreeLstmConfig, trainTreeLstm } from "./train/treelstm.js";
export { deriveKey, RandomStream, randomU32, randomUniform } from "./util/random.js";
