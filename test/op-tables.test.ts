// Kernel tables keyed by op: every table has an entry for every op, checked at run time; a table with an op deleted
// does not compile (the TypeScript compiler names the missing op); and an op an engine refuses (an `unsupported`
// entry) fails the op × engine suite with an error naming the engine and the op (VPPS refuses the whole graph).

import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { describe, test } from "node:test";
import ts from "typescript";
import { AUTOBATCH_KERNELS } from "../src/engines/autobatch/kernel-table.js";
import { EAGER_KERNELS } from "../src/engines/eager/kernel-table.js";
import { VPPS_KERNELS } from "../src/engines/vpps/schedule/kernel-table.js";
import {
  isUnsupported,
  OP_COUNT,
  OP_NAMES,
  Op,
  type OpTable,
  opArray,
  UnsupportedOpError,
  unsupported,
} from "../src/graph/opcodes.js";
import { OPS } from "../src/ops/registry.js";
import { OP_CASES } from "./op-cases.js";
import { compareWithCpu, emulatedAutobatchEngine, emulatedVpps } from "./op-suite.js";

const root = resolve(import.meta.dirname, "..");

/** Every kernel table, as the engines read it (arrays indexed by op). */
const TABLES: Record<string, readonly unknown[]> = {
  "op names (src/graph/opcodes.ts)": OP_NAMES,
  "reference kernels (src/ops/registry.ts)": OPS,
  "eager (src/engines/eager/kernel-table.ts)": EAGER_KERNELS,
  "autobatch GPU (src/engines/autobatch/kernel-table.ts)": AUTOBATCH_KERNELS,
  "VPPS (src/engines/vpps/schedule/kernel-table.ts)": VPPS_KERNELS,
};

/** The tables written as object literals keyed by op, in files whose copy with one op deleted must not compile. */
const SOURCES = [
  "src/graph/opcodes.ts",
  "src/engines/eager/kernel-table.ts",
  "src/engines/autobatch/kernel-table.ts",
  "src/engines/vpps/schedule/kernel-table.ts",
  "test/op-cases.ts",
];

describe("kernel tables at run time", () => {
  test("the ops are numbered 0 … OP_COUNT − 1", () => {
    const values = Object.values(Op).filter((v) => typeof v === "number");
    assert.deepEqual(
      values.sort((a, b) => a - b),
      [...Array(OP_COUNT).keys()],
    );
  });

  for (const [name, table] of Object.entries(TABLES)) {
    test(`${name}: an entry for every op`, () => {
      assert.equal(table.length, OP_COUNT);
      for (let op = 0; op < OP_COUNT; op++) assert.ok(table[op] !== undefined, `no entry for op ${Op[op]}`);
    });
  }

  test("the suite has cases for every op", () => {
    for (let op = 0; op < OP_COUNT; op++) assert.ok(OP_CASES[op as Op].length > 0, `no case for op ${Op[op]}`);
  });

  test("opArray refuses a table that lacks an op, or has an entry that is not one, naming it", () => {
    const names = Object.fromEntries(OP_NAMES.map((n, op) => [op, n]));
    const { [Op.Tanh]: _, ...lacking } = names;
    assert.throws(
      () => opArray(lacking as unknown as OpTable<string>, "a test table"),
      /a test table: no entry for op 'Tanh' \(10\); every op needs one/,
    );
    assert.throws(
      () => opArray({ ...names, [OP_COUNT]: "x" } as unknown as OpTable<string>, "a test table"),
      new RegExp(`a test table: entry '${OP_COUNT}' is not an op \\(ops are 0 … ${OP_COUNT - 1}\\)`),
    );
  });

  test("unsupported entries say why, and throw an error naming the engine and the op", () => {
    const refused = unsupported("some engine", Op.Relu, "not yet written");
    assert.ok(isUnsupported(refused));
    assert.ok(!isUnsupported(EAGER_KERNELS[Op.Relu]!));
    assert.throws(
      () => refused.forward(),
      (e: unknown) =>
        e instanceof UnsupportedOpError &&
        e.engine === "some engine" &&
        e.op === Op.Relu &&
        e.message === "some engine: op 'relu' is not supported: not yet written",
    );
    // the autobatch GPU table refuses what its other steps batch, deliberately
    for (const op of [Op.Parameter, Op.Lookup, Op.MatVec, Op.Affine]) assert.ok(isUnsupported(AUTOBATCH_KERNELS[op]!));
  });
});

