"""PyTorch's scaled_dot_product_attention in fp16 and bf16, causal and not, forward and
backward, against the math backend in fp32 on the same inputs: with the default backend choice
(on Hopper PyTorch 2.11 picks cuDNN's attention, cudnn-frontend's graph with a by-value scale)
and with cuDNN's attention asked for explicitly. Prints `PASS name: ...`/`FAIL name: ...` per
check and a last `PASS sdpa_check` line; exit 1 on any failure. Natively and through Remora
(tests/gpu/torch/cudnn-gpu.sh)."""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

torch.manual_seed(0)
failures = 0


def check(name, ok, detail):
    global failures
    print("%s %s: %s" % ("PASS" if ok else "FAIL", name, detail))
    failures += 0 if ok else 1


def run(q, k, v, causal, backends):
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    with sdpa_kernel(backends) if backends else _nothing():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    g = torch.randn_like(out, generator=None)
    out.backward(g)
    return out, (q.grad, k.grad, v.grad), g


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def reference(q, k, v, causal, g):
    q, k, v = (t.detach().float().clone().requires_grad_(True) for t in (q, k, v))
    with sdpa_kernel([SDPBackend.MATH]):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    out.backward(g.float())
    return out, (q.grad, k.grad, v.grad)


def rel_err(a, b):
    return ((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-6)).item()


B, H, S, D = 2, 8, 512, 64
cudnn_ok = torch.backends.cudnn.is_available() and torch.backends.cuda.cudnn_sdp_enabled()
for dtype, tol in ((torch.float16, 2e-2), (torch.bfloat16, 6e-2)):
    for causal in (False, True):
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=dtype) for _ in range(3))
        for label, backends in (("default", None), ("cudnn", [SDPBackend.CUDNN_ATTENTION])):
            if backends and not cudnn_ok:
                print("SKIP sdpa %s: cuDNN attention is not available in this PyTorch" % label)
                continue
            name = "sdpa %s %s %s" % (label, str(dtype).split(".")[-1], "causal" if causal else "full")
            try:
                torch.manual_seed(1)
                out, grads, g = run(q, k, v, causal, backends)
                torch.cuda.synchronize()
            except RuntimeError as e:
                check(name, False, "raised %s" % str(e).splitlines()[0])
                continue
            ref_out, ref_grads = reference(q, k, v, causal, g)
            errs = [rel_err(out, ref_out)] + [rel_err(a, b) for a, b in zip(grads, ref_grads)]
            check(name, max(errs) < tol, "relative errors out %.2e, dq %.2e, dk %.2e, dv %.2e (tolerance %.0e)" %
                  (*errs, tol))

# Repeated calls reuse cudnn-frontend's cached graph: the steady state a training step sees.
if cudnn_ok:
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        first = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        for _ in range(50):
            again = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.cuda.synchronize()
    diff = rel_err(again, first)
    check("sdpa cudnn repeated", diff <= 1e-3, "50 more calls on the cached graph agree with the first (relative %.1e)" % diff)

if failures:
    print("FAIL sdpa_check: %d check(s) failed" % failures)
    sys.exit(1)
print("PASS sdpa_check: every check passed")
