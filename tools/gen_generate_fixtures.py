#!/usr/bin/python3
"""Greedy decoding references for `dlrun generate` (tests/generate.sh):
PyTorch models written the way users write them -- a nanoGPT-style
character GPT (learned positions, nn.MultiheadAttention with a causal
mask, cropping the context to its block size as nanoGPT's generate), an
LSTM language model, and a Bahdanau encoder-decoder (bidirectional GRU
encoder, additive attention, GRUCell decoder) -- each decoded greedily
with the whole context recomputed at every step. Writes, per model, the
weights under dlrun's keys (tests/data/generate/NAME.safetensors) and the
prompts with their expected new ids (NAME.expected: `PROMPT_IDS | NEW_IDS`
per line). The model files are the .yaml files beside them.

Run with Debian's python3: /usr/bin/python3 tools/gen_generate_fixtures.py
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dltools  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'tests', 'data', 'generate')


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, h, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.proj = nn.Linear(4 * d, d)

    def forward(self, x):
        T = x.shape[1]
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.proj(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, V=16, d=16, h=2, L=2, block=12):
        super().__init__()
        self.block = block
        self.wte = nn.Embedding(V, d)
        self.wpe = nn.Embedding(block, d)
        self.blocks = nn.ModuleList([Block(d, h) for _ in range(L)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, V, bias=False)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        return self.lm_head(self.ln_f(x))

    def keys(self):
        sd = {'wte.weight': self.wte.weight, 'wpe.weight': self.wpe.weight,
              'ln_f.weight': self.ln_f.weight, 'ln_f.bias': self.ln_f.bias,
              'lm_head.weight': self.lm_head.weight}
        for i, b in enumerate(self.blocks):
            p = 'blocks.%d.' % i
            sd[p + '0.0.weight'] = b.ln1.weight
            sd[p + '0.0.bias'] = b.ln1.bias
            sd[p + '0.1.in_proj_weight'] = b.attn.in_proj_weight
            sd[p + '0.1.in_proj_bias'] = b.attn.in_proj_bias
            sd[p + '0.1.out_proj.weight'] = b.attn.out_proj.weight
            sd[p + '0.1.out_proj.bias'] = b.attn.out_proj.bias
            sd[p + '1.0.weight'] = b.ln2.weight
            sd[p + '1.0.bias'] = b.ln2.bias
            sd[p + '1.1.weight'] = b.fc.weight
            sd[p + '1.1.bias'] = b.fc.bias
            sd[p + '1.3.weight'] = b.proj.weight
            sd[p + '1.3.bias'] = b.proj.bias
        return sd


class LSTMLM(nn.Module):
    def __init__(self, V=13, e=8, h=16):
        super().__init__()
        self.emb = nn.Embedding(V, e)
        self.lstm = nn.LSTM(e, h, num_layers=2, batch_first=True)
        self.head = nn.Linear(h, V)

    def forward(self, idx):
        return self.head(self.lstm(self.emb(idx))[0])

    def keys(self):
        sd = {'emb.weight': self.emb.weight, 'head.weight': self.head.weight,
              'head.bias': self.head.bias}
        for k, v in self.lstm.state_dict(keep_vars=True).items():
            sd['lstm.' + k] = v
        return sd


class Bahdanau(nn.Module):
    """Encoder: embedding + bidirectional GRU. Decoder step t: context =
    softmax(w2 tanh(W [h_(t-1); m_j])) M, h_t = GRUCell([x_t; c_t],
    h_(t-1)), logits = out(h_t)."""

    def __init__(self, V=10, e=6, he=4, hd=8, A=5):
        super().__init__()
        self.src_emb = nn.Embedding(V, e)
        self.encoder = nn.GRU(e, he, batch_first=True, bidirectional=True)
        self.tgt_emb = nn.Embedding(V, e)
        self.cell = nn.GRUCell(e + 2 * he, hd)
        self.w = nn.Linear(hd + 2 * he, A, bias=False)
        self.w2 = nn.Linear(A, 1, bias=False)
        self.out = nn.Linear(hd, V)
        self.hd = hd

    def forward(self, tgt, src):
        M = self.encoder(self.src_emb(src))[0]            # [N, S, 2he]
        x = self.tgt_emb(tgt)
        h = torch.zeros(tgt.shape[0], self.hd)
        ys = []
        for t in range(tgt.shape[1]):
            q = h.unsqueeze(1).expand(-1, M.shape[1], -1)
            s = self.w2(torch.tanh(self.w(torch.cat([q, M], -1)))).squeeze(-1)
            c = torch.bmm(torch.softmax(s, -1).unsqueeze(1), M).squeeze(1)
            h = self.cell(torch.cat([x[:, t], c], -1), h)
            ys.append(h)
        return self.out(torch.stack(ys, 1))

    def keys(self):
        sd = {'src_emb.weight': self.src_emb.weight, 'tgt_emb.weight': self.tgt_emb.weight,
              'decoder.cell.weight_ih': self.cell.weight_ih,
              'decoder.cell.weight_hh': self.cell.weight_hh,
              'decoder.cell.bias_ih': self.cell.bias_ih,
              'decoder.cell.bias_hh': self.cell.bias_hh,
              'decoder.w.weight': self.w.weight, 'decoder.w2.weight': self.w2.weight,
              'out.weight': self.out.weight, 'out.bias': self.out.bias}
        for k, v in self.encoder.state_dict(keep_vars=True).items():
            sd['encoder.' + k] = v
        return sd


@torch.no_grad()
def greedy(model, prompt, n, block=None, src=None):
    idx = torch.tensor([prompt])
    new = []
    for _ in range(n):
        ctx = idx if block is None else idx[:, -block:]
        logits = model(ctx) if src is None else model(ctx, torch.tensor([src]))
        nxt = int(torch.argmax(logits[0, -1]))
        new.append(nxt)
        idx = torch.cat([idx, torch.tensor([[nxt]])], 1)
    return new


def save(name, model, cases):
    sd = {k: v.detach().numpy() for k, v in model.keys().items()}
    dltools.write_safetensors(os.path.join(OUT, name + '.safetensors'), sd)
    with open(os.path.join(OUT, name + '.expected'), 'w') as f:
        for prompt, src, new in cases:
            line = ' '.join(map(str, prompt))
            if src is not None:
                line += ' | ' + ' '.join(map(str, src))
            f.write(line + ' || ' + ' '.join(map(str, new)) + '\n')


def main():
    torch.manual_seed(0)
    gpt = GPT().eval()
    # 20 new tokens from a block of 12: the context is cropped
    save('gpt-torch', gpt, [(p, None, greedy(gpt, p, 20, gpt.block))
                            for p in ([2, 3, 4], [5], [1, 9, 9, 3, 7, 0])])
    torch.manual_seed(1)
    lm = LSTMLM().eval()
    save('lstm-torch', lm, [(p, None, greedy(lm, p, 15)) for p in ([1, 2], [7, 7, 7, 3])])
    torch.manual_seed(2)
    s2s = Bahdanau().eval()
    save('bahdanau-torch', s2s, [([1], s, greedy(s2s, [1], 8, src=s))
                                  for s in ([3, 4, 5, 6], [9, 2, 2, 8, 7, 6, 1])])


if __name__ == '__main__':
    main()
