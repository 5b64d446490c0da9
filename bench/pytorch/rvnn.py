"""PyTorch reference of vpps's RvNN (docs/MODELS.md `rvnn`): composition along the SST parse tree
with untied leaf and internal weights, level-batched (all leaves in one product, then every node of height 1, 2, …
in one product per level).

Leaf (preterminal): h = tanh(W_leaf·E[w] + b_leaf). Internal node: h = tanh(W_int·[h_l; h_r] + b_int).
Root: tanh(W_mlp·h + b_mlp) → W_out·· + b_out → softmax cross-entropy against the root's label (one per tree).

    python3 bench/pytorch/rvnn.py train --data ../shared/data/sst --epochs 3 --seed 1 --json
"""

import common as C
from torch_common import F, Task, matrix, nn, run_cli, table, torch, upload, vector


class RvNN(nn.Module):
    def __init__(self, vocab_size, embed, hidden, labels=C.SST_LABELS):
        super().__init__()
        h = hidden
        self.E = table(vocab_size, embed)
        self.W_leaf = matrix(h, embed)
        self.b_leaf = vector(h)
        self.W_int = matrix(h, 2 * h)
        self.b_int = vector(h)
        self.W_mlp = matrix(h, h)
        self.b_mlp = vector(h)
        self.W_out = matrix(labels, h)
        self.b_out = vector(labels)

    def tables(self):
        return [self.E]

    def load_vpps(self, w):
        for name in ("E", "W_leaf", "b_leaf", "W_int", "b_int", "W_mlp", "b_mlp", "W_out", "b_out"):
            w.set(getattr(self, name), w[name], name)

    def scores(self, flats):
        plan = C.tree_batch_plan(flats)
        pairs = [xs for level in plan.levels for xs in level]
        words, roots, root_labels, touched, *idx = upload(
            self.E.device, plan.leaf_words, plan.roots, plan.root_labels, sorted(set(plan.leaf_words)), *pairs
        )
        h_all = torch.tanh(F.linear(self.E.index_select(0, words), self.W_leaf, self.b_leaf))
        for k in range(len(plan.levels)):
            hl = h_all.index_select(0, idx[2 * k])
            hr = h_all.index_select(0, idx[2 * k + 1])
            h = torch.tanh(F.linear(torch.cat([hl, hr], 1), self.W_int, self.b_int))
            h_all = torch.cat([h_all, h], 0)
        z = torch.tanh(F.linear(h_all.index_select(0, roots), self.W_mlp, self.b_mlp))
        return F.linear(z, self.W_out, self.b_out), root_labels, touched

    def batch_loss(self, flats):
        scores, labels, touched = self.scores(flats)
        return F.cross_entropy(scores, labels, reduction="sum"), [touched]

    def predict(self, flats):
        return [[p] for p in self.scores(flats)[0].argmax(1).tolist()]


TASK = Task(
    name="rvnn",
    kind="trees",
    options={"hidden": 512, "embed": 512},
    create=lambda vocab, o: RvNN(vocab.size, o["embed"], o["hidden"]),
    units=lambda flat: 1,
)

if __name__ == "__main__":
    run_cli(TASK)
