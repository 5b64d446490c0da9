/**
 * What the VPPS golden test (test/vpps-golden.test.ts) needs from the source tree. Only this file follows the code
 * when it moves; the test and its recorded hashes (vpps-hashes.json) stay as they were written on the old code.
 */

export { H100_SXM } from "../../src/cuda/hw/device-model.js";
export { syntheticTrees } from "../../src/data/synthetic.js";
export { Vocabulary } from "../../src/data/vocab.js";
export { generateKernelSource, kernelName } from "../../src/engines/vpps/codegen/template.js";
export { createModelLayout } from "../../src/engines/vpps/plan/layout.js";
export { enumeratePlans } from "../../src/engines/vpps/plan/plan.js";
export { VppsScheduler } from "../../src/engines/vpps/schedule/scheduler.js";
export { disassemble } from "../../src/engines/vpps/script/disassemble.js";
export { ComputationGraph } from "../../src/graph/graph.js";
export { TreeLstmModel } from "../../src/models/treelstm/model.js";
