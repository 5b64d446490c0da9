#!/usr/bin/env bash
# Data parallelism on a multi-GPU machine in one call: the 2-GPU tests, `vpps bench parallel` (one config at a time, each
# bounded), and PyTorch's golden RNN cases for test/rnn-pytorch.test.ts; everything packed into one tarball.
#
# ONLY=vpps-trace: just the Tree-LSTM on VPPS — the timeline runs below, then `vpps bench parallel --configs
# treelstm-vpps` — without the tests and the golden cases (each of TESTS, GOLDEN, CONFIGS, TRACE still overrides).
# TRACE_RUNS (default "plain group1 gpus2"; gpusN runs N GPUs) picks the traced runs.
# TRACE=1: `vpps train treelstm --engine vpps` with VPPS_DP_TRACE=1 at each per-GPU batch of TRACE_BATCHES on one GPU
# (plain, then as the only rank of a group: WORLD_SIZE=1) and on 2 GPUs; each rank prints, per epoch, the median
# per-step host time of each phase (src/engines/vpps/instrument/host-trace.ts). Logs: $R/trace-vpps-b<B>-<run>.log.
# SHUFFLE=batches: every benchmark run with `--shuffle batches` (fixed batches; default examples).
set -u
OUT="${OUT:-out-parallel}"
R="$OUT/parallel-results"
mkdir -p "$R"
nvidia-smi --query-gpu=name --format=csv,noheader > "$R/device.txt"
nvidia-smi topo -m > "$R/topo.txt" 2>&1
{ nproc; lscpu; numactl -H 2>/dev/null; } > "$R/cpu.txt" 2>&1
SST="${SST:-.gpu-data/sst}"
WIKI="${WIKI:-.gpu-data/wikiner}"
if [[ "${ONLY:-}" == vpps-trace ]]; then
  TESTS="${TESTS:-0}" GOLDEN="${GOLDEN:-0}" CONFIGS="${CONFIGS:-treelstm-vpps}" TRACE="${TRACE:-1}"
fi
if [[ "${TESTS:-1}" == 1 ]]; then
  timeout 240 node --import tsx --test --test-reporter=spec test/gpu/parallel.test.ts > "$R/test-gpu-parallel.log" 2>&1
  echo "rc $?" >> "$R/test-gpu-parallel.log"
  grep -E "^ℹ (tests|pass|fail|skipped)|✖|skipping" "$R/test-gpu-parallel.log" | head
fi
if [[ "${TRACE:-0}" == 1 ]]; then
  for b in ${TRACE_BATCHES:-32 128}; do
    for run in ${TRACE_RUNS:-plain group1 gpus2}; do
      log="$R/trace-vpps-b$b-$run"
      env=(VPPS_DP_TRACE=1)
      gpus=1
      [[ $run == group1 ]] && env+=(RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$((29400 + b)))
      [[ $run == gpus* ]] && gpus=${run#gpus}
      env "${env[@]}" timeout "${TRACE_TIMEOUT:-150}" node bin/vpps.js train treelstm --engine vpps --gpus "$gpus" \
        --batch $((b * gpus)) --epochs "${TRACE_EPOCHS:-3}" --data "$SST" --seed 1 --json > "$log.json" 2> "$log.log"
      echo "rc $?" >> "$log.log"
      echo "== batch $b/GPU, $run: $(node -e 'const r=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8"));console.log((r.epochs??[]).map((e)=>Math.round(e.sentencesPerSecond)).join(" ")+" sent/s per epoch")' "$log.json" 2>/dev/null)"
      grep -E "host trace|^rc" "$log.log" | tail -4
    done
  done
fi
for c in ${CONFIGS:-treelstm-vpps treelstm-autobatch bilstm-autobatch}; do
  timeout "${BENCH_TIMEOUT:-150}" node bin/vpps.js bench parallel --configs "$c" --gpus "${GPUS:-1,2}" \
    --batches "${BATCHES:-32,128}" --repeats "${REPEATS:-2}" --data-treelstm "$SST" --data-bilstm "$WIKI" --out "$R" \
    --shuffle "${SHUFFLE:-examples}" > "$R/bench-$c.log" 2>&1
  echo "rc $?" >> "$R/bench-$c.log"
  tail -12 "$R/bench-$c.log"
done
if [[ "${GOLDEN:-1}" == 1 ]]; then
  timeout 60 python3 bench/pytorch/rnn.py golden --out "$R/rnn-pytorch.json" > "$R/golden.log" 2>&1
  echo "rc $?" >> "$R/golden.log"
fi
tar -czf "$OUT/parallel-results.tar.gz" -C "$OUT" parallel-results
