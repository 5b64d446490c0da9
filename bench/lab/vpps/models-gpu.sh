#!/usr/bin/env bash
# One device call's worth of VPPS measurements over the six dynamic models, in phases (each bounded by a timeout, so
# that a call of at most 10 minutes returns what it has): on the GPU machine, from the project root,
#   source .gpu/env.sh && OUT=$OUT bash bench/lab/vpps/models-gpu.sh <phase> [<phase> ...]
# Phases:
#   bench     `vpps bench <model> --data <its data> --reference` per model of MODELS: every engine and the PyTorch
#             reference, results under $OUT/bench-<model>/ (BENCH_ARGS adds flags, e.g. "--batches 1,8,128")
#   profile   `vpps bench vpps profile --model <model> --quick`: barrier waits against matrix work, $OUT/profile-<model>/
#   ab        this checkout against OLD=<dir> (another checkout's bin/, src/ and package.json; node_modules from here),
#             `vpps bench <model> --engines vpps --batches $AB_BATCHES` alternating old and new processes ROUNDS times
#   workers   `vpps train treelstm --engine vpps --batch 128` with VPPS_SCHEDULE_WORKERS in $WORKERS: sentences/s per
#             epoch with new batches every epoch (the host wall)
# Data: SST and WIKINER (default .gpu-data/sst and .gpu-data/wikiner, as ../shared/gpu/README.md's copies).
set -u
OUT="${OUT:-out-models-gpu}"
SST="${SST:-.gpu-data/sst}"
WIKINER="${WIKINER:-.gpu-data/wikiner}"
MODELS="${MODELS:-treelstm bilstm bilstm-char td-rnn td-lstm rvnn}"
LIMIT="${LIMIT:-280}"
mkdir -p "$OUT"
data() { case "$1" in bilstm | bilstm-char) echo "$WIKINER" ;; treelstm) echo "$SST/train.txt" ;; *) echo "$SST" ;; esac; }
rate() { node -e 'const r=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8"));console.log((r.epochs??[]).map((e)=>Math.round(e.sentencesPerSecond)).join(" "))' "$1" 2>/dev/null; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/device.txt"
git rev-parse --short HEAD 2>/dev/null | tee "$OUT/commit.txt"
for phase in "$@"; do
  case "$phase" in
  bench)
    for m in $MODELS; do
      # shellcheck disable=SC2086
      timeout "$LIMIT" node bin/vpps.js bench "$m" --data "$(data "$m")" --reference ${BENCH_ARGS:-} --out "$OUT/bench-$m" \
        > "$OUT/bench-$m.log" 2>&1
      echo "bench $m: rc $?"; tail -3 "$OUT/bench-$m.log"
    done ;;
  profile)
    for m in $MODELS; do
      timeout "$LIMIT" node bin/vpps.js bench vpps profile --model "$m" --data "$(data "$m")" --quick --out "$OUT/profile-$m" \
        > "$OUT/profile-$m.log" 2>&1
      echo "profile $m: rc $?"; grep -E "^== |barrier" "$OUT/profile-$m.log" | head -8
    done ;;
  ab)
    for m in $MODELS; do
      for round in $(seq 1 "${ROUNDS:-3}"); do
        for who in old new; do
          bin=bin/vpps.js
          [[ $who == old ]] && bin="${OLD:?OLD=<other checkout> for the ab phase}/bin/vpps.js"
          dir="$OUT/ab-$m/$who-$round"
          timeout "$LIMIT" node "$bin" bench "$m" --data "$(data "$m")" --engines vpps --batches "${AB_BATCHES:-1,8,128}" \
            --out "$dir" > "$dir.log" 2>&1
          echo "ab $m round $round $who: rc $?"; grep -E "^\| +[0-9]+ \|" "$dir.log" | head -4
        done
      done
    done ;;
  workers)
    for w in ${WORKERS:-6 8 10 12 14}; do
      log="$OUT/workers-$w"
      VPPS_SCHEDULE_WORKERS=$w timeout "$LIMIT" node bin/vpps.js train treelstm --engine vpps --batch 128 --epochs "${EPOCHS:-4}" \
        --data "$SST" --seed 1 --json > "$log.json" 2> "$log.log"
      echo "workers $w: $(rate "$log.json") sentences/s per epoch (rc $?)"
    done ;;
  *) echo "unknown phase '$phase' (bench, profile, ab, workers)"; exit 2 ;;
  esac
done
tar czf "$OUT.tgz" -C "$(dirname "$OUT")" "$(basename "$OUT")" 2>/dev/null && mv "$OUT.tgz" "$OUT/all.tgz"
