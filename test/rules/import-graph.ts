/**
 * The import graph of src/ and the rules it must keep (DESIGN.md §3, docs/ARCHITECTURE.md): layers import only
 * from layers before them; so do the parts of cuda/; engines do not import each other; VPPS's stages import only
 * earlier stages; a system is entered through its face only; no cycles.
 * Read by test/import-rules.test.ts, which also plants violations to prove each rule can fail.
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import ts from "typescript";

export interface ImportEdge {
  /** Importing file, relative to the repository root with forward slashes (`src/engines/eager/engine.ts`). */
  readonly from: string;
  /** Imported file, same form (`.js` specifiers mapped to the `.ts` source). */
  readonly to: string;
  readonly line: number;
  /** `import type` / `export type` only: erased at run time (still a layering dependency, never a cycle). */
  readonly typeOnly: boolean;
}

/** The layers of src/ in data-flow order: a file may import only from its own layer or an earlier one. */
export const LAYERS: readonly { readonly name: string; readonly paths: readonly string[] }[] = [
  { name: "util", paths: ["src/util/"] },
  { name: "graph", paths: ["src/graph/"] },
  { name: "ops", paths: ["src/ops/"] },
  { name: "model", paths: ["src/model/"] },
  { name: "optim", paths: ["src/optim/"] },
  { name: "cuda", paths: ["src/cuda/"] },
  { name: "codegen", paths: ["src/codegen/"] },
  // the stream pool, until it moves down to src/cuda/runtime/
  { name: "glp4nn", paths: ["src/glp4nn/"] },
  { name: "rnn", paths: ["src/rnn/"] },
  { name: "conv", paths: ["src/conv/"] },
  { name: "engines", paths: ["src/engines/"] },
  { name: "parallel", paths: ["src/parallel/"] },
  { name: "data", paths: ["src/data/"] },
  { name: "models", paths: ["src/models/"] },
  { name: "train", paths: ["src/train/"] },
  { name: "report", paths: ["src/report/"] },
  { name: "bench", paths: ["src/bench/"] },
  { name: "cli", paths: ["src/cli/"] },
  { name: "package root", paths: ["src/index.ts"] },
];

/**
 * Inside src/engines/: the engines proper never import one another (what they share lives in engines/gpu/ or a
 * layer below); only the registry sees them all. Each entry names what a unit may import besides itself.
 */
export const ENGINE_UNITS: readonly {
  readonly name: string;
  readonly path: string;
  readonly may: readonly string[];
}[] = [
  { name: "interface", path: "src/engines/engine.ts", may: [] },
  { name: "cpu", path: "src/engines/cpu", may: ["interface"] },
  { name: "gpu", path: "src/engines/gpu/", may: ["interface"] },
  { name: "eager", path: "src/engines/eager/", may: ["interface", "gpu"] },
  { name: "autobatch", path: "src/engines/autobatch/", may: ["interface", "gpu", "cpu"] },
  { name: "vpps", path: "src/engines/vpps/", may: ["interface", "gpu"] },
  {
    name: "registry",
    path: "src/engines/index.ts",
    may: ["interface", "cpu", "gpu", "eager", "autobatch", "vpps", "registry-file"],
  },
  {
    name: "registry-file",
    path: "src/engines/registry.ts",
    may: ["interface", "cpu", "gpu", "eager", "autobatch", "vpps"],
  },
];

/**
 * Inside src/cuda/, the parts in dependency order; a part imports only from itself and earlier parts. The bindings
 * know nothing of what is built on them; compile/ needs only NVRTC; runtime/ (the device floor: device, memory,
 * streams, modules, GpuContext, the stream pool) compiles through compile/; hw/ reads runtime/'s device properties;
 * `vpps info` and the face see everything. units.ts (byte counts in messages) is below all of them.
 */
export const CUDA_PARTS: readonly { readonly name: string; readonly paths: readonly string[] }[] = [
  { name: "units", paths: ["src/cuda/units.ts"] },
  { name: "ffi", paths: ["src/cuda/ffi/"] },
  { name: "compile", paths: ["src/cuda/compile/"] },
  { name: "runtime", paths: ["src/cuda/runtime/"] },
  { name: "hw", paths: ["src/cuda/hw/"] },
  { name: "face", paths: ["src/cuda/info.ts", "src/cuda/index.ts"] },
];

/**
 * VPPS's stages in dependency order; a stage imports only from earlier stages (and from outside vpps/). The
 * batch itself passes plan → schedule → script → codegen'd kernel → runtime; the script format comes before the
 * scheduler that writes it, the instrumentation (dumps, profile and trace buffer layouts) before the stages that
 * emit into it, and the options (validated, with their defaults) before the compile and runtime stages that read
 * them. The API (vpps.ts) and the Engine adapter (engine.ts) come last.
 */
