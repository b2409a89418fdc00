"""torch.distributed with the NCCL backend at world size 1 (issue 44): every collective the
process group offers, point-to-point to itself where PyTorch allows it, a barrier, and DDP training
of a small model checked step by step against the same training on the CPU.

Natively, NCCL runs in this process. Through Remora (nccl_check.sh: remora-run's environment
with Remora's libnccl.so.2 preloaded), every NCCL call runs in the server's NCCL on the server's
GPU and the client touches no GPU (REMORA_ASSERT_NO_LOCAL_GPU=1).

Prints "ok NAME ..." per check (or "FAIL NAME: why", or "SKIP NAME: why" where PyTorch refuses the
call before NCCL sees it) and a last line "PASS nccl_check ..." or "FAIL nccl_check ..."; exit 0
only if every check passed."""
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

failures = []


def check(name, fn):
    try:
        detail = fn()
        print("ok %s%s" % (name, (" " + detail) if detail else ""), flush=True)
    except NotImplementedError as e:
        print("SKIP %s: %s" % (name, e), flush=True)
    except Exception as e:  # reported, the next check runs
        failures.append(name)
        print("FAIL %s: %r" % (name, e), flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def expect_equal(got, want, what):
    if not torch.equal(got.cpu(), want.cpu()):
        raise AssertionError("%s: got %s, want %s" % (what, got.flatten()[:6].tolist(), want.flatten()[:6].tolist()))


def main():
    if not torch.cuda.is_available():
        print("FAIL nccl_check: no CUDA device")
        return 1
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    dev = torch.device("cuda:0")
    torch.cuda.set_device(dev)
    t0 = time.time()
    # device_id: the communicator is made now (ncclCommInitRankConfig), not at the first call.
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=dev)
    print("ok init_process_group nccl %s (%.2f s)" % (".".join(map(str, torch.cuda.nccl.version())), time.time() - t0),
          flush=True)

    n = 1 << 16
    base = torch.arange(n, device=dev, dtype=torch.float32)

    def all_reduce():
        for op, want in ((dist.ReduceOp.SUM, base), (dist.ReduceOp.MAX, base), (dist.ReduceOp.MIN, base),
                         (dist.ReduceOp.PRODUCT, base), (dist.ReduceOp.AVG, base)):
            t = base.clone()
            dist.all_reduce(t, op=op)
            expect_equal(t, want, "all_reduce %s" % op)
        t = torch.full((n,), 3, device=dev, dtype=torch.int64)
        dist.all_reduce(t)
        expect_equal(t, torch.full((n,), 3, dtype=torch.int64), "all_reduce int64")
        t = base.to(torch.bfloat16)
        dist.all_reduce(t)
        expect_equal(t, base.to(torch.bfloat16), "all_reduce bfloat16")
        # A pre-multiplied sum (the operator ncclRedOpCreatePreMulSum makes).
        t = base.clone()
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
        expect_equal(t, base * 0.5, "all_reduce premul_sum")
        return "sum max min product avg int64 bfloat16 premul_sum"

    def broadcast():
        t = base.clone()
        dist.broadcast(t, src=0)
        expect_equal(t, base, "broadcast")

    def all_gather():
        out = [torch.zeros_like(base)]
        dist.all_gather(out, base)
        expect_equal(out[0], base, "all_gather")
        flat = torch.zeros(n, device=dev)
        dist.all_gather_into_tensor(flat, base)
        expect_equal(flat, base, "all_gather_into_tensor")

    def reduce_scatter():
        out = torch.zeros(n, device=dev)
        dist.reduce_scatter_tensor(out, base)
        expect_equal(out, base, "reduce_scatter_tensor")
        out2 = torch.zeros(n, device=dev)
        dist.reduce_scatter(out2, [base.clone()])
        expect_equal(out2, base, "reduce_scatter")

    def all_to_all():
        out = torch.zeros(n, device=dev)
        dist.all_to_all_single(out, base)
        expect_equal(out, base, "all_to_all_single")
        outs = [torch.zeros(n, device=dev)]
        dist.all_to_all(outs, [base.clone()])
        expect_equal(outs[0], base, "all_to_all")

    def reduce_gather_scatter():
        t = base.clone()
        dist.reduce(t, dst=0)
        expect_equal(t, base, "reduce")
        g = [torch.zeros(n, device=dev)]
        dist.gather(base, gather_list=g, dst=0)
        expect_equal(g[0], base, "gather")
        s = torch.zeros(n, device=dev)
        dist.scatter(s, scatter_list=[base.clone()], src=0)
        expect_equal(s, base, "scatter")

    def send_recv_self():
        got = torch.zeros(n, device=dev)
        try:
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, base, 0), dist.P2POp(dist.irecv, got, 0)])
        except (ValueError, RuntimeError) as e:
            if "same as" in str(e) or "self" in str(e):
                raise NotImplementedError("PyTorch refuses point-to-point with itself: %s" % e)
            raise
        for r in reqs:
            r.wait()
        expect_equal(got, base, "send/recv to self")
        return "batch_isend_irecv"

    def barrier():
        dist.barrier()
        torch.cuda.synchronize()

    check("all_reduce", all_reduce)
    check("broadcast", broadcast)
    check("all_gather", all_gather)
    check("reduce_scatter", reduce_scatter)
    check("all_to_all", all_to_all)
    check("reduce_gather_scatter", reduce_gather_scatter)
    check("send_recv_self", send_recv_self)
    check("barrier", barrier)
    check("ddp_training", ddp_training)
    dist.destroy_process_group()
    print("ok destroy_process_group", flush=True)
    if failures:
        print("FAIL nccl_check: %s" % ", ".join(failures))
        return 1
    print("PASS nccl_check: every collective, barrier and DDP training at world size 1")
    return 0


