// The exhaustive nvcc sweep of the VPPS Tree-LSTM kernels (`npm run test:sweeps`; .ci/run runs it after `npm test`):
// every kernel of test/vpps-nvcc.ts that `npm test`'s sample (test/vpps-codegen.test.ts) does not compile, so the two
// together compile every plan once. About 140 CPU seconds of nvcc (two translation units at once: about 1.5 minutes
// on 2 cores).

import { describeTreeLstmCompile, treeLstmKernels } from "../vpps-nvcc.js";

describeTreeLstmCompile(
  "VPPS kernels compile for sm_90 without spills (nvcc -Xptxas -v): the sweep",
  "every other Tree-LSTM plan (H 128/256/512, E 128/256, every valid rpw and CTAs/SM, the tightest transposed per H)",
  treeLstmKernels().filter((k) => !k.sample),
);
