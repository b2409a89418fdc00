"""PyTorch on a pool's GPUs (tests/gpu/pool-gpu.sh): the devices the pool placed for the
tenant on two servers, found through REMORA_SERVER=pool://... only. Checks the device count,
a matmul on each device against the CPU, a tensor copied from one device to the other (the
copy crosses servers through the client), and the tenant's pool-wide limit: 512 MiB tensors
allocated on both devices in turn stop with torch.OutOfMemoryError at most at the pool limit
and not far below it, while neither device reaches its own per-GPU limit. Prints one line
`PASS torch_pool: ...` or `FAIL torch_pool: ...` (exit 0 / 1).

    REMORA_SERVER=pool://127.0.0.1:7070,127.0.0.1:7071 REMORA_TOKEN=... LD_PRELOAD=... \\
        python3 pool_devices.py --devices 2 --pool-limit-mib 12288 --gpu-limit-mib 8192
"""
import argparse
import sys

import torch

NAME = "torch_pool"


def fail(msg):
    print("FAIL %s: %s" % (NAME, msg), flush=True)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--pool-limit-mib", type=int, required=True)
    ap.add_argument("--gpu-limit-mib", type=int, required=True)
    a = ap.parse_args()
    n = torch.cuda.device_count()
    if n != a.devices:
        fail("%d CUDA device(s), expected %d from the pool" % (n, a.devices))
    torch.manual_seed(0)
    x = torch.randn(1024, 1024)
    y = torch.randn(1024, 1024)
    want = x @ y
    for d in range(n):
        got = (x.to(f"cuda:{d}") @ y.to(f"cuda:{d}")).cpu()
        if not torch.allclose(got, want, rtol=1e-3, atol=1e-2):
            fail("matmul on cuda:%d: max |diff| %g" % (d, (got - want).abs().max().item()))
    print("  [%s] matmul on each of %d devices matches the CPU" % (NAME, n), flush=True)
    t0 = torch.arange(1 << 20, dtype=torch.float32, device="cuda:0")
    t1 = t0.to("cuda:1")
    if not torch.equal(t1.cpu(), t0.cpu()):
        fail("a copy from cuda:0 to cuda:1 changed the data")
    print("  [%s] 4 MiB copied from cuda:0 to cuda:1 (two servers) unchanged" % NAME, flush=True)
    del t0, t1
    torch.cuda.empty_cache()

    chunk = 512 << 20
    held = {d: [] for d in range(n)}
    total = 0
    d = 0
    refused_on = set()
    while len(refused_on) < n:
        if d not in refused_on:
            try:
                held[d].append(torch.empty(chunk, dtype=torch.uint8, device=f"cuda:{d}"))
                total += chunk
            except torch.OutOfMemoryError:
                refused_on.add(d)
        d = (d + 1) % n
    per_device = {d: len(held[d]) * chunk for d in range(n)}
    limit = a.pool_limit_mib << 20
    msg = "held %d MiB on %d devices (%s MiB) before OutOfMemoryError; pool limit %d MiB, per GPU %d MiB" % (
        total >> 20, n, "+".join(str(per_device[d] >> 20) for d in range(n)), a.pool_limit_mib, a.gpu_limit_mib)
    print("  [%s] %s" % (NAME, msg), flush=True)
    if total > limit:
        fail("above the pool-wide limit: " + msg)
    if any(v >= a.gpu_limit_mib << 20 for v in per_device.values()):
        fail("a device reached its own limit, so the pool limit was not what refused: " + msg)
    # Each server may keep one chunk of the limit (limit/16) as headroom when the other is
    # refused, and a 512 MiB tensor needs 512 MiB of room.
    slack = n * (limit // 16 + chunk)
    if total < limit - slack:
        fail("far below the pool-wide limit: " + msg)
    del held
    torch.cuda.empty_cache()
    print("PASS %s: %d devices of two servers, matmuls and a cross-server copy checked; %s" % (NAME, n, msg), flush=True)


if __name__ == "__main__":
    main()
