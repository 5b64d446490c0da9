#!/usr/bin/env bash
# One device call: the host cost per CUDA call (bench/lab/cuda/launch-cost.sh), then the conv layers of
# `vpps bench glp4nn` for this checkout against another (OLD=<dir> with its bin and src; default tmp/old) under
# several CUDA_DEVICE_MAX_CONNECTIONS values. Everything lands in ONE tarball under $OUT.
#   source .gpu/env.sh && OLD=tmp/old CONNS="8 32" bash bench/lab/glp4nn/ab-gpu.sh
set -u
R="$(mktemp -d)/glp4nn-ab"
mkdir -p "$R" "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/device.txt"
OLD="${OLD:-tmp/old}"
ARGS="${BENCH_ARGS:---pools 2,4,8,12,16,24,32 --repeats 3 --tree-batches 0}"
if [ "${LAUNCH_COST:-1}" = 1 ]; then
  timeout 120 bash bench/lab/cuda/launch-cost.sh "$R/launch-cost" 2>&1 | tail -30
fi
for conns in ${CONNS:-8 32}; do
  for who in ${WHO:-new old}; do
    bin=bin/vpps.js
    [ "$who" = old ] && bin="$OLD/bin/vpps.js"
    [ "$who" = old ] && [ ! -f "$bin" ] && continue
    # shellcheck disable=SC2086
    CUDA_DEVICE_MAX_CONNECTIONS=$conns timeout "${BENCH_TIMEOUT:-200}" node "$bin" bench glp4nn --explain \
      --out "$R/$who-c$conns" $ARGS > "$R/$who-c$conns.log" 2>&1
    echo "$who c$conns exit $?"
    grep -E "within 5%" "$R/$who-c$conns/glp4nn.md" 2>/dev/null
  done
done
tar -czf "$OUT/glp4nn-ab.tar.gz" -C "$(dirname "$R")" glp4nn-ab
