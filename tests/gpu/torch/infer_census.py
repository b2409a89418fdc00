"""Issue 45's inference workloads, each with Remora's call census (census.py):
  item     `(x + 1).sum().item()` in a loop: one tiny kernel pair and one read-back per step
  decode   GPT-2-style greedy decoding with a KV cache (Hugging Face's GPT2LMHeadModel built from a
           config, nothing downloaded; plain torch if transformers is missing), one token per step,
           the next token read back with .item() as a generation loop does
Prints `item: N us/step`, `decode: N ms/token` and `PASS/FAIL infer_census: ...`; through Remora
(REMORA_CALL_STATS=PATH) the census fails a step that waits on more than its one read-back."""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import census  # noqa: E402

ok = True
torch.manual_seed(0)
if os.environ.get("INFER_NO_CUDNN_SDPA") == "1":  # to tell cuDNN's attention apart from the rest
    torch.backends.cuda.enable_cudnn_sdp(False)
    print("decode: cuDNN's attention disabled (INFER_NO_CUDNN_SDPA=1)")

# ---- the .item() loop --------------------------------------------------------------------
x = torch.randn(1024, device="cuda")
for _ in range(200):
    (x + 1).sum().item()
steps = 2000
with census.Interval():
    t = time.perf_counter()
    for _ in range(steps):
        (x + 1).sum().item()
    elapsed = time.perf_counter() - t
print("item: %.2f us/step" % (elapsed / steps * 1e6))
ok &= census.report("item", steps)

# ---- greedy decoding -----------------------------------------------------------------------
VOCAB, CTX, LAYERS, HEADS, EMBD = 50257, 1024, 12, 12, 768  # GPT-2 (124M)
try:
    from transformers import GPT2Config, GPT2LMHeadModel
    model = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=CTX, n_embd=EMBD, n_layer=LAYERS, n_head=HEADS))
    kind = "transformers GPT2LMHeadModel"
except Exception as e:  # noqa: BLE001
    print("SKIP decode: transformers unavailable (%s)" % type(e).__name__)
    model = None
if model is not None:
    model = model.cuda().eval().half()
    prompt = torch.randint(0, VOCAB, (1, 32), device="cuda")

    def generate(n):
        with torch.inference_mode():
            out = model(prompt, use_cache=True)
            past, tok = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
            toks = []
            for _ in range(n):
                toks.append(tok.item())  # the loop's own read-back
                out = model(tok, past_key_values=past, use_cache=True)
                past, tok = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
            return toks

    first = generate(16)
    n = 128
    with census.Interval():
        t = time.perf_counter()
        toks = generate(n)
        elapsed = time.perf_counter() - t
    print("decode: %s, %.3f ms/token" % (kind, elapsed / n * 1e3))
    # The prompt's forward pass is inside the interval too: it is one more synchronisation-free pass.
    # PyTorch's caching allocator still grows now and then (a cudaMalloc must return its
    # pointer): up to 0.05 such round trips per token are the application's, not Remora's.
    ok &= census.report("decode", n, allowed_other=0.05)
    if toks[:16] != first:
        print("FAIL infer_census: greedy decoding is not deterministic (%s vs %s)" % (toks[:16], first))
        ok = False
print("%s infer_census" % ("PASS" if ok else "FAIL"))
sys.exit(0 if ok else 1)
