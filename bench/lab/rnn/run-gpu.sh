#!/usr/bin/env bash
# Everything the persistent RNNs need from the GPU machine in one call: the GPU tests, cuDNN through PyTorch and `vpps bench rnn`
# in the same call (same machine), packed into $OUT/rnn-results.tar.gz. With INSPECT=1 also the SASS summary of the
# tightest kernels and a warp-state profile. Knobs: TESTS=0, CUDNN=0, BENCH_ARGS, REPEATS; OLD=<dir> also times the
# code of another checkout (e.g. `git archive <commit> bin src package.json | tar -x -C <dir>`) in the same call,
# into $R/old/ (OLD_ARGS: its bench arguments, default BENCH_ARGS; OLD_ENV: environment settings for it, e.g.
# OLD=. OLD_ENV=VPPS_RNN_REPLICAS=1 times this checkout without replicas).
set -u
OUT="${OUT:-out-rnn}"
R="$OUT/rnn-results"
mkdir -p "$R"
nvidia-smi --query-gpu=name --format=csv,noheader > "$R/device.txt"
git rev-parse HEAD > "$R/commit.txt" 2>/dev/null || true
if [[ "${TESTS:-1}" == 1 ]]; then
  timeout 300 node --import tsx --test --test-reporter=spec test/gpu/rnn.test.ts > "$R/test-gpu-rnn.log" 2>&1
  echo "rc $?" >> "$R/test-gpu-rnn.log"
  grep -E "^ℹ (tests|pass|fail)|✖" "$R/test-gpu-rnn.log" | head -20
fi
if [[ "${INSPECT:-0}" == 1 ]]; then
  mkdir -p "$R/sass"
  for c in lstm:1152 rnn-tanh:2304 gru:1152; do node --import tsx bench/lab/rnn/source.ts "${c%%:*}" "${c##*:}" "$R/sass"; done
  for f in "$R"/sass/*.cu; do
    nvcc -arch=sm_90 -cubin -std=c++17 -o "${f%.cu}.cubin" "$f" 2>/dev/null && cuobjdump -sass "${f%.cu}.cubin" > "${f%.cu}.sass"
  done
  timeout 120 ncu --section WarpStateStats --section SchedulerStats -k regex:"rnn_(forward|backward)" -c 2 \
    node bin/vpps.js bench rnn --cells lstm --hidden 1152 --batch 4 --repeats 1 > "$R/ncu.txt" 2>&1
fi
ARGS=(${BENCH_ARGS:---cells rnn-tanh,lstm,gru --hidden 512,1152,1792,2304 --batch 1,4,16,64})
if [[ "${CUDNN:-1}" == 1 ]]; then
  timeout 240 python3 bench/pytorch/rnn.py bench "${ARGS[@]}" --repeats "${REPEATS:-20}" --out "$R/cudnn.jsonl" > "$R/cudnn.log" 2>&1
  echo "rc $?" >> "$R/cudnn.log"
fi
timeout 300 node bin/vpps.js bench rnn "${ARGS[@]}" --repeats "${REPEATS:-20}" \
  $( [[ -f "$R/cudnn.jsonl" ]] && echo --reference "$R/cudnn.jsonl" ) --out "$R" > "$R/bench.log" 2>&1
echo "rc $?" >> "$R/bench.log"
cat "$R/rnn.md" 2>/dev/null || tail -20 "$R/bench.log"
if [[ -n "${OLD:-}" ]]; then
  OARGS=(${OLD_ARGS:-${ARGS[*]}})
  timeout 300 env ${OLD_ENV:-} node "$OLD/bin/vpps.js" bench rnn "${OARGS[@]}" --repeats "${REPEATS:-20}" \
    $( [[ -f "$R/cudnn.jsonl" ]] && echo --reference "$R/cudnn.jsonl" ) --out "$R/old" > "$R/old.log" 2>&1
  echo "rc $?" >> "$R/old.log"
  cat "$R/old/rnn.md" 2>/dev/null || tail -5 "$R/old.log"
fi
tar -czf "$OUT/rnn-results.tar.gz" -C "$OUT" rnn-results