export const VPPS_STAGES: readonly { readonly name: string; readonly paths: readonly string[] }[] = [
  { name: "plan", paths: ["src/engines/vpps/plan/"] },
  { name: "script", paths: ["src/engines/vpps/script/"] },
  { name: "instrument", paths: ["src/engines/vpps/instrument/"] },
  { name: "schedule", paths: ["src/engines/vpps/schedule/"] },
  { name: "options", paths: ["src/engines/vpps/options.ts"] },
  { name: "codegen", paths: ["src/engines/vpps/codegen/"] },
  { name: "runtime", paths: ["src/engines/vpps/runtime/"] },
  { name: "tune", paths: ["src/engines/vpps/tune/"] },
  { name: "api", paths: ["src/engines/vpps/setup.ts", "src/engines/vpps/vpps.ts"] },
  { name: "adapter", paths: ["src/engines/vpps/engine.ts"] },
  { name: "face", paths: ["src/engines/vpps/index.ts"] },
];

/**
 * The systems that are one folder with one entry point (DESIGN.md §3): from outside its folder, a file may import
 * only the face (`index.ts`), so that a system's inside can move without its users noticing.
 */
export const FACES: readonly { readonly name: string; readonly dir: string; readonly face: string }[] = [
  { name: "vpps", dir: "src/engines/vpps/", face: "src/engines/vpps/index.ts" },
  { name: "parallel", dir: "src/parallel/", face: "src/parallel/index.ts" },
  { name: "conv", dir: "src/conv/", face: "src/conv/index.ts" },
  { name: "glp4nn", dir: "src/glp4nn/", face: "src/glp4nn/index.ts" },
  { name: "rnn", dir: "src/rnn/", face: "src/rnn/index.ts" },
];

/**
 * The persistent RNN's rooms in dependency order (docs/RNN.md); a room imports only from earlier rooms. The spec,
 * packed batches, the backend seam and the pruning options are plain data everything reads; the CPU reference; the plan (layouts from the
 * device model); the generated kernels; the GPU runtime; and the face (the layer API, the backend choice) last.
 */
export const RNN_ROOMS: readonly { readonly name: string; readonly paths: readonly string[] }[] = [
  { name: "spec", paths: ["src/rnn/spec.ts", "src/rnn/packed.ts", "src/rnn/backend.ts", "src/rnn/prune.ts"] },
  { name: "reference", paths: ["src/rnn/reference/"] },
  { name: "plan", paths: ["src/rnn/plan/"] },
  { name: "codegen", paths: ["src/rnn/codegen/"] },
  { name: "runtime", paths: ["src/rnn/runtime/"] },
  { name: "face", paths: ["src/rnn/open-backend.ts", "src/rnn/layer.ts", "src/rnn/index.ts"] },
];

function tsFiles(dir: string, out: string[] = []): string[] {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) tsFiles(p, out);
    else if (name.endsWith(".ts") && !name.endsWith(".d.ts")) out.push(p);
  }
  return out;
}

const posix = (p: string) => p.split("\\").join("/");

/** The relative imports and re-exports (static and dynamic) of one source text. */
export function importsOf(file: string, text: string): { spec: string; line: number; typeOnly: boolean }[] {
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.ES2022, true);
  const found: { spec: string; line: number; typeOnly: boolean }[] = [];
  const add = (lit: ts.Expression | undefined, typeOnly: boolean) => {
    if (lit && ts.isStringLiteral(lit) && lit.text.startsWith(".")) {
      found.push({ spec: lit.text, line: sf.getLineAndCharacterOfPosition(lit.getStart()).line + 1, typeOnly });
    }
  };
  const visit = (n: ts.Node): void => {
    if (ts.isImportDeclaration(n)) {
      const c = n.importClause;
      const allTypes =
        c !== undefined &&
        (c.isTypeOnly ||
          (c.name === undefined &&
            c.namedBindings !== undefined &&
            ts.isNamedImports(c.namedBindings) &&
            c.namedBindings.elements.length > 0 &&
            c.namedBindings.elements.every((e) => e.isTypeOnly)));
      add(n.moduleSpecifier, allTypes);
    } else if (ts.isExportDeclaration(n)) {
      const allTypes =
        n.isTypeOnly ||
        (n.exportClause !== undefined &&
          ts.isNamedExports(n.exportClause) &&
          n.exportClause.elements.length > 0 &&
          n.exportClause.elements.every((e) => e.isTypeOnly));
      add(n.moduleSpecifier, allTypes);
    } else if (ts.isCallExpression(n) && n.expression.kind === ts.SyntaxKind.ImportKeyword) {
      add(n.arguments[0], false);
    }
    ts.forEachChild(n, visit);
  };
  visit(sf);
  return found;
}

