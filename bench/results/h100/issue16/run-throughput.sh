#!/usr/bin/env bash
# Issue 16 on the GPU machine, one device call: the two GPU tests fixed after the first call, then training
# throughput of the six models on eager, autobatch (depth, agenda) and the PyTorch reference, one model at a time
# (`vpps bench <model> --reference`, batch 1, 8, 32, 128). Run from the repository root after `source .gpu/env.sh`.
set -u
mkdir -p "$OUT/bench"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/device.txt"
if [ -z "${SKIP_TESTS:-}" ]; then
  node --import tsx --test --test-reporter=spec --test-name-pattern="WikiNER|non-finite" \
    test/gpu/models-taggers.test.ts test/gpu/runs.test.ts > "$OUT/test-gpu-rerun.log" 2>&1
  echo "rerun exit $?" >> "$OUT/test-gpu-rerun.log"
  grep -E "^ℹ (tests|pass|fail)|rerun exit|refused|equal" "$OUT/test-gpu-rerun.log"
fi
for m in ${MODELS:-treelstm rvnn td-rnn td-lstm bilstm bilstm-char}; do
  case $m in bilstm*) D=.gpu-data/wikiner ;; *) D=.gpu-data/sst/train.txt ;; esac
  timeout "${PER_MODEL:-170}" node bin/vpps.js bench "$m" --data "$D" --engines eager,autobatch-depth,autobatch-agenda \
    --reference --out "$OUT/bench" > "$OUT/bench/$m.log" 2>&1
  echo "$m exit $?" | tee -a "$OUT/bench/$m.log"
  grep -E "^ *(batch|engine|eager|autobatch|pytorch|reference)" "$OUT/bench/$m.log" | head -20
done
# at most 8 files come back from a device call: the results travel as one archive
tar -czf "$OUT/bench.tar.gz" -C "$OUT" bench
