/**
 * The taggers of docs/MODELS.md transcribed in plain float64 loops, independent of the graph, the ops and the
 * engines: the loss of one sentence from a model's parameter values (read by name). test/taggers.test.ts checks the
 * models against it; it is also what the PyTorch reference scripts (bench/pytorch/) must compute.
 */
import type { TaggedSentence } from "../src/data/tagged.js";
import type { TaggerTaskModel } from "../src/models/bilstm/task.js";

type Vec = number[];

const sigmoid = (x: number) => 1 / (1 + Math.exp(-x));

/** W·x for a row-major [rows, x.length] matrix. */
function matVec(W: Float32Array, x: Vec): Vec {
  const n = x.length;
  const rows = W.length / n;
  const y = new Array<number>(rows).fill(0);
  for (let r = 0; r < rows; r++) for (let c = 0; c < n; c++) y[r]! += W[r * n + c]! * x[c]!;
  return y;
}

const add = (a: Vec, b: ArrayLike<number>): Vec => a.map((v, k) => v + b[k]!);

/**
 * One LSTM direction over xs: gates = Wx·x + Wh·h + b in the order [i; o; u; f], c = σ(i)tanh(u) + σ(f)c,
 * h = σ(o)tanh(c), h₀ = c₀ = 0. Returns h at every position, in the order of xs.
 */
function lstm(model: TaggerTaskModel, prefix: string, xs: Vec[], reverse: boolean): Vec[] {
  const p = (name: string) => model.params.get(`${name}_${prefix}`).value;
  const [Wx, Wh, b] = [p("Wx"), p("Wh"), p("b")];
  const H = b.length / 4;
  let h: Vec = new Array(H).fill(0);
  let c: Vec = new Array(H).fill(0);
  const hs: Vec[] = new Array(xs.length);
  for (let s = 0; s < xs.length; s++) {
    const t = reverse ? xs.length - 1 - s : s;
    const g = add(add(matVec(Wx, xs[t]!), matVec(Wh, h)), b);
    c = c.map((cp, r) => sigmoid(g[r]!) * Math.tanh(g[2 * H + r]!) + sigmoid(g[3 * H + r]!) * cp);
    h = c.map((cr, r) => sigmoid(g[H + r]!) * Math.tanh(cr));
    hs[t] = h;
  }
  return hs;
}

const row = (table: Float32Array, cols: number, i: number): Vec => Array.from(table.subarray(i * cols, (i + 1) * cols));

/** The summed loss −log softmax(scores)[gold] over the words of `s`. */
export function referenceLoss(model: TaggerTaskModel, s: TaggedSentence): number {
  const vocab = model.vocab;
  const E = model.params.get("E_w");
  const embed = E.cols;
  const xs = s.words.map((w) => {
    const i = vocab.words.index(w);
    // the character model spells every word outside its table (seen fewer than --min-count times, or never)
    if (vocab.chars === null || i !== 0) return row(E.value, embed, i);
    const C = model.params.get("C");
    const cs = Array.from(w, (ch) => row(C.value, C.cols, vocab.chars!.index(ch)));
    const f = lstm(model, "cf", cs, false);
    const b = lstm(model, "cb", cs, true);
    return [...f[f.length - 1]!, ...b[0]!];
  });
  const f = lstm(model, "f", xs, false);
  const b = lstm(model, "b", xs, true);
  const v = (name: string) => model.params.get(name).value;
  let loss = 0;
  s.words.forEach((_, t) => {
    const m = add(matVec(v("W_mlp"), [...f[t]!, ...b[t]!]), v("b_mlp")).map(Math.tanh);
    const o = add(matVec(v("W_out"), m), v("b_out"));
    const max = Math.max(...o);
    const logZ = max + Math.log(o.reduce((z, x) => z + Math.exp(x - max), 0));
    loss += logZ - o[vocab.tags.index(s.tags[t]!)]!;
  });
  return loss;
}
