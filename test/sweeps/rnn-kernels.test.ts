// The exhaustive nvcc sweep of the persistent RNN kernels (`npm run test:sweeps`; .ci/run runs it after `npm test`):
// every configuration of test/rnn-nvcc.ts that `npm test`'s sample (test/rnn-kernels.test.ts) does not compile, so
// the two together compile each once. About 160 CPU seconds of nvcc, a case's four builds at once, one per core (about a minute on 2 cores).

import { describeRnnCompile, rnnNvccCases } from "../rnn-nvcc.js";

describeRnnCompile(
  "the tightest persistent RNN kernels under nvcc: the sweep",
  rnnNvccCases().filter((c) => !c.sample),
);
