"""Issue 13's throughput figures for one process (native or remoted): a 4096^3 bf16 GEMM's
TFLOP/s (torch.matmul through cuBLAS/cuBLASLt; best of 5 runs of 50 GEMMs, synchronised at the
end of each run) and the time of one torchvision ResNet-18 training step (batch 32 of 3x224x224,
SGD with momentum, the loss read back every step as a training loop does; median of 20 steps
after 5 warm-up steps). Prints one JSON line, so tests/gpu/torch/train-bench.sh can run it
natively and remoted in one session and print ratios."""
import json
import statistics
import sys
import time

import torch

out = {}
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
c = a @ b
torch.cuda.synchronize()
best = float("inf")
for _ in range(5):
    t = time.perf_counter()
    for _ in range(50):
        c = a @ b
    torch.cuda.synchronize()
    best = min(best, (time.perf_counter() - t) / 50)
out["gemm_bf16_tflops"] = 2 * 4096 ** 3 / best / 1e12
# A checked result, so a wrong fast GEMM cannot pass as a figure.
ref = (a[:64].float() @ b.float())
err = ((c[:64].float() - ref).abs().max() / ref.abs().max()).item()
if err > 2e-2:
    print("FAIL train_bench: bf16 GEMM relative error %.3g" % err)
    sys.exit(1)
del a, b, c, ref

try:
    import torchvision
    model = torchvision.models.resnet18(num_classes=1000).cuda()
except ImportError:
    print("FAIL train_bench: torchvision is not importable")
    sys.exit(1)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
torch.manual_seed(0)
x = torch.randn(32, 3, 224, 224, device="cuda")
y = torch.randint(0, 1000, (32,), device="cuda")
times = []
losses = []
for i in range(25):
    t = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    losses.append(loss.item())
    if i >= 5:
        times.append(time.perf_counter() - t)
if not losses[-1] < losses[0]:
    print("FAIL train_bench: ResNet-18 loss did not fall: %.4g -> %.4g" % (losses[0], losses[-1]))
    sys.exit(1)
out["resnet18_step_ms"] = statistics.median(times) * 1e3
out["resnet18_loss"] = [losses[0], losses[-1]]
print(json.dumps(out))
