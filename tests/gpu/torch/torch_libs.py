"""PyTorch through Remora's cuDNN, cuFFT and cuSOLVER (and cuBLAS), checked against the CPU:
conv2d forward and backward (fp32, TF32 off, so cuDNN's results match the CPU's closely),
torch.fft.fft2, torch.linalg.solve and cholesky, a few training steps of torchvision's ResNet-18 when torchvision is
importable (else of a small CNN) whose loss must stay finite and fall, and a small transformer's training step
(causal attention, layer norm, AdamW) against the CPU's, then trained until its loss halves. Prints one `PASS name: ...` or
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


def transformer(dev):
    """A small transformer's training step (attention, layer norm, AdamW) on the GPU against the
    same step on the CPU from the same weights, then 40 steps on a fixed batch: the loss falls."""
    import copy
    torch.manual_seed(4)
    vocab, d, seq, batch = 64, 128, 32, 8

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(vocab, d)
            self.blocks = torch.nn.TransformerEncoder(
                torch.nn.TransformerEncoderLayer(d, nhead=4, dim_feedforward=4 * d, dropout=0.0, batch_first=True,
                                                 norm_first=True),
                num_layers=2, enable_nested_tensor=False)
            self.norm = torch.nn.LayerNorm(d)
            self.head = torch.nn.Linear(d, vocab)

        def forward(self, tokens):
            mask = torch.nn.Transformer.generate_square_subsequent_mask(tokens.shape[1], device=tokens.device)
            return self.head(self.norm(self.blocks(self.emb(tokens), mask=mask, is_causal=True)))

    cpu_model = Tiny()
    gpu_model = copy.deepcopy(cpu_model).to(dev)
    tokens = torch.randint(0, vocab, (batch, seq + 1))
    results = {}
    for where, model, d_ in (("cpu", cpu_model, torch.device("cpu")), ("gpu", gpu_model, dev)):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
        t = tokens.to(d_)
        logits = model(t[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), t[:, 1:].reshape(-1))
        loss.backward()
        grads = [p.grad.detach().clone() for p in model.parameters()]
        opt.step()
        results[where] = (loss, grads, [p.detach().clone() for p in model.parameters()], opt)
    close("transformer loss", results["gpu"][0], results["cpu"][0], 1e-4, 1e-4)
    for i, (gg, gc) in enumerate(zip(results["gpu"][1], results["cpu"][1])):
        close("transformer gradient %d" % i, gg, gc, 1e-3, 1e-5)
    # AdamW's first step moves each parameter by about lr * sign(gradient): compared where the
    # gradient is clearly non-zero (a key projection's bias has a zero gradient up to rounding).
    for i, (pg, pc, gc) in enumerate(zip(results["gpu"][2], results["cpu"][2], results["cpu"][1])):
        m = gc.abs() > 1e-5
        close("transformer parameter %d after one AdamW step" % i, pg.cpu()[m], pc[m], 1e-4, 1e-5)
    opt = results["gpu"][3]
    t = tokens.to(dev)
    losses = []
    for _ in range(40):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(gpu_model(t[:, :-1]).reshape(-1, vocab), t[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    if not losses[-1] < 0.5 * losses[0]:
        raise AssertionError("transformer: the loss did not halve on a fixed batch: %.4g -> %.4g" % (losses[0], losses[-1]))
    return ("a 2-layer transformer (causal attention, layer norm, AdamW): one step matches the CPU; "
            "loss %.4g -> %.4g in 40 steps" % (losses[0], losses[-1]))


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
                     ("torch_linalg", lambda: linalg(dev)), ("torch_train_cnn", lambda: training(dev)),
                     ("torch_transformer", lambda: transformer(dev))):
        if not only or name in only:
            check(name, fn)
    if failures:
        print("FAIL %s: %s" % (NAME, ", ".join(failures)))
        sys.exit(1)
    print("PASS %s: conv2d forward and backward, fft2 and linalg.solve/cholesky match the CPU; a CNN and a "
          "transformer train" % NAME)


if __name__ == "__main__":
    main()
