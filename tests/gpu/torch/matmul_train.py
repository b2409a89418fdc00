"""PyTorch through Remora's cuBLAS and cuBLASLt, checked against the CPU: fp32, bf16 and
batched matmuls, nn.Linear forward and backward, and an MLP trained with AdamW until its loss
falls tenfold. Prints one line `PASS torch_matmul_train: ...` or `FAIL torch_matmul_train: ...`
(exit 0 / 1; 77 without a CUDA device). Runs natively too (compare the two).

    python3 tests/gpu/torch/matmul_train.py
    build/bin/remora-run --backend cuda --transport shm -- python3 tests/gpu/torch/matmul_train.py
"""
import sys
import time

import torch

NAME = "torch_matmul_train"


def fail(msg):
    print("FAIL %s: %s" % (NAME, msg), flush=True)
    sys.exit(1)


def close(what, got, want, rtol, atol):
    got = got.detach().float().cpu()
    want = want.detach().float().cpu()
    if not torch.allclose(got, want, rtol=rtol, atol=atol):
        fail("%s: max |diff| %g" % (what, (got - want).abs().max().item()))
    print("  [%s] %s matches the CPU" % (NAME, what), flush=True)


def main():
    if not torch.cuda.is_available():
        print("SKIP %s: no CUDA device" % NAME)
        sys.exit(77)
    torch.manual_seed(0)
    dev = torch.device("cuda")

    # fp32 (cuBLAS / cuBLASLt), strided, transposed, batched.
    a, b = torch.randn(257, 130), torch.randn(130, 91)
    close("fp32 matmul 257x130x91", a.to(dev) @ b.to(dev), a.double() @ b.double(), 1e-3, 1e-3)
    close("fp32 A^T B", a.t().to(dev).t() @ b.to(dev), a.double() @ b.double(), 1e-3, 1e-3)
    x, y = torch.randn(6, 33, 17), torch.randn(6, 17, 40)
    close("fp32 bmm 6x33x17x40", torch.bmm(x.to(dev), y.to(dev)), torch.bmm(x.double(), y.double()), 1e-3, 1e-3)
    # bf16 and fp16 (tensor cores), against the CPU in double on the rounded inputs.
    for dt, tol in ((torch.bfloat16, 3e-2), (torch.float16, 5e-3)):
        a16, b16 = torch.randn(512, 256).to(dt), torch.randn(256, 384).to(dt)
        close("%s matmul 512x256x384" % str(dt).split(".")[1], a16.to(dev) @ b16.to(dev),
              a16.double() @ b16.double(), tol, tol * 4)
    # addmm with a bias: PyTorch's cuBLASLt path with the bias epilogue.
    w, bias, inp = torch.randn(64, 48), torch.randn(64), torch.randn(32, 48)
    close("nn.functional.linear (bias epilogue)", torch.nn.functional.linear(inp.to(dev), w.to(dev), bias.to(dev)),
          torch.nn.functional.linear(inp.double(), w.double(), bias.double()), 1e-3, 1e-3)

    # nn.Linear forward and backward: the gradients agree with the CPU's.
    lin_cpu = torch.nn.Linear(48, 64).double()
    lin_gpu = torch.nn.Linear(48, 64).to(dev)
    lin_gpu.load_state_dict({k: v.float() for k, v in lin_cpu.state_dict().items()})
    xin = torch.randn(32, 48)
    (lin_cpu(xin.double()) ** 2).sum().backward()
    (lin_gpu(xin.to(dev)) ** 2).sum().backward()
    close("Linear weight gradient", lin_gpu.weight.grad, lin_cpu.weight.grad, 1e-3, 1e-2)
    close("Linear bias gradient", lin_gpu.bias.grad, lin_cpu.bias.grad, 1e-3, 1e-2)

    # An MLP learns a fixed random regression until its loss falls tenfold.
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.GELU(), torch.nn.Linear(128, 128), torch.nn.GELU(),
                                torch.nn.Linear(128, 8)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4)
    xs = torch.randn(1024, 32, device=dev)
    target = torch.sin(xs @ torch.randn(32, 8, device=dev))
    first = last = None
    t0 = time.time()
    for step in range(600):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(xs), target)
        loss.backward()
        opt.step()
        if step == 0:
            first = loss.item()
        if step % 50 == 49:
            last = loss.item()
            if last < first / 10:
                break
    torch.cuda.synchronize()
    if not last < first / 10:
        fail("the MLP's loss went from %g to %g in %d steps (not tenfold)" % (first, last, step + 1))
    print("  [%s] MLP loss %.4g -> %.4g in %d AdamW steps (%.1f s)" % (NAME, first, last, step + 1, time.time() - t0),
          flush=True)
    print("PASS %s: fp32/bf16/fp16/batched matmuls and Linear gradients match the CPU; the MLP's loss fell tenfold" % NAME)


if __name__ == "__main__":
    main()
