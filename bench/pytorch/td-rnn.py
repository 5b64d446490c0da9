"""PyTorch reference of vpps's TD-RNN (docs/MODELS.md `td-rnn`): a pyramid over the sentence,
level-batched — level k of every sentence of the batch is one product and one elementwise pass.

Level 0: x_i = E[word_i]. Level k+1: x_i = tanh(W_L·x_i + W_R·x_{i+1} + b), one shared composition, until one
vector remains (n words: n(n−1)/2 compositions; a one-word sentence's root is its embedding). W_L and W_R are one
stacked [2H, H] product per level (each node is multiplied once, as a left and as a right input), then gathered.
Root: tanh(W_mlp·root + b_mlp) → W_out·· + b_out → softmax cross-entropy against the SST root label.

    python3 bench/pytorch/td-rnn.py train --data ../shared/data/sst --epochs 3 --seed 1 --json
"""

import common as C
from torch_common import F, Task, matrix, nn, run_cli, stacked, table, torch, upload, vector


class TdRnn(nn.Module):
    def __init__(self, vocab_size, embed, hidden, labels=C.SST_LABELS):
        super().__init__()
        if embed != hidden:
            raise C.DataError(f"td-rnn: --embed ({embed}) must equal --hidden ({hidden}): one composition of both")
        h = hidden
        self.hidden = h
        self.E = table(vocab_size, embed)
        self.W_LR = stacked((h, h), (h, h))  # [W_L; W_R]
        self.b = vector(h)
        self.W_mlp = matrix(h, h)
        self.b_mlp = vector(h)
        self.W_out = matrix(labels, h)
        self.b_out = vector(labels)

    def tables(self):
        return [self.E]

    def load_vpps(self, w):
        w.set(self.W_LR, torch.cat([w["W_L"], w["W_R"]], 0), "W_L; W_R")
        for name in ("E", "b", "W_mlp", "b_mlp", "W_out", "b_out"):
            w.set(getattr(self, name), w[name], name)

    def scores(self, sentences):
        h = self.hidden
        plan = C.pyramid_plan([len(s.ids) for s in sentences])
        words = [i for s in sentences for i in s.ids]
        pairs = [xs for level in plan.levels for xs in level]
        ts = upload(self.E.device, words, [s.label for s in sentences], sorted(set(words)), plan.root_perm,
                    *plan.root_rows, *pairs)
        words_t, labels, touched, perm = ts[:4]
        root_rows = ts[4 : 4 + len(plan.root_rows)]
        idx = ts[4 + len(plan.root_rows) :]
        x = self.E.index_select(0, words_t)
        roots = [x.index_select(0, root_rows[0])]
        for k in range(len(plan.levels)):
            p = F.linear(x, self.W_LR)
            x = torch.tanh(p[:, :h].index_select(0, idx[2 * k]) + p[:, h:].index_select(0, idx[2 * k + 1]) + self.b)
            roots.append(x.index_select(0, root_rows[k + 1]))
        root = torch.cat(roots, 0).index_select(0, perm)
        z = torch.tanh(F.linear(root, self.W_mlp, self.b_mlp))
        return F.linear(z, self.W_out, self.b_out), labels, touched

    def batch_loss(self, sentences):
        scores, labels, touched = self.scores(sentences)
        return F.cross_entropy(scores, labels, reduction="sum"), [touched]

    def predict(self, sentences):
        return [[p] for p in self.scores(sentences)[0].argmax(1).tolist()]


TASK = Task(
    name="td-rnn",
    kind="sentences",
    options={"hidden": 512, "embed": 512},
    create=lambda vocab, o: TdRnn(vocab.size, o["embed"], o["hidden"]),
    units=lambda s: 1,
)

if __name__ == "__main__":
    run_cli(TASK)
