#!/usr/bin/env bash
# Why VPPS scales poorly data-parallel: the same one-GPU Tree-LSTM training (a) plain — the in-kernel update — and
# (b) as the only rank of a process group (WORLD_SIZE=1: gradient-export mode, the NCCL all-reduce of one rank, the
# external update, the host exchange), so the cost of export mode is seen without a second rank. Prints each run's
# epoch times (the JSON summary's) per batch size.
set -u
SST="${SST:-.gpu-data/sst}"
for b in ${BATCHES:-32 128}; do
  for mode in plain group; do
    env=()
    if [[ $mode == group ]]; then env=(RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$((29400 + b))); fi
    /usr/bin/time -f "%e s wall" env "${env[@]}" timeout 150 node bin/vpps.js train treelstm --engine vpps --batch "$b" \
      --epochs 3 --max-sentences 4096 --data "$SST" --seed 1 --json > "/tmp/diag-$mode-$b.json" 2> "/tmp/diag-$mode-$b.err"
    echo "batch $b $mode: rc $? $(tail -1 /tmp/diag-$mode-$b.err)"
    node -e 'const r=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8"));for(const e of r.epochs??[])console.log("  epoch",e.epoch,"sent/s",Math.round(e.sentencesPerSecond),"seconds",e.seconds.toFixed(3),"loss",e.trainLoss.toFixed(4))' "/tmp/diag-$mode-$b.json" 2>/dev/null || head -c 600 "/tmp/diag-$mode-$b.json"
  done
done