def ddp_training():
    """A small MLP trained for a few steps under DistributedDataParallel on the GPU, and the same
    model (same initial weights, same batches) trained on the CPU: the losses and the weights
    must agree."""
    torch.manual_seed(0)
    cpu_model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
    gpu_model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
    gpu_model.load_state_dict(cpu_model.state_dict())
    gpu_model = gpu_model.cuda()
    ddp = nn.parallel.DistributedDataParallel(gpu_model, device_ids=[0], bucket_cap_mb=1)
    opt_cpu = torch.optim.SGD(cpu_model.parameters(), lr=0.05)
    opt_gpu = torch.optim.SGD(ddp.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(1)
    worst = 0.0
    for step in range(20):
        x = torch.randn(16, 32, generator=gen)
        y = torch.randn(16, 8, generator=gen)
        loss_cpu = nn.functional.mse_loss(cpu_model(x), y)
        opt_cpu.zero_grad()
        loss_cpu.backward()
        opt_cpu.step()
        loss_gpu = nn.functional.mse_loss(ddp(x.cuda()), y.cuda())
        opt_gpu.zero_grad()
        loss_gpu.backward()
        opt_gpu.step()
        diff = abs(loss_cpu.item() - loss_gpu.item())
        worst = max(worst, diff)
        if diff > 1e-4 * max(1.0, abs(loss_cpu.item())):
            raise AssertionError("step %d: loss %.6f on the GPU, %.6f on the CPU" % (step, loss_gpu.item(), loss_cpu.item()))
    for (name, p_cpu), p_gpu in zip(cpu_model.named_parameters(), ddp.module.parameters()):
        if not torch.allclose(p_cpu, p_gpu.detach().cpu(), atol=1e-4, rtol=1e-4):
            raise AssertionError("weight %s differs from the CPU's after 20 steps" % name)
    return "20 steps, losses within %.2g of the CPU's, weights equal" % worst


if __name__ == "__main__":
    sys.exit(main())
