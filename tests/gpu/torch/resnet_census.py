"""A ResNet-50 training step as issue 42 measures it (torchvision's resnet50, batch 64 of
3x224x224, bf16 autocast, channels-last, SGD with momentum, the loss read back every step as a
training loop does): images/s over the steady steps and, through Remora with
REMORA_CALL_STATS=PATH, the call census per step (census.py) - which must show no round trip
besides the application's own synchronisations. BATCH and STEPS in the environment change the
size. Prints `PASS resnet_census: ...` or `FAIL resnet_census: ...`."""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import census  # noqa: E402

try:
    import torchvision
except ImportError:
    print("SKIP resnet_census: torchvision is not importable")
    sys.exit(77)

batch = int(os.environ.get("BATCH", "64"))
steps = int(os.environ.get("STEPS", "20"))
torch.manual_seed(0)
model = torchvision.models.resnet50(num_classes=1000).cuda().to(memory_format=torch.channels_last).train()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
y = torch.randint(0, 1000, (batch,), device="cuda")


def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()


first = step()
for _ in range(4):
    step()
with census.Interval():
    t = time.perf_counter()
    for _ in range(steps):
        last = step()
    elapsed = time.perf_counter() - t
ok = census.report("resnet_census", steps)
ips = batch * steps / elapsed
print("resnet_census: batch %d, %d steps, %.1f images/s, %.2f ms/step, loss %.3f -> %.3f" %
      (batch, steps, ips, elapsed / steps * 1e3, first, last))
if not last < first:
    print("FAIL resnet_census: the loss did not fall (%.3f -> %.3f)" % (first, last))
    sys.exit(1)
if not ok:
    sys.exit(1)
print("PASS resnet_census: %.1f images/s" % ips)
