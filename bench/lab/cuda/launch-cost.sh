#!/usr/bin/env bash
# Host cost per CUDA call from Node (koffi) and from C, in one run on the GPU machine (bench/lab/cuda/launch-cost.ts).
#   source .gpu/env.sh && bash bench/lab/cuda/launch-cost.sh [OUTDIR]
set -eu
D="${1:-${OUT:-/tmp}/launch-cost}"
mkdir -p "$D"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$D/device.txt"
nvcc -O2 -arch=native -o "$D/launch-cost" bench/lab/cuda/launch-cost.cu -lcuda -lcublas
for run in 1 2; do
  "$D/launch-cost" 400 15 > "$D/native-$run.json" 2>> "$D/launch-cost.log"
  node --import tsx bench/lab/cuda/launch-cost.ts --json "$D/node-$run.json" >> "$D/launch-cost.log" 2>&1
done
rm -f "$D/launch-cost"
cat "$D/launch-cost.log"
# the same calls from several host threads at once
nvcc -O2 -arch=native -o "$D/launch-threads" bench/lab/cuda/launch-threads.cu -lcuda -lcublas
"$D/launch-threads" 300 9 > "$D/native-threads.json" 2>> "$D/launch-threads.log"
node --import tsx bench/lab/cuda/launch-threads.ts --json "$D/node-threads.json" >> "$D/launch-threads.log" 2>&1
rm -f "$D/launch-threads"
cat "$D/launch-threads.log"
