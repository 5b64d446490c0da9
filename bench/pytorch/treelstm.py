"""PyTorch reference of vpps's Tree-LSTM (src/models/treelstm/model.ts, the DyNet benchmark's `treenn`), level-batched:
all leaves of a batch in one product, then every node of height 1, 2, … in one product per level.

Leaf: [i; o; u] = W_iou·E[w] + b_iou, c = σ(i)⊙tanh(u), h = σ(o)⊙tanh(c).
Node: [i; o; u] = U_iou·[h_l; h_r] + b_iou, f_l = U_f1·h_l + b_f, f_r = U_f2·h_r + b_f,
      c = σ(i)⊙tanh(u) + σ(f_l)⊙c_l + σ(f_r)⊙c_r, h = σ(o)⊙tanh(c).
Loss: softmax cross-entropy of W_out·h + b_out against the label at every node, summed; prediction: the root's.

    python3 bench/pytorch/treelstm.py train --data ../shared/data/sst --epochs 3 --seed 1 --json
    python3 bench/pytorch/treelstm.py bench --data ../shared/data/sst/train.txt --batches 1,8,32,128 --json
"""

import common as C
from torch_common import F, Task, matrix, nn, run_cli, table, torch, upload, vector


class TreeLstm(nn.Module):
    def __init__(self, vocab_size, embed, hidden, labels=C.SST_LABELS):
        super().__init__()
        h = hidden
        self.hidden = h
        self.E = table(vocab_size, embed)
        self.W_iou = matrix(3 * h, embed)
        self.U_iou = matrix(3 * h, 2 * h)
        self.U_f1 = matrix(h, h)
        self.U_f2 = matrix(h, h)
        self.b_iou = vector(3 * h)
        self.b_f = vector(h)
        self.W_out = matrix(labels, h)
        self.b_out = vector(labels)

    def tables(self):
        return [self.E]

    def load_vpps(self, w):
        for name in ("E", "W_iou", "U_iou", "U_f1", "U_f2", "b_iou", "b_f", "W_out", "b_out"):
            w.set(getattr(self, name), w[name], name)

    def run(self, flats):
        """Every node's h (numbered as the plan numbers them), the labels, the roots' numbers, the touched rows."""
        plan = C.tree_batch_plan(flats)
        pairs = [xs for level in plan.levels for xs in level]
        words, labels, roots, touched, *idx = upload(
            self.E.device, plan.leaf_words, plan.labels, plan.roots, sorted(set(plan.leaf_words)), *pairs
        )
        g = F.linear(self.E.index_select(0, words), self.W_iou, self.b_iou)
        i, o, u = g.chunk(3, 1)
        c_all = torch.sigmoid(i) * torch.tanh(u)
        h_all = torch.sigmoid(o) * torch.tanh(c_all)
        for k in range(len(plan.levels)):
            left, right = idx[2 * k], idx[2 * k + 1]
            hl, hr = h_all.index_select(0, left), h_all.index_select(0, right)
            i, o, u = F.linear(torch.cat([hl, hr], 1), self.U_iou, self.b_iou).chunk(3, 1)
            fl = F.linear(hl, self.U_f1, self.b_f)
            fr = F.linear(hr, self.U_f2, self.b_f)
            c = (
                torch.sigmoid(i) * torch.tanh(u)
                + torch.sigmoid(fl) * c_all.index_select(0, left)
                + torch.sigmoid(fr) * c_all.index_select(0, right)
            )
            h = torch.sigmoid(o) * torch.tanh(c)
            # the level's nodes are numbered right after every node below them
            h_all = torch.cat([h_all, h], 0)
            c_all = torch.cat([c_all, c], 0)
        return h_all, labels, roots, touched

    def batch_loss(self, flats):
        h_all, labels, _, touched = self.run(flats)
        scores = F.linear(h_all, self.W_out, self.b_out)
        return F.cross_entropy(scores, labels, reduction="sum"), [touched]

    def predict(self, flats):
        h_all, _, roots, _ = self.run(flats)
        scores = F.linear(h_all.index_select(0, roots), self.W_out, self.b_out)
        return [[p] for p in scores.argmax(1).tolist()]


TASK = Task(
    name="treelstm",
    kind="trees",
    options={"hidden": 256, "embed": 256},
    create=lambda vocab, o: TreeLstm(vocab.size, o["embed"], o["hidden"]),
    units=lambda flat: flat.size,
)

if __name__ == "__main__":
    run_cli(TASK)
