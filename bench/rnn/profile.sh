#!/usr/bin/env bash
# Where the persistent RNN kernels' time goes, per configuration: Nsight Compute's warp-state, scheduler, throughput
# and source-level stall sections of one forward and one backward launch, for the cases given as cell:hidden:batch.
# Usage (GPU machine): OUT=... CASES="lstm:1152:16 rnn-tanh:1152:16" bash bench/rnn/profile.sh
set -u
OUT="${OUT:-out-rnn}"
P="$OUT/rnn-profile"
mkdir -p "$P"
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > "$P/device.txt"
for c in ${CASES:-lstm:1152:4 lstm:1152:16 rnn-tanh:1152:16 rnn-tanh:2304:16}; do
  IFS=: read -r cell hidden batch <<< "$c"
  for k in forward backward; do
    timeout 150 ncu --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
      --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section SourceCounters \
      -k "rnn_$k" -c 1 node bin/vpps.js bench rnn --cells "$cell" --hidden "$hidden" --batch "$batch" --repeats 1 \
      > "$P/$cell-$hidden-b$batch-$k.txt" 2>&1
  done
done
tar -czf "$OUT/rnn-profile.tar.gz" -C "$OUT" rnn-profile
