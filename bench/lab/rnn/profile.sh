#!/usr/bin/env bash
# Where the persistent RNN kernels' time goes, per configuration: Nsight Compute's warp-state, scheduler, throughput
# and source-level stall sections of one forward and one backward launch, for the cases given as cell:hidden:batch.
# Usage (GPU machine): OUT=... CASES="lstm:1152:16 rnn-tanh:1152:16" bash bench/lab/rnn/profile.sh
# KINDS="forward" profiles one kernel only; CLOCK=none runs at the clock the GPU picks (ncu locks it to base by
# default); the metrics give the SM clock, warp-level instructions, FFMAs (thread-level) and the issue rate.
set -u
OUT="${OUT:-out-rnn}"
P="$OUT/rnn-profile"
mkdir -p "$P"
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > "$P/device.txt"
METRICS=sm__cycles_elapsed.avg.per_second,sm__cycles_elapsed.max,smsp__inst_executed.sum,gpu__time_duration.sum
METRICS+=,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
for c in ${CASES:-lstm:1152:4 lstm:1152:16 rnn-tanh:1152:16 rnn-tanh:2304:16}; do
  IFS=: read -r cell hidden batch <<< "$c"
  for k in ${KINDS:-forward backward}; do
    timeout 150 ncu --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
      --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section SourceCounters \
      --section InstructionStats --clock-control "${CLOCK:-base}" --metrics "$METRICS" \
      -k "rnn_$k" -c 1 node bin/vpps.js bench rnn --cells "$cell" --hidden "$hidden" --batch "$batch" --repeats 1 \
      > "$P/$cell-$hidden-b$batch-$k.txt" 2>&1
  done
done
tar -czf "$OUT/rnn-profile.tar.gz" -C "$OUT" rnn-profile
