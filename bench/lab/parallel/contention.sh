#!/usr/bin/env bash
# What bounds a data-parallel VPPS job's hosts. On a multi-GPU machine, in one call: VPPS Tree-LSTM training
# at per-GPU batch B with VPPS_DP_TRACE=1 (the per-step host timeline), for each run named in RUNS:
#   solo          one process on GPU 0, nothing else running;
#   indep4        four independent one-GPU processes at once (GPUs 0-3, no process group);
#   gpusN         one N-GPU data-parallel job;
# each optionally followed by -wW (W schedule workers per process: VPPS_SCHEDULE_WORKERS) and/or -main (graphs built
# on the main thread: VPPS_WORKER_BUILD=0) and/or -pin (solo and indep4 only: each process pinned with taskset to its
# quarter of the CPUs, process g to CPUs [g·C/4, (g+1)·C/4)), e.g. RUNS="solo solo-main gpus4-w6 indep4-pin".
# Logs: $OUT/contention/<run>[-<gpu>].{log,json}; each run prints its sentences/s per epoch and its trace lines.
set -u
OUT="${OUT:-out-contention}"
R="$OUT/contention"
mkdir -p "$R"
SST="${SST:-.gpu-data/sst}"
B="${B:-128}"
EPOCHS="${EPOCHS:-3}"
PIN=() # the taskset prefix of the next train (set per process by the -pin runs)
QUARTER=$(($(nproc) / 4))
pin() { [[ $1 == *-pin* ]] && PIN=(taskset -c "$(($2 * QUARTER))-$((($2 + 1) * QUARTER - 1))") || PIN=(); }
train() { # <log> <gpus> [env...]
  local log=$1 gpus=$2
  shift 2
  env VPPS_DP_TRACE=1 "$@" "${PIN[@]}" timeout 150 node bin/vpps.js train treelstm --engine vpps --gpus "$gpus" \
    --batch $((B * gpus)) --epochs "$EPOCHS" --data "$SST" --seed 1 --json > "$log.json" 2> "$log.log"
  echo "rc $?" >> "$log.log"
}
rate() { node -e 'const r=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8"));console.log((r.epochs??[]).map((e)=>Math.round(e.sentencesPerSecond)).join(" ")+" sent/s per epoch")' "$1" 2>/dev/null; }
show() { echo "== $1: $(rate "$R/$1.json")"; grep -E "host trace" "$R/$1.log" | tail -"${2:-1}" | cut -c1-300; grep -E "^rc [^0]|rror" "$R/$1.log" | head -3; }
for run in ${RUNS:-solo indep4 gpus4}; do
  env=()
  [[ $run =~ -w([0-9]+) ]] && env+=(VPPS_SCHEDULE_WORKERS="${BASH_REMATCH[1]}")
  [[ $run == *-main* ]] && env+=(VPPS_WORKER_BUILD=0)
  case $run in
    solo*) pin "$run" 0; train "$R/$run" 1 CUDA_VISIBLE_DEVICES=0 "${env[@]}"; show "$run" ;;
    indep4*)
      for g in 0 1 2 3; do pin "$run" "$g"; train "$R/$run-$g" 1 CUDA_VISIBLE_DEVICES=$g "${env[@]}" & done
      wait
      for g in 0 1 2 3; do show "$run-$g"; done ;;
    gpus*)
      n=${run#gpus}
      n=${n%%-*}
      train "$R/$run" "$n" "${env[@]}"
      show "$run" "$n" ;;
  esac
done
