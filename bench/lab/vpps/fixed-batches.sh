#!/usr/bin/env bash
# VPPS Tree-LSTM training on one GPU over SST with `--shuffle examples` (new batches every epoch: every batch built
# and scheduled) against `--shuffle batches` (fixed batches: from the second epoch each batch's kept script is
# launched), interleaved: for each batch size in BATCHES, ROUNDS rounds of (examples, batches) runs of
# `vpps train treelstm --engine vpps --epochs EPOCHS`; prints each run's sentences/s per epoch (the first epoch
# includes compiling and profiling) and dev accuracy. Logs: $OUT/fixed-batches/<mode>-b<B>-<round>.{json,log}.
#   source .gpu/env.sh && OUT=$OUT bash bench/lab/vpps/fixed-batches.sh
set -u
OUT="${OUT:-out-fixed-batches}"
R="$OUT/fixed-batches"
mkdir -p "$R"
SST="${SST:-.gpu-data/sst}"
show() {
  node -e 'const r=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8"));
console.log((r.epochs??[]).map((e)=>Math.round(e.sentencesPerSecond)).join(" ") + " sent/s per epoch; best dev " +
  (100*(r.bestDevAccuracy??NaN)).toFixed(2) + "%")' "$1" 2>/dev/null
}
for b in ${BATCHES:-128 32}; do
  for round in $(seq 1 "${ROUNDS:-2}"); do
    for mode in examples batches; do
      log="$R/$mode-b$b-$round"
      timeout "${RUN_TIMEOUT:-150}" node bin/vpps.js train treelstm --engine vpps --batch "$b" --epochs "${EPOCHS:-5}" \
        --data "$SST" --seed 1 --shuffle "$mode" --json > "$log.json" 2> "$log.log"
      echo "b$b round $round --shuffle $mode: $(show "$log.json") (rc $?)"
    done
  done
done