/** Every relative import between the TypeScript files under `root/src`. */
export function importGraph(root: string): ImportEdge[] {
  const edges: ImportEdge[] = [];
  for (const abs of tsFiles(join(root, "src"))) {
    const from = posix(relative(root, abs));
    for (const imp of importsOf(abs, readFileSync(abs, "utf8"))) {
      const to = posix(relative(root, resolve(dirname(abs), imp.spec))).replace(/\.js$/, ".ts");
      edges.push({ from, to, line: imp.line, typeOnly: imp.typeOnly });
    }
  }
  return edges;
}

function indexIn(list: readonly { readonly paths: readonly string[] }[], file: string): number {
  return list.findIndex((l) => l.paths.some((p) => (p.endsWith("/") ? file.startsWith(p) : file === p)));
}

/** One line per broken rule: `file:line imports target: why`. Empty when the graph keeps every rule. */
export function checkImportRules(edges: readonly ImportEdge[]): string[] {
  const problems: string[] = [];
  const say = (e: ImportEdge, why: string) => problems.push(`${e.from}:${e.line} imports ${e.to}: ${why}`);
  for (const e of edges) {
    const a = indexIn(LAYERS, e.from);
    const b = indexIn(LAYERS, e.to);
    if (a < 0) {
      say(e, "the importing file is in no layer (add its folder to LAYERS in test/rules/import-graph.ts)");
      continue;
    }
    if (b < 0) {
      say(e, "the imported file is in no layer");
      continue;
    }
    if (b > a) {
      say(e, `layer '${LAYERS[a]!.name}' may not import the later layer '${LAYERS[b]!.name}'`);
      continue;
    }
    if (LAYERS[a]!.name === "cuda" && LAYERS[b]!.name === "cuda") {
      const pa = indexIn(CUDA_PARTS, e.from);
      const pb = indexIn(CUDA_PARTS, e.to);
      if (pa < 0) {
        say(e, "the importing file is in no part of cuda/ (add it to CUDA_PARTS in test/rules/import-graph.ts)");
      } else if (pb < 0) {
        say(e, "the imported file is in no part of cuda/");
      } else if (pb > pa) {
        say(e, `cuda part '${CUDA_PARTS[pa]!.name}' may not import the later part '${CUDA_PARTS[pb]!.name}'`);
      }
    }
    const ra = indexIn(RNN_ROOMS, e.from);
    const rb = indexIn(RNN_ROOMS, e.to);
    if (ra >= 0 && rb > ra) {
      say(e, `RNN room '${RNN_ROOMS[ra]!.name}' may not import the later room '${RNN_ROOMS[rb]!.name}'`);
    }
    if (LAYERS[a]!.name === "engines") {
      const unit = (f: string) => ENGINE_UNITS.find((u) => f === u.path || f.startsWith(u.path));
      const ua = unit(e.from);
      const ub = unit(e.to);
      if (ua && ub && ua !== ub && !ua.may.includes(ub.name)) {
        say(e, `engine unit '${ua.name}' may not import '${ub.name}' (no lateral imports between engines)`);
      }
      const sa = indexIn(VPPS_STAGES, e.from);
      const sb = indexIn(VPPS_STAGES, e.to);
      if (sa >= 0 && sb > sa) {
        say(e, `VPPS stage '${VPPS_STAGES[sa]!.name}' may not import the later stage '${VPPS_STAGES[sb]!.name}'`);
      }
    }
  }
  for (const e of edges) {
    const sys = FACES.find((f) => e.to.startsWith(f.dir));
    if (sys && !e.from.startsWith(sys.dir) && e.to !== sys.face) {
      say(e, `from outside ${sys.dir}, import the ${sys.name} face (${sys.face}), not its inside`);
    }
  }
  for (const cycle of importCycles(edges)) problems.push(`import cycle: ${cycle.join(" -> ")}`);
  return problems;
}

/** Cycles among run-time imports (type-only imports are erased and cannot make a cycle), each listed once. */
export function importCycles(edges: readonly ImportEdge[]): string[][] {
  const out = new Map<string, string[]>();
  for (const e of edges) {
    if (e.typeOnly) continue;
    if (!out.has(e.from)) out.set(e.from, []);
    out.get(e.from)!.push(e.to);
  }
  const state = new Map<string, 1 | 2>();
  const stack: string[] = [];
  const cycles: string[][] = [];
  const visit = (f: string): void => {
    state.set(f, 1);
    stack.push(f);
    for (const t of out.get(f) ?? []) {
      const s = state.get(t);
      if (s === 1) cycles.push([...stack.slice(stack.indexOf(t)), t]);
      else if (s === undefined) visit(t);
    }
    stack.pop();
    state.set(f, 2);
  };
  for (const f of [...out.keys()].sort()) if (!state.has(f)) visit(f);
  return cycles;
}
