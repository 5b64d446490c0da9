"""PyTorch reference of vpps's BiLSTM tagger with character features (docs/MODELS.md
`bilstm-char`; the DyNet benchmark's bilstm-tagger-withchar): as bilstm.py, but a word seen fewer than --min-count
(5) times in training — or never — gets its vector from a character BiLSTM: character embeddings C (index 0: an
unknown character) → one cuDNN bidirectional LSTM, hidden embed/2 per direction, over the packed characters →
[f_last; b_last]. Each distinct rare word of a batch runs once (the same sum of gradients as once per occurrence).

    python3 bench/pytorch/bilstm-char.py train --data ../shared/data/wikiner --epochs 3 --seed 1 --json
"""

from bilstm import BiLstmTagger, load_lstm, pack_padded_sequence

import common as C
from torch_common import Task, lstm, run_cli, table, torch, upload

# vpps's names of the character model's parameters (the first-loss check of `vpps bench --reference`)
CHAR_TABLE = "C"
CHAR_DIRECTIONS = {"": ("Wx_cf", "Wh_cf", "b_cf"), "_reverse": ("Wx_cb", "Wh_cb", "b_cb")}


class CharTagger(BiLstmTagger):
    def __init__(self, vocab_size, chars, tags, embed, hidden, mlp, char_embed):
        if embed % 2:
            raise C.DataError(f"bilstm-char: --embed must be even (two character directions of embed/2); got {embed}")
        super().__init__(vocab_size, tags, embed, hidden, mlp)
        self.C = table(chars + 1, char_embed)
        self.char_lstm = lstm(char_embed, embed // 2)

    def tables(self):
        return [self.E_w, self.C]

    def load_vpps(self, w):
        super().load_vpps(w)
        w.set(self.C, w[CHAR_TABLE], CHAR_TABLE)
        load_lstm(w, self.char_lstm, self.embed_size // 2, CHAR_DIRECTIONS)

    def embed(self, sentences, order, width, extra):
        # distinct rare words (not in the table: index 0), longest first so that they pack as they are
        rare = {}
        for s in sentences:
            for i, chars in zip(s.ids, s.chars):
                if i == 0:
                    rare[chars] = 0
        words = sorted(rare, key=len, reverse=True)
        for k, chars in enumerate(words):
            rare[chars] = k
        # rows of [table rows of the frequent tokens; the rare words' vectors; one zero row for padding]
        frequent, gather = [], []
        for b in order:
            s = sentences[b]
            for i, chars in zip(s.ids, s.chars):
                if i != 0:
                    gather.append(len(frequent))
                    frequent.append(i)
                else:
                    gather.append(-1 - rare[chars])
            gather.extend([None] * (width - len(s.ids)))
        nf, nw = len(frequent), len(words)
        gather = [nf + nw if g is None else g if g >= 0 else nf - 1 - g for g in gather]
        char_width = len(words[0]) if words else 0
        char_ids = [c for w in words for c in list(w) + [0] * (char_width - len(w))]
        touched_w = sorted(set(frequent))
        touched_c = sorted({c for w in words for c in w})
        gather_t, frequent_t, chars_t, tw, tc, *rest = upload(
            self.E_w.device, gather, frequent, char_ids, touched_w, touched_c, *extra
        )
        rows = [self.E_w.index_select(0, frequent_t)]
        if words:
            x = self.C.index_select(0, chars_t).view(nw, char_width, -1)
            _, (h_n, _) = self.char_lstm(pack_padded_sequence(x, [len(w) for w in words], batch_first=True))
            rows.append(torch.cat([h_n[0], h_n[1]], 1))  # the forward and the backward direction's final states
        rows.append(self.E_w.new_zeros(1, self.embed_size))
        x = torch.cat(rows, 0).index_select(0, gather_t).view(len(order), width, -1)
        return x, [tw, tc], rest


TASK = Task(
    name="bilstm-char",
    kind="tagged",
    options={"embed": 256, "hidden": 256, "mlp": 256, "char_embed": 64, "min_count": 5},
    create=lambda vocab, o: CharTagger(
        vocab.size, len(vocab.chars), len(vocab.tags), o["embed"], o["hidden"], o["mlp"], o["char_embed"]
    ),
    units=lambda s: len(s.ids),
    vocabulary=lambda train, o: C.TaggerVocab(train, o["min_count"]),
)

if __name__ == "__main__":
    run_cli(TASK)
