// The exhaustive nvcc sweep of the spill retry (`npm run test:sweeps`; .ci/run runs it after `npm test`): the first
// variant at the paper's sizes of every model but `npm test`'s sample (test/vpps-spill-retry.test.ts compiles the
// BiLSTM tagger with characters, the tightest), so the two together compile each of the six models once. About
// 30 seconds on 2 cores (a translation unit per core).

import { describeSpillRetryCompile, paperPlans, SPILL_RETRY_SAMPLE } from "../vpps-spill-nvcc.js";

describeSpillRetryCompile(
  "every model at the paper's sizes compiles without spills after the retry (nvcc -Xptxas -v): the sweep",
  paperPlans()
    .map((p) => p.model)
    .filter((m) => m !== SPILL_RETRY_SAMPLE),
);
