// The public API of vpps.
export { parseTrees, readTrees, TreeFormatError } from "./data/sst.js";
export { splitSynthetic, syntheticTrees } from "./data/synthetic.js";
export { formatTree, type TreeNode, treeHeight, treeSize, treeWords } from "./data/tree.js";
export { Vocabulary } from "./data/vocab.js";
export {
  CpuEngine,
  type CpuEngineOptions,
  createEngine,
  type Engine,
  EngineUnavailableError,
  isPipelined,
  type PipelinedEngine,
  ScheduleWorkerError,
  Vpps,
  VppsEngine,
  type VppsHostOptions,
  type VppsInstrumentOptions,
  type VppsOptions,
  type VppsTrainingOptions,
  type VppsVariantOptions,
} from "./engines/index.js";
export { VppsKernelError } from "./engines/vpps/runtime/pipeline.js";
export { ComputationGraph, Expression, type GraphParameter, Op, ShapeError } from "./graph/index.js";
export { type AnyParameter, type Init, LookupParameter, Parameter, ParameterCollection } from "./model/parameters.js";
export { loadParameters, saveParameters } from "./model/safetensors.js";
export { evaluateTreeLstm, type TrainTreeLstmConfig, trainTreeLstm } from "./models/train-treelstm.js";
export { type CellFormulation, TreeLstmModel, type TreeLstmOptions } from "./models/treelstm.js";
export * from "./ops/index.js";
export { AdamTrainer, makeTrainer, SimpleSGDTrainer, Trainer, type TrainerOptions } from "./train/trainers.js";
export { deriveKey, RandomStream, randomU32, randomUniform } from "./util/random.js";
