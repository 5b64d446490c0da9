#!/usr/bin/env bash
# Issue 16: every model trained from the command line on the GPU, eager and autobatch (1 epoch, 100 sentences).
set -u
mkdir -p "$OUT/cli"
for m in treelstm rvnn td-rnn td-lstm bilstm bilstm-char; do
  case $m in bilstm*) D=.gpu-data/wikiner ;; *) D=.gpu-data/sst ;; esac
  for e in eager autobatch; do
    (timeout 200 node bin/vpps.js train $m --data $D --engine $e --epochs 1 --max-sentences 100 > "$OUT/cli/$m-$e.log" 2>&1; echo "exit $?" >> "$OUT/cli/$m-$e.log") &
  done
done
wait
for f in "$OUT"/cli/*.log; do echo "== $(basename $f): $(grep -E '^epoch 1:|^best|^exit|^vpps:' $f | tr '\n' ' ')"; done | tee "$OUT/cli-summary.txt"
tar -czf "$OUT/cli.tar.gz" -C "$OUT" cli
