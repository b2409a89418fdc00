"""PyTorch through Remora: one line per check, `PASS torch_basics` at the end (exit 0) or
`FAIL <check>: ...` (exit 1). Runs unchanged natively and remoted (remora-run), so the two can
be compared; every result is checked against the CPU or against eager mode.

  torch_basics.py [--quota-mib N]   with N: the tenant's limit, which mem_get_info must report
                                    and which expandable segments must hit (OutOfMemoryError)
"""
import argparse
import os
import sys
import traceback

import torch

failures = []


def check(name, fn):
    try:
        detail = fn()
        print("ok   %-22s %s" % (name, "" if detail is None else detail), flush=True)
    except Exception as e:  # noqa: BLE001 - report every failure and go on
        failures.append(name)
        print("FAIL %s: %s: %s" % (name, type(e).__name__, str(e).splitlines()[0] if str(e) else ""), flush=True)
        traceback.print_exc()


def close(a, b, tol=1e-4):
    a, b = a.detach().float().cpu(), b.detach().float().cpu()
    if a.shape != b.shape or not torch.allclose(a, b, rtol=tol, atol=tol):
        raise AssertionError("max error %g" % (a - b).abs().max().item())


ap = argparse.ArgumentParser()
ap.add_argument("--quota-mib", type=int, default=0)
args = ap.parse_args()
torch.manual_seed(0)


def init():
    torch.cuda.init()
    assert torch.cuda.is_available()
    return "%d device(s), %s, capability %s" % (torch.cuda.device_count(), torch.cuda.get_device_name(0),
                                               torch.cuda.get_device_capability(0))


def mem_info():
    free, total = torch.cuda.mem_get_info()
    if args.quota_mib:
        assert total == args.quota_mib << 20, "total %d, expected the tenant's %d MiB" % (total, args.quota_mib)
    assert 0 < free <= total
    return "free %d MiB of %d MiB" % (free >> 20, total >> 20)


def elementwise():
    x = torch.randn(1 << 16)
    y = torch.randn(1 << 16)
    gx, gy = x.cuda(), y.cuda()
    close(gx * gy + gx.sin() - gy.exp() / 3, x * y + x.sin() - y.exp() / 3)
    close(torch.where(gx > 0, gx, gy), torch.where(x > 0, x, y))
    close((gx.half() + 1).float(), (x.half() + 1).float(), 1e-3)
    ints = torch.arange(1000, dtype=torch.int64)
    assert torch.equal((ints.cuda() * 7 % 13).cpu(), ints * 7 % 13)


def reductions():
    x = torch.randn(513, 1031, dtype=torch.float64)
    g = x.cuda()
    close(g.sum(), x.sum(), 1e-9)
    close(g.mean(1), x.mean(1), 1e-9)
    close(g.amax(0), x.amax(0), 0)
    close(g.std(), x.std(), 1e-9)
    close(torch.cumsum(g, 1), torch.cumsum(x, 1), 1e-9)
    v, i = g.sort(1)
    close(v, x.sort(1).values, 0)
    assert torch.equal(torch.argmax(g, 1).cpu(), torch.argmax(x, 1))


def sdpa():
    q, k, v = (torch.randn(2, 4, 64, 32) for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    out = torch.nn.functional.scaled_dot_product_attention(q.cuda(), k.cuda(), v.cuda(), is_causal=True)
    close(out, ref, 2e-3)


def compiled():
    def f(x, y):
        return torch.nn.functional.gelu(x * y + 1).sin() + (x - y).relu()

    cf = torch.compile(f)
    x, y = torch.randn(4096, device="cuda"), torch.randn(4096, device="cuda")
    for _ in range(3):
        out = cf(x, y)
    close(out, f(x, y), 1e-5)


def jiterator():
    code = "template <typename T> T remora_fma(T x, T y, T z) { return x * y + z; }"
    fn = torch.cuda.jiterator._create_jit_fn(code)
    a, b, c = (torch.randn(10000) for _ in range(3))
    close(fn(a.cuda(), b.cuda(), c.cuda()), a * b + c, 1e-5)


def expandable_oom():
    assert "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    held = []
    try:
        for _ in range(1 << 12):
            held.append(torch.empty(16 << 20, dtype=torch.uint8, device="cuda"))
    except torch.OutOfMemoryError:
        got = len(held) * 16
        del held
        torch.cuda.empty_cache()
        torch.ones(1024, device="cuda").sum().item()  # still usable after the refusal
        if args.quota_mib:
            assert got <= args.quota_mib, "held %d MiB past a %d MiB quota" % (got, args.quota_mib)
            assert got >= args.quota_mib // 2, "only %d MiB of %d MiB usable" % (got, args.quota_mib)
        return "OutOfMemoryError after %d MiB" % got
    raise AssertionError("no OutOfMemoryError after %d MiB" % (len(held) * 16))


check("init", init)
if not failures:
    check("mem_get_info", mem_info)
    check("elementwise", elementwise)
    check("reductions", reductions)
    check("sdpa", sdpa)
    check("compile", compiled)
    check("jiterator", jiterator)
    if args.quota_mib and "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""):
        check("expandable_oom", expandable_oom)
if failures:
    print("FAIL torch_basics: %s" % ", ".join(failures))
    sys.exit(1)
print("PASS torch_basics")
