"""A small GPT-2-style transformer trained in bf16 with PyTorch's default attention
(F.scaled_dot_product_attention, causal: cuDNN's attention on Hopper) - Hugging Face's
GPT2LMHeadModel when `transformers` is importable (built from a config, nothing downloaded),
else the same architecture in plain torch. It learns a fixed random token sequence; checks that
the loss falls below a third of its start, prints tokens/s of the steady steps and, through
Remora with REMORA_CALL_STATS=PATH, the call census per step (census.py).
Prints `PASS gpt_train: ...` or `FAIL gpt_train: ...`."""
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import census  # noqa: E402

VOCAB, CTX, LAYERS, HEADS, EMBD, BATCH = 4096, 256, 4, 8, 512, 16


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(EMBD), nn.LayerNorm(EMBD)
        self.qkv, self.proj = nn.Linear(EMBD, 3 * EMBD), nn.Linear(EMBD, EMBD)
        self.fc, self.out = nn.Linear(EMBD, 4 * EMBD), nn.Linear(4 * EMBD, EMBD)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(EMBD, dim=2)
        q, k, v = (z.view(b, t, HEADS, c // HEADS).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class PlainGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, EMBD), nn.Embedding(CTX, EMBD)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln = nn.LayerNorm(EMBD)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.ln(x) @ self.wte.weight.t()


def make_model():
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
        sizes = dict(vocab_size=VOCAB, n_positions=CTX, n_embd=EMBD, n_layer=LAYERS, n_head=HEADS)
        try:
            cfg = GPT2Config(attn_implementation="sdpa", **sizes)  # the default where sdpa exists
        except TypeError:
            cfg = GPT2Config(**sizes)
        model = GPT2LMHeadModel(cfg)
        attn = getattr(cfg, "_attn_implementation", "default")
        return model, "transformers GPT2LMHeadModel (%s attention)" % attn, lambda m, x: m(x).logits
    except Exception as e:  # not installed, or a version without sdpa: the same model in plain torch
        return PlainGPT(), "plain-torch GPT-2 (%s)" % type(e).__name__, lambda m, x: m(x)


torch.manual_seed(0)
model, kind, logits_of = make_model()
model = model.cuda().train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
data = torch.randint(0, VOCAB, (BATCH, CTX + 1), device="cuda")
x, y = data[:, :-1], data[:, 1:]


def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = logits_of(model, x)
        loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), y.reshape(-1))
    loss.backward()
    opt.step()
    return loss.item()  # a training loop's own synchronisation


first = step()
for _ in range(9):
    step()
steps = 20
with census.Interval():
    t = time.perf_counter()
    for _ in range(steps):
        last = step()
    elapsed = time.perf_counter() - t
for _ in range(30):
    last = step()
ok = census.report("gpt_train", steps)
tokens = BATCH * CTX * steps / elapsed
print("gpt_train: %s, %d tokens/s, loss %.3f -> %.3f" % (kind, tokens, first, last))
if not (math.isfinite(last) and last < first / 3):
    print("FAIL gpt_train: the loss did not fall enough (%.3f -> %.3f)" % (first, last))
    sys.exit(1)
if not ok:
    sys.exit(1)
print("PASS gpt_train: %s trained in bf16 with default attention, loss %.3f -> %.3f, %.0f tokens/s" % (kind, first, last, tokens))
