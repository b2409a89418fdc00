"""Per-op cost of PyTorch: a small elementwise op and a torch.compile'd call, each timed over
many iterations after warm-up (synchronised at the end). Prints one JSON line, so a runner can
time native and remoted runs of the same script and print ratios (tests/gpu/torch/torch-gpu.sh)."""
import json
import sys
import time

import torch

n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
x = torch.randn(1024, device="cuda")
y = torch.randn(1024, device="cuda")


def timed(fn):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t) / n)
    return best * 1e6


cf = torch.compile(lambda a, b: (a * b + 1).sin() + a)
cf(x, y)
print(json.dumps({
    "small_op_us": timed(lambda: x.add_(y)),
    "compiled_call_us": timed(lambda: cf(x, y)),
    "item_us": timed(lambda: x.sum().item()),
}))
