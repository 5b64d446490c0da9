#!/usr/bin/env bash
# Issue 16 on the GPU machine, one device call: test:gpu in the background, the accuracy comparison (3 seeds each side,
# our autobatch engine vs the PyTorch references) in the foreground. Run from the repository root after
# `source .gpu/env.sh`, with the SST and WikiNER copies in .gpu-data/.
set -u
mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/device.txt"
(npm run test:gpu > "$OUT/test-gpu.log" 2>&1; echo "test:gpu exit $?" >> "$OUT/test-gpu.log") &
TESTS=$!
timeout "${ACC_TIMEOUT:-530}" python3 bench/pytorch/compare-accuracy.py --sst .gpu-data/sst --tagged .gpu-data/wikiner \
  --max-sentences "${MAX_SENTENCES:-2000}" -j "${JOBS:-12}" --out "$OUT/accuracy" > "$OUT/accuracy.log" 2>&1
echo "accuracy exit $?" >> "$OUT/accuracy.log"
tail -40 "$OUT/accuracy.log"
wait $TESTS
grep -E "^# (tests|pass|fail|skipped)|^not ok|test:gpu exit" "$OUT/test-gpu.log"
