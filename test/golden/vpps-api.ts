/**
 * What the VPPS golden test (test/vpps-golden.test.ts) needs from the source tree. Only this file follows the code
 * when it moves; the test and its recorded hashes (vpps-hashes.json) stay as they were written on the old code.
 */
export { syntheticTrees } from "../../src/data/synthetic.js";
export { Vocabulary } from "../../src/data/vocab.js";
export { H100_SXM } from "../../src/engines/vpps/device-model.js";
export { generateKernelSource, kernelName } from "../../src/engines/vpps/kernel-template.js";
export { createModelLayout } from "../../src/engines/vpps/layout.js";
export { enumeratePlans } from "../../src/engines/vpps/plan.js";
export { VppsScheduler } from "../../src/engines/vpps/schedule.js";
export { disassemble } from "../../src/engines/vpps/script.js";
export { ComputationGraph } from "../../src/graph/graph.js";
export { TreeLstmModel } from "../../src/models/treelstm.js";