describe("a planted missing kernel", () => {
  test("an engine whose kernel for an op is refused fails the op's suite cases, naming engine and op", async () => {
    const table = AUTOBATCH_KERNELS as unknown[];
    const kept = table[Op.Tanh];
    table[Op.Tanh] = unsupported("autobatch (GPU)", Op.Tanh, "planted by the test");
    try {
      for (const c of OP_CASES[Op.Tanh]) {
        await assert.rejects(
          compareWithCpu(c.make, emulatedAutobatchEngine("agenda")),
          /autobatch \(GPU\): op 'tanh' is not supported: planted by the test/,
        );
      }
    } finally {
      table[Op.Tanh] = kept;
    }
    for (const c of OP_CASES[Op.Tanh])
      assert.equal(await compareWithCpu(c.make, emulatedAutobatchEngine("agenda")), "");
  });

  test("VPPS refuses a graph with an op it has no kernel for, in one line naming the op", async () => {
    const table = VPPS_KERNELS as unknown[];
    const kept = table[Op.Tanh];
    table[Op.Tanh] = unsupported("vpps", Op.Tanh, "planted by the test");
    try {
      for (const c of OP_CASES[Op.Tanh]) {
        await assert.rejects(compareWithCpu(c.make, emulatedVpps("greedy")), (e: unknown) => {
          assert.ok(e instanceof UnsupportedOpError, `got ${String(e)}`);
          assert.equal(e.message, "vpps: op 'tanh' is not supported: planted by the test");
          return true;
        });
      }
    } finally {
      table[Op.Tanh] = kept;
    }
    for (const c of OP_CASES[Op.Tanh]) assert.equal(await compareWithCpu(c.make, emulatedVpps("greedy")), "");
  });

  test("a table with one op deleted does not compile: the compiler names the missing op", () => {
    mkdirSync(join(root, "tmp"), { recursive: true });
    const dir = mkdtempSync(join(root, "tmp", "op-tables-"));
    try {
      const fixtures = SOURCES.map((source) => {
        const from = join(root, source);
        let text = readFileSync(from, "utf8");
        // point relative imports at the originals from the fixture's folder
        text = text.replace(/from "(\.\.?\/[^"]+)"/g, (_, spec: string) => {
          const target = relative(dir, resolve(dirname(from), spec)).replaceAll("\\", "/");
          return `from "${target.startsWith(".") ? target : `./${target}`}"`;
        });
        const deleted = text.replace(/^\s*\[Op\.Tanh\]:.*\n/m, "");
        assert.notEqual(deleted, text, `${source}: no one-line [Op.Tanh] entry to delete`);
        const file = join(dir, source.replaceAll("/", "_"));
        writeFileSync(file, deleted);
        return { source, file };
      });
      const config = ts.readConfigFile(join(root, "tsconfig.json"), ts.sys.readFile);
      const parsed = ts.parseJsonConfigFileContent(config.config, ts.sys, root);
      const program = ts.createProgram(
        fixtures.map((f) => f.file),
        { ...parsed.options, noEmit: true },
      );
      for (const { source, file } of fixtures) {
        const diagnostics = ts
          .getPreEmitDiagnostics(program, program.getSourceFile(file))
          .map((d) => ts.flattenDiagnosticMessageText(d.messageText, "\n"));
        assert.equal(diagnostics.length, 1, `${source} without tanh:\n${diagnostics.join("\n")}`);
        assert.match(diagnostics[0]!, /Property '\[Op\.Tanh\]' is missing in type/, source);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
