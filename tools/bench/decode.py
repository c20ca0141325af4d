#!/usr/bin/python3
"""The decoding benchmark: dlrun generate against PyTorch on a
GPT-2-small-shaped decoder (tools/bench/gpt2.yaml's layers with a symbolic
token input and 1024 learned positions), prompt P tokens, N new tokens,
greedy, at batch 1 and 8, 1 and 2 threads.

  dlrun:           `dlrun generate --verbose` (its KV caches; the time per
                   decoding step after the prompts)
  PyTorch, cached: a past_key_values loop written here, the way Hugging
                   Face decodes GPT-2 (keys and values of earlier positions
                   kept per layer, the new token's attention against them)
  PyTorch, nanoGPT: nanoGPT's generate (the whole context recomputed each
                   step, cropped at the block size)

Each side runs in its own process, so each has its own peak RSS
(/usr/bin/time). Random weights of the same shapes on both sides (the
timing does not depend on their values). Also: a token at context 512
against a full forward of 511 tokens (dlrun), and the weight-reading bound
at batch 1: the bytes of the weights a step reads (every layer and the LM
head; one embedding row) over the memory bandwidth that numpy's sum of a
1 GiB array measures.

  /usr/bin/python3 tools/bench/decode.py [--dlrun src/dlrun] [--prompt 64]
                   [--new 256] [--batches 1,8] [--threads 1,2] [--no-nanogpt]
                   [--nanogpt-batches 1]

Prints a Markdown table (ms per step, new tokens per second, peak RSS).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
V, E, H, L, F, CTX = 50257, 768, 12, 12, 3072, 1024

YAML = """# tools/bench/decode.py: gpt2.yaml's decoder with a symbolic token input
name: gpt2-decode
inputs:
  x: {shape: [T], dtype: int}
layers:
  - name: wte
    embedding: {num_embeddings: %d, embedding_dim: %d}
  - name: wpe
    positional_encoding: {kind: learned, max_len: %d}
  - name: h
    repeat:
      times: %d
      body:
        - transformer_encoder_layer: {nhead: %d, dim_feedforward: %d, dropout: 0.0,
                                      activation: gelu, norm_first: true, causal: true}
  - name: ln_f
    layer_norm: {}
  - name: lm_head
    linear: {out_features: %d, bias: false}
