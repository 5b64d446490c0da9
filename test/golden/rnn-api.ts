/**
 * What the persistent-RNN golden test (test/rnn-golden.test.ts) needs from the source tree. Only this file follows
 * the code when it moves; the test and its recorded hashes (rnn-hashes.json) stay as they were written.
 */

export { H100_SXM } from "../../src/cuda/hw/device-model.js";
export { backwardKernelSource, forwardKernelSource, stepwiseKernelSource } from "../../src/rnn/codegen/index.js";
export { rnnLayouts } from "../../src/rnn/plan/index.js";
export { RNN_CELLS } from "../../src/rnn/spec.js";
