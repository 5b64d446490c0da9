#!/usr/bin/env bash
# VPPS Tree-LSTM data-parallel training over SST with the host trace on (VPPS_DP_TRACE=1) and timed all-reduces, at
# per-GPU batch B (default 128) on each GPU count in GPUS (default "1 2 4"), fixed batches (`--shuffle batches`):
# each rank prints, per epoch, its median step phases and per batch its GPU busy time, the all-reduces' and update's
# time after the kernel (the wait for the slowest rank included) and the GPU's idle time before the batch.
# Logs: $OUT/dp-trace/g<N>.{json,log}.   source .gpu/env.sh && OUT=$OUT bash bench/lab/vpps/dp-trace.sh
set -u
OUT="${OUT:-out-dp-trace}"
R="$OUT/dp-trace"
mkdir -p "$R"
B="${B:-128}"
for g in ${GPUS:-1 2 4}; do
  VPPS_DP_TRACE=1 VPPS_TIME_ALLREDUCE=1 timeout "${RUN_TIMEOUT:-150}" node bin/vpps.js train treelstm --engine vpps \
    --gpus "$g" --batch $((B * g)) --epochs "${EPOCHS:-4}" --data "${SST:-.gpu-data/sst}" --seed 1 \
    --shuffle "${SHUFFLE:-batches}" --json > "$R/g$g.json" 2> "$R/g$g.log"
  echo "$g GPU(s): rc $?; sent/s per epoch: $(node -e 'const r=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8"));
console.log((r.epochs??[]).map((e)=>Math.round(e.sentencesPerSecond)).join(" "))' "$R/g$g.json" 2>/dev/null)"
  grep "host trace" "$R/g$g.log" | tail -n "$((g * 2))"
done