""" % (V, E, CTX, L, H, F, V)


def prompts(n, p, seed=0):
    import random
    r = random.Random(seed)
    return [[r.randrange(V) for _ in range(p)] for _ in range(n)]


def run_time(cmd, stdin=None, env=None):
    """runs cmd under /usr/bin/time; returns (stdout, stderr, peak MiB)"""
    r = subprocess.run(['/usr/bin/time', '-f', 'maxrss %M'] + cmd, input=stdin,
                       capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit('failed: %s\n%s' % (' '.join(cmd), r.stderr))
    m = re.search(r'maxrss (\d+)', r.stderr)
    return r.stdout, r.stderr, int(m.group(1)) / 1024.0 if m else float('nan')


def dlrun_side(a, model, weights, B, T, P, N):
    lines = '\n'.join(' '.join(map(str, p)) for p in prompts(B, P)) + '\n'
    env = dict(os.environ)
    out, err, rss = run_time([a.dlrun, 'generate', model, '-w', weights, '--prompt-format', 'ids',
                              '-n', str(N), '--greedy', '--format', 'ids', '--verbose',
                              '--threads', str(T), '--context', str(CTX)], lines, env)
    m = re.search(r'in ([0-9.]+) ms \(([0-9.]+) prompt tokens/s\); (\d+) more new tokens in '
                  r'([0-9.]+) ms \(([0-9.]+) ms per step', err)
    if not m:
        sys.exit('no timing in: ' + err)
    return {'prompt_ms': float(m.group(1)), 'step_ms': float(m.group(5)), 'rss': rss}


def torch_worker(mode, B, T, P, N):
    import torch
    import torch.nn as nn
    import torch.nn.functional as Fn
    torch.set_num_threads(T)
    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(E)
            self.c_attn = nn.Linear(E, 3 * E)
            self.c_proj = nn.Linear(E, E)
            self.ln_2 = nn.LayerNorm(E)
            self.c_fc = nn.Linear(E, F)
            self.mlp_proj = nn.Linear(F, E)

        def forward(self, x, past=None):
            Bq, Tq, _ = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(E, 2)
            q = q.view(Bq, Tq, H, E // H).transpose(1, 2)
            k = k.view(Bq, Tq, H, E // H).transpose(1, 2)
            v = v.view(Bq, Tq, H, E // H).transpose(1, 2)
            if past is not None:
                k = torch.cat([past[0], k], 2)
                v = torch.cat([past[1], v], 2)
            S = k.shape[2]
            att = (q @ k.transpose(-2, -1)) * (1.0 / (E // H) ** 0.5)
            if Tq > 1:
                mask = torch.ones(Tq, S, dtype=torch.bool).tril(S - Tq)
                att = att.masked_fill(~mask, float('-inf'))
            y = (att.softmax(-1) @ v).transpose(1, 2).reshape(Bq, Tq, E)
            x = x + self.c_proj(y)
            x = x + self.mlp_proj(Fn.gelu(self.c_fc(self.ln_2(x))))
            return x, (k, v)

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(V, E)
            self.wpe = nn.Embedding(CTX, E)
            self.h = nn.ModuleList([Block() for _ in range(L)])
            self.ln_f = nn.LayerNorm(E)
            self.lm_head = nn.Linear(E, V, bias=False)

        def forward(self, idx, past=None, pos0=0):
            x = self.wte(idx) + self.wpe(torch.arange(pos0, pos0 + idx.shape[1]))
            new = []
            for i, b in enumerate(self.h):
                x, kv = b(x, past[i] if past is not None else None)
                new.append(kv)
            return self.lm_head(self.ln_f(x)), new

    m = GPT().eval()
    idx = torch.tensor(prompts(B, P))
    with torch.no_grad():
        t0 = time.perf_counter()
        if mode == 'cached':
            logits, past = m(idx)
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            t1 = time.perf_counter()
            for t in range(N - 1):
                logits, past = m(nxt, past, P + t)
                nxt = logits[:, -1].argmax(-1, keepdim=True)
        else:  # nanoGPT's generate: recompute, crop at the block size
            t1 = None
            for t in range(N):
                cond = idx if idx.shape[1] <= CTX else idx[:, -CTX:]
                logits, _ = m(cond)
                nxt = logits[:, -1].argmax(-1, keepdim=True)
                idx = torch.cat([idx, nxt], 1)
                if t1 is None:
                    t1 = time.perf_counter()
        t2 = time.perf_counter()
    print(json.dumps({'prompt_ms': 1e3 * (t1 - t0), 'step_ms': 1e3 * (t2 - t1) / (N - 1)}))


def torch_side(mode, B, T, P, N):
    env = dict(os.environ, OMP_NUM_THREADS=str(T), OPENBLAS_NUM_THREADS=str(T))
    out, err, rss = run_time([sys.executable, os.path.abspath(__file__), '--torch-worker', mode,
                              str(B), str(T), str(P), str(N)], None, env)
    r = json.loads(out.strip().splitlines()[-1])
    r['rss'] = rss
    return r


def bandwidth():
    import numpy as np
    a = np.ones(1 << 28, dtype=np.float32)   # 1 GiB
    a.sum()
    best = 0.0
    for _ in range(5):
        t = time.perf_counter()
        a.sum()
        best = max(best, a.nbytes / (time.perf_counter() - t))
    return best


def main():
    if len(sys.argv) > 1 and sys.argv[1] == '--torch-worker':
        torch_worker(sys.argv[2], *map(int, sys.argv[3:7]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument('--dlrun', default=os.path.join(HERE, '..', '..', 'src', 'dlrun'))
    ap.add_argument('--prompt', type=int, default=64)
    ap.add_argument('--new', type=int, default=256)
    ap.add_argument('--batches', default='1,8')
    ap.add_argument('--threads', default='1,2')
    ap.add_argument('--no-nanogpt', action='store_true')
    ap.add_argument('--nanogpt-batches', default='1',
                    help='batches at which to run nanoGPT\'s recompute (slow: the whole context '
                         'each step); default 1')
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix='dlrun-decode-')
    model = os.path.join(d, 'gpt2-decode.yaml')
    weights = os.path.join(d, 'gpt2-decode.safetensors')
    with open(model, 'w') as f:
        f.write(YAML)
    print('# writing random weights ...', file=sys.stderr)
    subprocess.run([a.dlrun, 'init', model, '-o', weights, '--seed', '0'], check=True)
    P, N = a.prompt, a.new
    rows = []
    for B in map(int, a.batches.split(',')):
        for T in map(int, a.threads.split(',')):
            print('# batch %d, %d thread(s) ...' % (B, T), file=sys.stderr)
            dl = dlrun_side(a, model, weights, B, T, P, N)
            tc = torch_side('cached', B, T, P, N)
            nb = [int(x) for x in a.nanogpt_batches.split(',') if x]
            tn = None if a.no_nanogpt or B not in nb else torch_side('nanogpt', B, T, P, N)
            rows.append((B, T, dl, tc, tn))
    wbytes = 4 * (L * (4 * E * E + 2 * E * F + 3 * E + E + F + E + 4 * E) + E * V + 2 * E)
    bw = bandwidth()
    # a token at context 512 against a full forward of 511 tokens
    c = dlrun_side(a, model, weights, 1, 1, 511, 3)
    print('\n| batch | threads | dlrun ms/step | PyTorch KV-cache ms/step | dlrun / cached |'
          ' PyTorch nanoGPT ms/step | dlrun / nanoGPT | dlrun tokens/s | peak RSS MiB dlrun / cached /'
          ' nanoGPT |')
    print('| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |')
    for B, T, dl, tc, tn in rows:
        print('| %d | %d | %.2f | %.2f | %.2f | %s | %s | %.0f | %.0f / %.0f / %s |' % (
            B, T, dl['step_ms'], tc['step_ms'], dl['step_ms'] / tc['step_ms'],
            '%.2f' % tn['step_ms'] if tn else '-',
            '%.3f' % (dl['step_ms'] / tn['step_ms']) if tn else '-',
            1e3 * B / dl['step_ms'], dl['rss'], tc['rss'], '%.0f' % tn['rss'] if tn else '-'))
    print('\nPrompt of %d tokens, %d new tokens, greedy. Weights a step reads: %.0f MB; '
          'memory bandwidth (numpy sum of 1 GiB): %.1f GB/s; bound at batch 1: %.2f ms/step.'
          % (P, N, wbytes / 1e6, bw / 1e9, 1e3 * wbytes / bw))
    print('A token at context 512: %.2f ms; the 511-token prompt (a full forward and the first '
          'token): %.1f ms; ratio %.3f.' % (c['step_ms'], c['prompt_ms'],
                                             c['step_ms'] / c['prompt_ms']))
    subprocess.run(['rm', '-rf', d])


if __name__ == '__main__':
    main()
