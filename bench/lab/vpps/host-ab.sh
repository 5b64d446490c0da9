#!/usr/bin/env bash
# VPPS Tree-LSTM training on one GPU, this checkout against another (OLD=<dir> holding that checkout's bin, src and
# package.json, resolving node_modules from here), interleaved: for each per-GPU batch in BATCHES, ROUNDS rounds of
# (old, new) runs of `vpps train treelstm --engine vpps` over SST; prints each run's sentences/s per epoch (the first
# epoch includes compiling and profiling). Logs: $OUT/host-ab/<who>-b<B>-<round>.{json,log}.
set -u
OUT="${OUT:-out-host-ab}"
R="$OUT/host-ab"
mkdir -p "$R"
SST="${SST:-.gpu-data/sst}"
rate() { node -e 'const r=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8"));console.log((r.epochs??[]).map((e)=>Math.round(e.sentencesPerSecond)).join(" "))' "$1" 2>/dev/null; }
for b in ${BATCHES:-128 32}; do
  for round in $(seq 1 "${ROUNDS:-2}"); do
    for who in old new; do
      bin=bin/vpps.js
      [[ $who == old ]] && bin="$OLD/bin/vpps.js"
      log="$R/$who-b$b-$round"
      timeout 120 node "$bin" train treelstm --engine vpps --batch "$b" --epochs "${EPOCHS:-4}" --data "$SST" --seed 1 \
        --json > "$log.json" 2> "$log.log"
      echo "b$b round $round $who: $(rate "$log.json") sent/s per epoch (rc $?)"
    done
  done
done
