"""PyTorch reference of vpps's TD-LSTM (docs/MODELS.md `td-lstm`): the TD-RNN's pyramid with the
binary Tree-LSTM cell, level-batched — level k of every sentence of the batch is one product and one cell pass.

Leaves: [i; o; u] = W_leaf·E[word] + b_leaf, c = σ(i)⊙tanh(u), h = σ(o)⊙tanh(c).
Adjacent nodes l = i, r = i+1 of the level below: [i; o; u; f_l; f_r] = U_l·h_l + U_r·h_r + b_node,
c = σ(i)⊙tanh(u) + σ(f_l)⊙c_l + σ(f_r)⊙c_r, h = σ(o)⊙tanh(c). U_l and U_r are one stacked [10H, H] product per
level (each node multiplied once), then gathered. Root h → tanh(W_mlp·h + b_mlp) → W_out·· + b_out → softmax loss.

    python3 bench/pytorch/td-lstm.py train --data ../shared/data/sst --epochs 3 --seed 1 --json
"""

import common as C
from torch_common import F, Task, matrix, nn, run_cli, stacked, table, torch, upload, vector


class TdLstm(nn.Module):
    def __init__(self, vocab_size, embed, hidden, labels=C.SST_LABELS):
        super().__init__()
        h = hidden
        self.hidden = h
        self.E = table(vocab_size, embed)
        self.W_leaf = matrix(3 * h, embed)
        self.b_leaf = vector(3 * h)
        self.U_lr = stacked((5 * h, h), (5 * h, h))  # [U_l; U_r]
        self.b_node = vector(5 * h)
        self.W_mlp = matrix(h, h)
        self.b_mlp = vector(h)
        self.W_out = matrix(labels, h)
        self.b_out = vector(labels)

    def tables(self):
        return [self.E]

    def load_vpps(self, w):
        w.set(self.U_lr, torch.cat([w["U_l"], w["U_r"]], 0), "U_l; U_r")
        for name in ("E", "W_leaf", "b_leaf", "b_node", "W_mlp", "b_mlp", "W_out", "b_out"):
            w.set(getattr(self, name), w[name], name)

    def scores(self, sentences):
        g5 = 5 * self.hidden
        plan = C.pyramid_plan([len(s.ids) for s in sentences])
        words = [i for s in sentences for i in s.ids]
        pairs = [xs for level in plan.levels for xs in level]
        ts = upload(self.E.device, words, [s.label for s in sentences], sorted(set(words)), plan.root_perm,
                    *plan.root_rows, *pairs)
        words_t, labels, touched, perm = ts[:4]
        root_rows = ts[4 : 4 + len(plan.root_rows)]
        idx = ts[4 + len(plan.root_rows) :]
        i, o, u = F.linear(self.E.index_select(0, words_t), self.W_leaf, self.b_leaf).chunk(3, 1)
        c = torch.sigmoid(i) * torch.tanh(u)
        h = torch.sigmoid(o) * torch.tanh(c)
        roots = [h.index_select(0, root_rows[0])]
        for k in range(len(plan.levels)):
            left, right = idx[2 * k], idx[2 * k + 1]
            p = F.linear(h, self.U_lr)
            gates = p[:, :g5].index_select(0, left) + p[:, g5:].index_select(0, right) + self.b_node
            i, o, u, fl, fr = gates.chunk(5, 1)
            c = (
                torch.sigmoid(i) * torch.tanh(u)
                + torch.sigmoid(fl) * c.index_select(0, left)
                + torch.sigmoid(fr) * c.index_select(0, right)
            )
            h = torch.sigmoid(o) * torch.tanh(c)
            roots.append(h.index_select(0, root_rows[k + 1]))
        root = torch.cat(roots, 0).index_select(0, perm)
        z = torch.tanh(F.linear(root, self.W_mlp, self.b_mlp))
        return F.linear(z, self.W_out, self.b_out), labels, touched

    def batch_loss(self, sentences):
        scores, labels, touched = self.scores(sentences)
        return F.cross_entropy(scores, labels, reduction="sum"), [touched]

    def predict(self, sentences):
        return [[p] for p in self.scores(sentences)[0].argmax(1).tolist()]


TASK = Task(
    name="td-lstm",
    kind="sentences",
    options={"hidden": 256, "embed": 256},
    create=lambda vocab, o: TdLstm(vocab.size, o["embed"], o["hidden"]),
    units=lambda s: 1,
)

if __name__ == "__main__":
    run_cli(TASK)
