import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { checkImportRules, type ImportEdge, importGraph, importsOf, RNN_ROOMS } from "./rules/import-graph.js";

const indexOfRoom = (f: string) =>
  RNN_ROOMS.findIndex((r) => r.paths.some((p) => (p.endsWith("/") ? f.startsWith(p) : f === p)));

const ROOT = fileURLToPath(new URL("..", import.meta.url));

describe("import rules (layers, engines, VPPS stages, RNN rooms, cycles)", () => {
  const edges = importGraph(ROOT);

  test("src/ keeps every rule", () => {
    assert.ok(edges.length > 200, `only ${edges.length} imports found`);
    assert.deepEqual(checkImportRules(edges), []);
  });

  const before = new Set(checkImportRules(edges));
  /** The problems a planted import adds to the tree's own. */
  const planted = (e: Omit<ImportEdge, "line" | "typeOnly"> & { typeOnly?: boolean }) =>
    checkImportRules([...edges, { line: 1, typeOnly: false, ...e }]).filter((l) => !before.has(l));

  test("a planted import of a later layer fails", () => {
    const p = planted({ from: "src/util/random.ts", to: "src/engines/cpu.ts" });
    const want = /^src\/util\/random\.ts:1 imports src\/engines\/cpu\.ts: layer 'util' may not import .*'engines'/;
    assert.ok(
      p.some((l) => want.test(l)),
      p.join("\n"),
    );
  });

  test("a planted import of an engine file from the conv wing fails", () => {
    const p = planted({ from: "src/conv/runner.ts", to: "src/engines/gpu/parameters.ts" });
    assert.ok(
      p.some((l) => /layer 'conv' may not import the later layer 'engines'/.test(l)),
      p.join("\n"),
    );
  });

  test("a planted import of a later part of cuda/ fails", () => {
    const p = planted({ from: "src/cuda/ffi/driver.ts", to: "src/cuda/runtime/stream.ts", typeOnly: true });
    assert.equal(p.length, 1);
    assert.match(p[0]!, /cuda part 'ffi' may not import the later part 'runtime'/);
  });

  test("a planted lateral import between engines fails, even type-only", () => {
    const p = planted({ from: "src/engines/eager/engine.ts", to: "src/engines/vpps/index.ts", typeOnly: true });
    assert.equal(p.length, 1);
    assert.match(p[0]!, /engine unit 'eager' may not import 'vpps'/);
  });

  test("a planted import of a later VPPS stage fails", () => {
    const p = planted({ from: "src/engines/vpps/plan/plan.ts", to: "src/engines/vpps/runtime/pipeline.ts" });
    assert.ok(
      p.some((l) => /VPPS stage 'plan' may not import the later stage 'runtime'/.test(l)),
      p.join("\n"),
    );
  });

  test("a planted import past a system's face fails; the face itself and imports inside the system pass", () => {
    const past = planted({ from: "src/cli/plan.ts", to: "src/engines/vpps/schedule/scheduler.ts" });
    assert.ok(
      past.some((l) => /import the vpps face \(src\/engines\/vpps\/index\.ts\), not its inside/.test(l)),
      past.join("\n"),
    );
    const parallel = planted({ from: "src/train/loop.ts", to: "src/parallel/group.ts" });
    assert.ok(
      parallel.some((l) => /import the parallel face/.test(l)),
      parallel.join("\n"),
    );
    assert.deepEqual(planted({ from: "src/cli/plan.ts", to: "src/engines/vpps/index.ts" }), []);
    assert.deepEqual(planted({ from: "src/engines/vpps/vpps.ts", to: "src/engines/vpps/schedule/scheduler.ts" }), []);
  });

  test("a planted import of a later RNN room fails, and every file of src/rnn/ is in a room", () => {
    const p = planted({ from: "src/rnn/plan/dense.ts", to: "src/rnn/codegen/index.ts", typeOnly: true });
    assert.ok(
      p.some((l) => /RNN room 'plan' may not import the later room 'codegen'/.test(l)),
      p.join("\n"),
    );
    const roomless = edges.map((e) => e.from).filter((f) => f.startsWith("src/rnn/") && indexOfRoom(f) < 0);
    assert.deepEqual([...new Set(roomless)], []);
  });

  test("a planted cycle fails; a type-only back edge is no cycle", () => {
    const e = edges.find((x) => !x.typeOnly && x.from.startsWith("src/ops/") && x.to.startsWith("src/graph/"))!;
    assert.ok(e, "an ops -> graph import to reverse");
    const back = { from: e.to, to: e.from };
    assert.ok(planted(back).some((l) => l.startsWith("import cycle:")));
    assert.ok(!planted({ ...back, typeOnly: true }).some((l) => l.startsWith("import cycle:")));
  });

  test("the parser sees static, re-exported, dynamic and type-only imports", () => {
    const found = importsOf(
      "x.ts",
      `import { a } from "./a.js";\nimport type { B } from "./b.js";\nexport { c } from "./c.js";\nimport { type D } from "./d.js";\nconst e = await import("./e.js");\nimport x from "node:fs";\n`,
    );
    assert.deepEqual(
      found.map((f) => `${f.spec}:${f.line}:${f.typeOnly}`),
      ["./a.js:1:false", "./b.js:2:true", "./c.js:3:false", "./d.js:4:true", "./e.js:5:false"],
    );
  });
});
