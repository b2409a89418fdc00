"""torch.profiler with CUDA activities over a matmul: the GPU kernels it recorded (CUPTI).

Prints the CUDA kernels the profiler saw and ends with
  PASS profiler_check: N CUDA kernel event(s): NAME...
or FAIL (exit 1) when it recorded none, as happens when CUPTI sees no GPU work (through a
remoting layer that does not deliver the activity). Run natively and through Remora by
tests/gpu/torch/profiler.sh.
"""
import sys

import torch
from torch.profiler import ProfilerActivity, profile


def main() -> int:
    if not torch.cuda.is_available():
        print("SKIP profiler_check: no CUDA device")
        return 77
    a = torch.randn(1024, 1024, device="cuda")
    b = torch.randn(1024, 1024, device="cuda")
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            c = a @ b
        torch.cuda.synchronize()
    expected = (a.double() @ b.double()).float()
    if not torch.allclose(c, expected, rtol=1e-2, atol=1e-1):
        print("FAIL profiler_check: the matmul is wrong")
        return 1
    kernels = []
    for e in prof.events():
        kind = str(getattr(e, "device_type", ""))
        if kind.endswith("CUDA"):
            kernels.append((e.name, e.device_time if hasattr(e, "device_time") else 0))
    names = sorted({n for n, _ in kernels})
    for n in names:
        print(f"  kernel: {n}")
    table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=8)
    print(table)
    if not kernels:
        print("FAIL profiler_check: no CUDA kernel event recorded (CUPTI saw no GPU work)")
        return 1
    gemm = [n for n in names if "gemm" in n.lower() or "sm90" in n.lower() or "cutlass" in n.lower()]
    if not gemm:
        print(f"FAIL profiler_check: {len(kernels)} CUDA event(s), none a matmul kernel: {names}")
        return 1
    print(f"PASS profiler_check: {len(kernels)} CUDA kernel event(s): {', '.join(gemm[:3])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
