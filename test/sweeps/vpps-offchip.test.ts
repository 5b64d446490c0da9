// The exhaustive nvcc sweep of the VPPS kernels with matrices off chip (`npm run test:sweeps`; .ci/run runs it after
// `npm test`): every kernel of test/vpps-offchip-nvcc.ts that `npm test`'s sample (test/vpps-offchip.test.ts) does
// not compile, so the two together compile each once. About 30 seconds on 2 cores (a translation unit per core).

import { describeTreeLstmCompile } from "../vpps-nvcc.js";
import { offChipKernels } from "../vpps-offchip-nvcc.js";

describeTreeLstmCompile(
  "VPPS kernels with matrices off chip compile for sm_90 without spills (nvcc -Xptxas -v): the sweep",
  "every other variant of Tree-LSTM 1024/1024 and 1536/256 (default placement) and 256/256 all off chip",
  offChipKernels().filter((k) => !k.sample),
);
