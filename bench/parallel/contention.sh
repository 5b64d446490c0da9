#!/usr/bin/env bash
# Issue 20: is a rank's host slowed by the other ranks (the data-parallel coupling) or by the host itself (cores,
# caches, memory shared by busy processes)? On a 4-GPU machine, in one call: VPPS Tree-LSTM training at per-GPU batch
# B with VPPS_DP_TRACE=1 (the per-step host timeline) as
#   solo        one process on GPU 0, nothing else running;
#   indep4      four independent one-GPU processes at once (GPUs 0-3, no process group);
#   gpus4-wW    one 4-GPU data-parallel job with W schedule workers per rank, for each W of WORKERS.
# Logs: $OUT/contention/<run>[-<gpu>].{log,json}; each run prints its sentences/s per epoch.
set -u
OUT="${OUT:-out-contention}"
R="$OUT/contention"
mkdir -p "$R"
SST="${SST:-.gpu-data/sst}"
B="${B:-128}"
EPOCHS="${EPOCHS:-3}"
train() { # <log> <gpus> [env...]
  local log=$1 gpus=$2
  shift 2
  env VPPS_DP_TRACE=1 "$@" timeout 150 node bin/vpps.js train treelstm --engine vpps --gpus "$gpus" \
    --batch $((B * gpus)) --epochs "$EPOCHS" --data "$SST" --seed 1 --json > "$log.json" 2> "$log.log"
  echo "rc $?" >> "$log.log"
}
rate() { node -e 'const r=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8"));console.log((r.epochs??[]).map((e)=>Math.round(e.sentencesPerSecond)).join(" ")+" sent/s per epoch")' "$1" 2>/dev/null; }
show() { echo "== $1: $(rate "$R/$1.json")"; grep -E "host trace" "$R/$1.log" | tail -${2:-1} | cut -c1-260; }
for run in ${RUNS:-solo indep4 gpus4}; do
  case $run in
    solo) train "$R/solo" 1 CUDA_VISIBLE_DEVICES=0; show solo ;;
    indep4)
      for g in 0 1 2 3; do train "$R/indep4-$g" 1 CUDA_VISIBLE_DEVICES=$g & done
      wait
      for g in 0 1 2 3; do show "indep4-$g"; done ;;
    gpus4)
      for w in ${WORKERS:-6}; do train "$R/gpus4-w$w" 4 VPPS_SCHEDULE_WORKERS=$w; show "gpus4-w$w" 4; done ;;
  esac
done
