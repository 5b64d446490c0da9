/**
 * Golden hashes of the generated CUDA of the persistent RNN kernels: every cell, fp32 and fp16 weights, the forward,
 * backward and stepwise kernels, at every planned layout (widest to most replicas) for hidden 256–2304, with the
 * build options a layer can ask for (pipelined / deferred loops, clusters of 2 or 4 or none, the instrumented
 * build, registers kept free for spill re-planning). A refactoring must leave every hash as it is. After a
 * deliberate change of the output, rewrite the file with VPPS_GOLDEN_WRITE=1 and say why in the commit.
 *
 * The hash is of the code, not of its comments: line and block comments and trailing blanks are removed first, so
 * that a comment inside the generated CUDA may be reworded (what ptxas compiles stays the same). The recorded hashes
 * were computed this way on the code before the restructuring.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { describe, test } from "node:test";
import {
  backwardKernelSource,
  forwardKernelSource,
  H100_SXM,
  RNN_CELLS,
  rnnLayouts,
  stepwiseKernelSource,
} from "./golden/rnn-api.js";

const FILE = new URL("./golden/rnn-hashes.json", import.meta.url);
/** The CUDA without its comments and trailing blanks (no kernel here has a string literal that looks like a comment). */
function codeOnly(cuda: string): string {
  return cuda
    .replace(/\/\*[\s\S]*?\*\//g, "")
    .replace(/\/\/[^\n]*/g, "")
    .replace(/[ \t]+$/gm, "")
    .replace(/\n{2,}/g, "\n");
}
const sha = (data: string) => createHash("sha256").update(codeOnly(data)).digest("hex").slice(0, 24);

const HIDDEN = [256, 384, 512, 640, 1024, 1152, 1312, 1536, 1792, 2304];
const BUILDS = [
  { name: "plain", options: {} },
  { name: "pipelined", options: { pipelinedForward: true, deferredBackward: true } },
  { name: "cluster0", options: { cluster: false } },
  { name: "cluster1", options: { cluster: true } },
  { name: "cs4", options: { cluster: true, clusterSize: 4 as const } },
  { name: "phases", options: { phases: true } },
] as const;

function computeHashes(): Record<string, string> {
  const out: Record<string, string> = {};
  const put = (key: string, text: string) => {
    assert.ok(!(key in out), `two cases share the key '${key}'`);
    out[key] = sha(text);
  };
  for (const cell of RNN_CELLS) {
    for (const hidden of HIDDEN) {
      put(`stepwise ${cell} ${hidden}`, stepwiseKernelSource(cell, hidden));
      for (const precision of ["fp32", "fp16"] as const) {
        for (const headroom of [0, 16]) {
          const layouts = rnnLayouts(cell, hidden, H100_SXM, precision, headroom);
          layouts.forEach((layout, i) => {
            // every build option at the widest layout; the replicated layouts with their default build
            const builds = i === 0 ? BUILDS : BUILDS.slice(0, 2);
            for (const b of builds) {
              const key = `${cell} ${hidden} ${precision} h${headroom} layout${i} u${layout.forward.unitsPerCta} ${b.name}`;
              put(`forward ${key}`, forwardKernelSource(layout.forward, b.options));
              put(`backward ${key}`, backwardKernelSource(layout.backward, b.options));
            }
          });
        }
      }
    }
  }
  return out;
}

describe("persistent RNN golden output (generated CUDA)", () => {
  test("every hash equals the one recorded on the old code", () => {
    const got = computeHashes();
    if (process.env["VPPS_GOLDEN_WRITE"] === "1") {
      writeFileSync(FILE, `${JSON.stringify(got, null, 2)}\n`);
      return;
    }
    const want = JSON.parse(readFileSync(FILE, "utf8")) as Record<string, string>;
    assert.ok(Object.keys(want).length > 500, "the recorded file lists the cases");
    assert.deepEqual(Object.keys(got).sort(), Object.keys(want).sort(), "the same cases");
    const differ = Object.keys(want).filter((k) => got[k] !== want[k]);
    assert.deepEqual(differ, [], `${differ.length} outputs changed, first: ${differ[0]}`);
  });
});
