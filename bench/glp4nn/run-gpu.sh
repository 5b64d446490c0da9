#!/usr/bin/env bash
# Issue 19 (GLP4NN) on the GPU machine, everything in one device call, results packed into ONE tarball,
# $OUT/glp4nn-results.tar.gz (logs, JSON, markdown, SVGs). Run from the repository root (after `source .gpu/env.sh`
# where the lead's setup needs it):
#
#   bash bench/glp4nn/run-gpu.sh
#
# Parts (PARTS, default all, in this order; each under its own timeout, a failing part does not stop the others):
#   tests  the GLP4NN GPU tests: test/gpu/{glp4nn,streams,conv,cnn}.test.ts                       (TESTS_TIMEOUT 240 s)
#   torch  bench/pytorch/conv_layers.py: cuDNN's batched convolution, the 16 layers, fp32 and TF32  (TORCH_TIMEOUT 120 s)
#   bench  vpps bench glp4nn --explain: Table 5 × {direct, graph} × {1, GLP4NN, 2…32}; Tree-LSTM  (BENCH_TIMEOUT 300 s)
#   train  vpps train cnn on MNIST, eager, --streams auto: the accuracy for the README          (TRAIN_TIMEOUT 240 s)
# BENCH_ARGS adds options to the benchmark (e.g. "--quick", "--pools 2,4,8,16,32", "--layers CaffeNet").
# TRAIN_ARGS replaces the training options (default: --epochs 1). Whole run with the defaults: about 8–9 minutes; use
# PARTS="tests torch bench" and PARTS="train" for two calls if the ten-minute limit is near.
set -u
PARTS="${PARTS:-tests torch bench train}"
R="$(mktemp -d)/glp4nn-results"
mkdir -p "$R" "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/device.txt"
git rev-parse HEAD > "$R/commit.txt" 2>/dev/null || echo "(no git here)" > "$R/commit.txt"
echo "CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-(default 8)}" >> "$R/device.txt"
has() { case " $PARTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

if has tests; then
  T="test/gpu/glp4nn.test.ts test/gpu/streams.test.ts test/gpu/conv.test.ts"
  [ -f test/gpu/cnn.test.ts ] && T="$T test/gpu/cnn.test.ts"
  timeout "${TESTS_TIMEOUT:-240}" node --import tsx --test --test-reporter=spec $T > "$R/test-gpu.log" 2>&1
  echo "tests exit $?" | tee -a "$R/test-gpu.log"
  grep -E "^ℹ (tests|pass|fail|skipped|todo)|^✖|not ok|tests exit" "$R/test-gpu.log" | head -30
fi

if has torch; then
  timeout "${TORCH_TIMEOUT:-120}" python3 bench/pytorch/conv_layers.py --out "$R/conv_layers.json" > "$R/conv_layers.log" 2>&1
  echo "torch exit $?" | tee -a "$R/conv_layers.log"
  tail -20 "$R/conv_layers.log"
fi

if has bench; then
  # shellcheck disable=SC2086
  timeout "${BENCH_TIMEOUT:-300}" node bin/vpps.js bench glp4nn --explain --out "$R/bench" ${BENCH_ARGS:-} > "$R/bench.log" 2>&1
  echo "bench exit $?" | tee -a "$R/bench.log"
  grep -E "stream .* ms|Tree-LSTM|within 5%|bench exit|vpps:" "$R/bench.log" | head -60
fi

if has train; then
  if node bin/vpps.js train --help 2>/dev/null | grep -q cnn || node bin/vpps.js train cnn --help > /dev/null 2>&1; then
    # shellcheck disable=SC2086
    timeout "${TRAIN_TIMEOUT:-240}" node bin/vpps.js train cnn --engine eager --streams auto --explain \
      --run-dir "$R/cnn-run" ${TRAIN_ARGS:---epochs 1} > "$R/train-cnn.log" 2>&1
    echo "train exit $?" | tee -a "$R/train-cnn.log"
    tail -15 "$R/train-cnn.log"
  else
    echo "train: vpps train cnn is not in this checkout; skipped" | tee "$R/train-cnn.log"
  fi
fi

tar -czf "$OUT/glp4nn-results.tar.gz" -C "$(dirname "$R")" glp4nn-results
ls -la "$OUT"
