// The exhaustive nvcc sweep of the sparse persistent kernels (`npm run test:sweeps`; .ci/run runs it after `npm test`):
// every case of test/rnn-sparse-nvcc.ts that `npm test`'s sample (test/rnn-sparse-kernels.test.ts) does not compile,
// and the ladder's other builds, so the two together compile each once. About 30 seconds on 2 cores (a case's builds
// at once, one per core).

import { describeSparseCompile, sparseNvccCases } from "../rnn-sparse-nvcc.js";

describeSparseCompile(
  "sparse kernels under nvcc: no stack, no spill (the sweep)",
  sparseNvccCases().filter((c) => !c.sample),
  true,
);
