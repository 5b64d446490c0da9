#!/usr/bin/env bash
# Everything issue 18 needs from the GPU machine in one call: the GPU tests, the benchmark against cuDNN, and (with
# INSPECT=1) the SASS of the tightest kernels and a warp-state profile. Writes logs under $OUT (default ./out-rnn).
set -u
OUT="${OUT:-out-rnn}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/device.txt"
if [[ "${TESTS:-1}" == 1 ]]; then
  timeout 300 node --import tsx --test --test-reporter=spec test/gpu/rnn.test.ts > "$OUT/rnn-test.log" 2>&1
  echo "rc $?" >> "$OUT/rnn-test.log"
  tail -14 "$OUT/rnn-test.log"
fi
if [[ "${INSPECT:-0}" == 1 ]]; then
  mkdir -p "$OUT/sass"
  for c in lstm:1152 rnn-tanh:2304 gru:1152; do
    node --import tsx bench/rnn/source.ts "${c%%:*}" "${c##*:}" "$OUT/sass"
  done
  for f in "$OUT"/sass/*.cu; do
    nvcc -arch=sm_90 -cubin -std=c++17 -o "${f%.cu}.cubin" "$f" 2>/dev/null
    cuobjdump -sass "${f%.cu}.cubin" > "${f%.cu}.sass"
    echo "$(basename "$f"): LDG $(grep -c 'LDG' "${f%.cu}.sass") LDGSTS $(grep -c LDGSTS "${f%.cu}.sass") FFMA $(grep -c FFMA "${f%.cu}.sass") LDS $(grep -c 'LDS' "${f%.cu}.sass") BAR $(grep -c 'BAR' "${f%.cu}.sass")"
  done | tee "$OUT/sass-summary.txt"
  timeout 120 ncu --section WarpStateStats --section SchedulerStats -k regex:"rnn_(forward|backward)" -c 2 \
    node --import tsx bench/rnn/quick.ts --cells lstm --hidden 1152 --repeats 1 > "$OUT/ncu.txt" 2>&1
  grep -E "Stall|Warp Cycles|Issued|Eligible|rnn_" "$OUT/ncu.txt" | head -40
fi
timeout 240 node --import tsx bench/rnn/quick.ts --repeats "${REPEATS:-10}" ${BENCH_ARGS:-} > "$OUT/bench.log" 2>&1
echo "rc $?" >> "$OUT/bench.log"
cut -c1-330 "$OUT/bench.log"
