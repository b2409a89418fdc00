"""torch.cuda.graph: capture a small training-style step (elementwise ops, a reduction, a
matmul, in-place updates) and replay it; the captured work must run for real on the
server's streams. Checks every replay against the same step run eagerly. Prints one line,
"PASS cuda_graph: ..." or "FAIL cuda_graph: ..." (exit 0 / 1).

  python3 cuda_graph.py [REPLAYS]            natively
  remora-run --transport shm -- python3 cuda_graph.py

Elementwise-only steps need only the runtime shim; the matmul uses cuBLAS and needs the
driver facade (libcuda.so.1) or library remoting: with --no-matmul it is left out."""
import sys

import torch


def fail(msg):
    print("FAIL cuda_graph: %s" % msg, flush=True)
    sys.exit(1)


def main():
    replays = int(next((a for a in sys.argv[1:] if a.isdigit()), "100"))
    use_matmul = "--no-matmul" not in sys.argv
    if not torch.cuda.is_available():
        fail("no CUDA device")
    dev = torch.device("cuda")
    torch.manual_seed(0)
    w = torch.randn(64, 64, device=dev)
    static_x = torch.randn(128, 64, device=dev)
    acc = torch.zeros(64, device=dev)

    def step(x):
        h = x * 2.0 + 1.0
        if use_matmul:
            h = h @ w
        h = torch.relu(h).sin()
        acc.add_(h.sum(dim=0))
        return h.mean()

    # Warm up on a side stream, as torch.cuda.graph's documentation asks.
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            step(static_x)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()

    g = torch.cuda.CUDAGraph()
    acc.zero_()
    with torch.cuda.graph(g):
        static_out = step(static_x)
    torch.cuda.synchronize()
    # Capture runs nothing: the accumulator is still zero.
    if acc.abs().sum().item() != 0.0:
        fail("the captured work ran during the capture")
    if torch.cuda.is_current_stream_capturing():
        fail("still capturing after the graph was made")

    expected_acc = torch.zeros(64, device=dev)
    for i in range(replays):
        static_x.copy_(torch.randn(128, 64, device=dev))
        g.replay()
        # The same step, eagerly, on a copy of the state.
        h = static_x * 2.0 + 1.0
        if use_matmul:
            h = h @ w
        h = torch.relu(h).sin()
        expected_acc += h.sum(dim=0)
        want = h.mean()
        torch.cuda.synchronize()
        if not torch.allclose(static_out, want, rtol=1e-4, atol=1e-5):
            fail("replay %d: output %g, expected %g" % (i, static_out.item(), want.item()))
    if not torch.allclose(acc, expected_acc, rtol=1e-3, atol=1e-3):
        fail("the accumulator differs after %d replays (max error %g)" % (replays, (acc - expected_acc).abs().max().item()))
    print("PASS cuda_graph: captured step (%s) replayed %d times, every output and the accumulator as eager"
          % ("with matmul" if use_matmul else "elementwise", replays), flush=True)


if __name__ == "__main__":
    main()
