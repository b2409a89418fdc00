"""What PyTorch gets through Remora, step by step: each step prints OK or FAIL with the
exception, so one run shows how far an unmodified PyTorch program goes. Used to find what
to build next; the pass/fail tests of PyTorch are the other scripts in this directory."""
import sys
import traceback


def step(name, fn):
    try:
        r = fn()
        print("OK   %s: %s" % (name, r), flush=True)
        return True
    except Exception as e:  # noqa: BLE001 - report every failure and go on
        print("FAIL %s: %s: %s" % (name, type(e).__name__, str(e).splitlines()[0] if str(e) else ""), flush=True)
        if "-v" in sys.argv:
            traceback.print_exc()
        return False


import torch  # noqa: E402

step("torch", lambda: torch.__version__)
step("is_available", torch.cuda.is_available)
step("device_count", torch.cuda.device_count)
if step("init", torch.cuda.init):
    step("name", lambda: torch.cuda.get_device_name(0))
    step("mem_get_info", torch.cuda.mem_get_info)
    step("ones+sum", lambda: torch.ones(1024, device="cuda").sum().item())
    step("elementwise", lambda: (torch.arange(10, device="cuda") * 3 + 1).tolist())
    step("reduction", lambda: torch.randn(1000, 1000, device="cuda").mean().item())
    step("matmul", lambda: (torch.randn(64, 64, device="cuda") @ torch.randn(64, 64, device="cuda")).sum().item())
    step("conv2d", lambda: torch.nn.functional.conv2d(torch.randn(1, 3, 16, 16, device="cuda"),
                                                      torch.randn(4, 3, 3, 3, device="cuda")).shape)
    step("compile", lambda: torch.compile(lambda x: x.sin() + x.cos())(torch.randn(16, device="cuda")).sum().item())
