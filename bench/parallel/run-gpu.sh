#!/usr/bin/env bash
# Issue 20 on a multi-GPU machine in one call: the 2-GPU tests, `vpps bench parallel` (one config at a time, each
# bounded), and PyTorch's golden RNN cases for test/rnn-pytorch.test.ts; everything packed into one tarball.
set -u
OUT="${OUT:-out-parallel}"
R="$OUT/parallel-results"
mkdir -p "$R"
nvidia-smi --query-gpu=name --format=csv,noheader > "$R/device.txt"
nvidia-smi topo -m > "$R/topo.txt" 2>&1
SST="${SST:-.gpu-data/sst}"
WIKI="${WIKI:-.gpu-data/wikiner}"
if [[ "${TESTS:-1}" == 1 ]]; then
  timeout 240 node --import tsx --test --test-reporter=spec test/gpu/parallel.test.ts > "$R/test-gpu-parallel.log" 2>&1
  echo "rc $?" >> "$R/test-gpu-parallel.log"
  grep -E "^ℹ (tests|pass|fail|skipped)|✖|skipping" "$R/test-gpu-parallel.log" | head
fi
for c in ${CONFIGS:-treelstm-vpps treelstm-autobatch bilstm-autobatch}; do
  timeout "${BENCH_TIMEOUT:-150}" node bin/vpps.js bench parallel --configs "$c" --gpus "${GPUS:-1,2}" \
    --batches "${BATCHES:-32,128}" --repeats "${REPEATS:-2}" --data-treelstm "$SST" --data-bilstm "$WIKI" --out "$R" \
    > "$R/bench-$c.log" 2>&1
  echo "rc $?" >> "$R/bench-$c.log"
  tail -12 "$R/bench-$c.log"
done
if [[ "${GOLDEN:-1}" == 1 ]]; then
  timeout 60 python3 bench/pytorch/rnn.py golden --out "$R/rnn-pytorch.json" > "$R/golden.log" 2>&1
  echo "rc $?" >> "$R/golden.log"
fi
tar -czf "$OUT/parallel-results.tar.gz" -C "$OUT" parallel-results
