"""torch.multiprocessing shares a CUDA tensor between processes: PyTorch sends the storage as
a CUDA IPC handle (cudaIpcGetMemHandle) with an interprocess event (cudaIpcGetEventHandle);
the consumer opens both (cudaIpcOpenMemHandle, cudaIpcOpenEventHandle, cudaStreamWaitEvent)
and closes the memory when its tensor goes (cudaIpcCloseMemHandle). Under Remora each process
is its own session and every open is checked by the server (same tenant, live export).
With PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True the storage is physical memory of
cuMemCreate instead, shared by POSIX descriptor (cuMemExportToShareableHandle, fetched by the
consumer with pidfd_getfd, cuMemImportFromShareableHandle).

The producer fills a tensor, sends it (and a view at an offset) to a consumer process, which
checks them, adds 1 in place and sends back its sum; the producer sees the consumer's write in
its own tensor. Prints one line, "PASS torch_ipc: ..." or "FAIL torch_ipc: ..." (exit 0 / 1).

  python3 torch_ipc.py                          natively
  remora-run --transport shm -- python3 torch_ipc.py
(The spawned consumer inherits the environment, so it runs through Remora too.)"""
import sys

import torch
import torch.multiprocessing as mp

N = 1 << 20


def fail(msg):
    print("FAIL torch_ipc: %s" % msg, flush=True)
    sys.exit(1)


def consumer(q_in, q_out):
    try:
        t, view = q_in.get()
        if not t.is_cuda:
            q_out.put(("err", "the received tensor is not on the GPU"))
            return
        want = torch.arange(N, device=t.device, dtype=torch.float32)
        if not torch.equal(t, want):
            q_out.put(("err", "the received tensor differs from the producer's"))
            return
        if not torch.equal(view, want[N // 2:N // 2 + 1000]):
            q_out.put(("err", "the received view (storage offset %d) is wrong" % view.storage_offset()))
            return
        t.add_(1)  # written through the shared memory
        torch.cuda.synchronize()
        q_out.put(("ok", float(t.sum().item())))
        del t, view  # closes the IPC opens
        q_in.get()  # the producer has read our write: done
    except Exception as e:  # reported, not swallowed: the producer prints FAIL
        q_out.put(("err", repr(e)))


def main():
    if not torch.cuda.is_available():
        fail("no CUDA device")
    ctx = mp.get_context("spawn")
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=consumer, args=(q_in, q_out))
    p.start()
    t = torch.arange(N, device="cuda", dtype=torch.float32)
    q_in.put((t, t[N // 2:N // 2 + 1000]))
    status, value = q_out.get(timeout=120)
    if status != "ok":
        p.kill()
        fail("consumer: %s" % value)
    torch.cuda.synchronize()
    want_sum = float(N) * (N - 1) / 2 + N
    if abs(value - want_sum) > want_sum * 1e-6:
        fail("the consumer's sum is %r, expected %r" % (value, want_sum))
    if not torch.equal(t, torch.arange(N, device="cuda", dtype=torch.float32) + 1):
        fail("the consumer's in-place add is not visible in the producer's tensor")
    q_in.put("done")
    p.join(60)
    if p.exitcode != 0:
        fail("the consumer process exited with %r" % p.exitcode)
    del t
    torch.cuda.synchronize()
    print("PASS torch_ipc: a %d-element CUDA tensor and a view shared with another process by IPC, "
          "written there, seen here" % N, flush=True)


if __name__ == "__main__":
    main()
