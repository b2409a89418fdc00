"""PyTorch through Remora's cuDNN, cuFFT and cuSOLVER (and cuBLAS), checked against the CPU:
conv2d forward and backward (fp32, TF32 off, so cuDNN's results match the CPU's closely),
torch.fft.fft2, torch.linalg.solve and cholesky, and a few training steps of torchvision's ResNet-18 when torchvision is
importable (else of a small CNN) whose loss must stay finite and fall. Prints one `PASS name: ...` or
`FAIL name: ...` line per check and a final `PASS torch_libs: ...` / `FAIL torch_libs: ...`
(exit 0 / 1; 77 without a CUDA device). Runs natively too (compare the two).

    python3 tests/gpu/torch/torch_libs.py
    build/bin/remora-run --backend cuda --transport shm -- python3 tests/gpu/torch/torch_libs.py
"""
import sys
import time

import torch

NAME = "torch_libs"
failures = []


def check(name, fn):
    try:
        detail = fn()
        print("PASS %s: %s" % (name, detail), flush=True)
    except Exception as e:  # noqa: BLE001 - each check reports its own failure and the run goes on
        failures.append(name)
        print("FAIL %s: %s: %s" % (name, type(e).__name__, str(e).splitlines()[0] if str(e) else ""), flush=True)


def close(what, got, want, rtol, atol):
    got = got.detach().double().cpu()
    want = want.detach().double().cpu()
    if not torch.allclose(got, want, rtol=rtol, atol=atol):
        raise AssertionError("%s: max |diff| %g" % (what, (got - want).abs().max().item()))


def conv2d(dev):
    torch.manual_seed(0)
    x = torch.randn(4, 8, 20, 18)
    w = torch.randn(16, 8, 3, 3)
    b = torch.randn(16)
    outs = {}
    for where, d in (("cpu", torch.device("cpu")), ("gpu", dev)):
        # Leaves of their own on each device (x.to(cpu) is x itself, which must not turn the
        # GPU copy into a non-leaf).
        xx = x.to(d).detach().clone().requires_grad_()
        ww = w.to(d).detach().clone().requires_grad_()
        bb = b.to(d).detach().clone().requires_grad_()
        y = torch.nn.functional.conv2d(xx, ww, bb, stride=1, padding=1)
        (y * y).sum().backward()
        outs[where] = (y, xx.grad, ww.grad, bb.grad)
    for i, what in enumerate(("output", "input gradient", "weight gradient", "bias gradient")):
        close("conv2d " + what, outs["gpu"][i], outs["cpu"][i], 1e-3, 1e-2)
    # A strided, grouped convolution in channels-last (other cuDNN engines).
    xg = torch.randn(2, 12, 17, 15)
    wg = torch.randn(24, 3, 5, 5)
    got = torch.nn.functional.conv2d(xg.to(dev).to(memory_format=torch.channels_last), wg.to(dev), stride=2, padding=2, groups=4)
    close("grouped strided conv2d", got, torch.nn.functional.conv2d(xg, wg, stride=2, padding=2, groups=4), 1e-3, 1e-2)
    return "conv2d forward, input/weight/bias gradients and a grouped channels-last conv match the CPU"


def fft2(dev):
    torch.manual_seed(1)
    a = torch.randn(3, 64, 48, dtype=torch.complex64)
    close("fft2", torch.fft.fft2(a.to(dev)), torch.fft.fft2(a.to(torch.complex128)), 1e-4, 1e-3)
    r = torch.randn(5, 32, 40)
    close("rfft2", torch.fft.rfft2(r.to(dev)), torch.fft.rfft2(r.double()), 1e-4, 1e-3)
    return "fft2 (complex64, batch 3 of 64x48) and rfft2 match the CPU"


def linalg(dev):
    torch.manual_seed(3)
    a = torch.randn(24, 24, dtype=torch.float64) + 6 * torch.eye(24, dtype=torch.float64)
    b = torch.randn(24, 5, dtype=torch.float64)
    close("linalg.solve", torch.linalg.solve(a.to(dev), b.to(dev)), torch.linalg.solve(a, b), 1e-8, 1e-8)
    spd = a @ a.T + 24 * torch.eye(24, dtype=torch.float64)
    close("linalg.cholesky", torch.linalg.cholesky(spd.to(dev)), torch.linalg.cholesky(spd), 1e-8, 1e-8)
    return "linalg.solve (24x24, 5 right-hand sides) and linalg.cholesky match the CPU"


def training(dev):
    torch.manual_seed(2)
    try:
        import torchvision
        model = torchvision.models.resnet18(num_classes=10)
        what, steps, shape = "ResNet-18", 5, (16, 3, 64, 64)
    except ImportError:
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
        what, steps, shape = "a small CNN (no torchvision)", 20, (16, 3, 32, 32)
    model = model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(*shape, device=dev)
    y = torch.randint(0, 10, (shape[0],), device=dev)
    losses = []
    t0 = time.time()
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    torch.cuda.synchronize()
    dt = (time.time() - t0) / steps
    if not all(l == l and abs(l) < 1e6 for l in losses):
        raise AssertionError("%s: a loss is not finite: %s" % (what, losses))
    if not losses[-1] < losses[0]:
        raise AssertionError("%s: the loss did not fall on a fixed batch: %s" % (what, ["%.4g" % l for l in losses]))
    return "%s: %d SGD steps on a fixed batch, loss %.4g -> %.4g, %.1f ms a step (first included)" % (
        what, steps, losses[0], losses[-1], dt * 1e3)


def main():
    if not torch.cuda.is_available():
        print("SKIP %s: no CUDA device" % NAME)
        sys.exit(77)
    dev = torch.device("cuda")
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    print("  [%s] cuDNN %s, enabled %s" % (NAME, torch.backends.cudnn.version(), torch.backends.cudnn.enabled), flush=True)
    # Arguments name the checks to run (all by default), e.g. `torch_libs.py torch_fft2`.
    only = set(sys.argv[1:])
    for name, fn in (("torch_conv2d", lambda: conv2d(dev)), ("torch_fft2", lambda: fft2(dev)),
                     ("torch_linalg", lambda: linalg(dev)), ("torch_train_cnn", lambda: training(dev))):
        if not only or name in only:
            check(name, fn)
    if failures:
        print("FAIL %s: %s" % (NAME, ", ".join(failures)))
        sys.exit(1)
    print("PASS %s: conv2d forward and backward, fft2 and linalg.solve/cholesky match the CPU; a CNN trains" % NAME)


if __name__ == "__main__":
    main()
