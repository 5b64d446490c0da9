"""PyTorch reference of vpps's BiLSTM tagger (docs/MODELS.md `bilstm`; the DyNet benchmark's
bilstm-tagger): word embeddings → one cuDNN bidirectional LSTM over the packed batch → [f_t; b_t] →
tanh(W_mlp·· + b_mlp) → W_out·· + b_out → softmax cross-entropy against each word's tag, summed.

The batch is sorted longest first and packed (pack_padded_sequence): the packed rows are in a known order
(time-major, then sentence), so the gold tags are laid out in that order on the host and uploaded with the indices.

    python3 bench/pytorch/bilstm.py train --data ../shared/data/wikiner --epochs 3 --seed 1 --json
"""

from torch_common import F, Task, lstm, matrix, nn, run_cli, table, torch, torch_gates, upload, vector

pack_padded_sequence = nn.utils.rnn.pack_padded_sequence

# vpps's parameter names (the weights `vpps bench --reference` hands over for the first-loss check), by direction
DIRECTIONS = {"": ("Wx_f", "Wh_f", "b_f"), "_reverse": ("Wx_b", "Wh_b", "b_b")}


def load_lstm(w, layer, hidden, names):
    """vpps's LSTM weights (gates [i; o; u; f], one bias) into an nn.LSTM layer; `names`: suffix → (W_x, W_h, b)."""
    for suffix, (wx, wh, b) in names.items():
        w.set(getattr(layer, f"weight_ih_l0{suffix}"), torch_gates(w[wx], hidden), wx)
        w.set(getattr(layer, f"weight_hh_l0{suffix}"), torch_gates(w[wh], hidden), wh)
        w.set(getattr(layer, f"bias_ih_l0{suffix}"), torch_gates(w[b], hidden), b)
        getattr(layer, f"bias_hh_l0{suffix}").data.zero_()


class BiLstmTagger(nn.Module):
    def __init__(self, vocab_size, tags, embed, hidden, mlp):
        super().__init__()
        self.embed_size = embed
        self.hidden = hidden
        self.E_w = table(vocab_size, embed)
        self.lstm = lstm(embed, hidden)
        self.W_mlp = matrix(mlp, 2 * hidden)
        self.b_mlp = vector(mlp)
        self.W_out = matrix(tags, mlp)
        self.b_out = vector(tags)

    def tables(self):
        return [self.E_w]

    def load_vpps(self, w):
        load_lstm(w, self.lstm, self.hidden, DIRECTIONS)
        for name in ("E_w", "W_mlp", "b_mlp", "W_out", "b_out"):
            w.set(getattr(self, name), w[name], name)

    def embed(self, sentences, order, width, extra):
        """The word vectors [B, width, E] of the sentences in `order` (padded), the touched rows of each table, and
        the `extra` index lists uploaded with them."""
        ids = []
        for b in order:
            s = sentences[b].ids
            ids.extend(s)
            ids.extend([0] * (width - len(s)))
        touched = sorted({i for s in sentences for i in s.ids})
        ids_t, touched_t, *rest = upload(self.E_w.device, ids, touched, *extra)
        return self.E_w.index_select(0, ids_t).view(len(order), width, -1), [touched_t], rest

    def scores(self, sentences):
        """Class scores per word in packed order, the gold tags in that order, touched rows, and which (sentence,
        position) each packed row is."""
        order = sorted(range(len(sentences)), key=lambda b: -len(sentences[b].ids))  # stable: longest first
        lengths = [len(sentences[b].ids) for b in order]
        packed = []
        for t in range(lengths[0]):
            for b in order:
                if len(sentences[b].ids) <= t:
                    break
                packed.append((b, t))
        gold = [sentences[b].tags[t] for b, t in packed]
        x, touched, (gold_t,) = self.embed(sentences, order, lengths[0], [gold])
        out, _ = self.lstm(pack_padded_sequence(x, lengths, batch_first=True))
        z = torch.tanh(F.linear(out.data, self.W_mlp, self.b_mlp))
        return F.linear(z, self.W_out, self.b_out), gold_t, touched, packed

    def batch_loss(self, sentences):
        scores, gold, touched, _ = self.scores(sentences)
        return F.cross_entropy(scores, gold, reduction="sum"), touched

    def predict(self, sentences):
        scores, _, _, packed = self.scores(sentences)
        out = [[0] * len(s.ids) for s in sentences]
        for (b, t), p in zip(packed, scores.argmax(1).tolist()):
            out[b][t] = p
        return out


TASK = Task(
    name="bilstm",
    kind="tagged",
    options={"embed": 256, "hidden": 256, "mlp": 256},
    create=lambda vocab, o: BiLstmTagger(vocab.size, len(vocab.tags), o["embed"], o["hidden"], o["mlp"]),
    units=lambda s: len(s.ids),
)

if __name__ == "__main__":
    run_cli(TASK)
