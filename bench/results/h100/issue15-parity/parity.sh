#!/usr/bin/env bash
# Old (be88246, before the restructuring) and new code alternately, same machine, same kernel cache, 3 rounds.
set -u
D=.gpu-data/sst/train.txt
E=${ENGINES:-vpps-fused,autobatch-agenda}
mkdir -p $OUT/parity /tmp/vk
for r in ${ROUNDS:-1 2 3}; do
  echo "== round $r old"
  node --import tsx old/bench/treelstm.ts --data $D --hidden 256 --engines $E --cache /tmp/vk > $OUT/parity/old-$r.log 2>&1
  grep -E "batch +(1|8|128):" $OUT/parity/old-$r.log
  echo "== round $r new"
  node bin/vpps.js bench treelstm --data $D --hidden 256 --engines $E --batches 1,2,4,8,16,32,64,128 --cache /tmp/vk --out $OUT/parity/new-$r > $OUT/parity/new-$r.log 2>&1
  grep -E "batch +(1|8|128):" $OUT/parity/new-$r.log
done
