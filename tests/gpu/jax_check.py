"""JAX on the GPU, natively or through Remora (issue 43).

  python3 jax_check.py          the checks: jax.devices() lists a GPU; jit, grad, a
                                convolution, jax.random, and 100 training steps of a small
                                model, each on the GPU against the CPU. One line per check
                                (PASS/FAIL name: ...), then PASS jax_check or FAIL jax_check.
  python3 jax_check.py census   what JAX's CUDA plugin asks at start-up: every version query
                                of its _versions module (driver, runtime, cuDNN, cuFFT,
                                cuSOLVER, CUPTI, cuBLAS, cuSPARSE, compute capability, device
                                count) with its answer or exception, then the backend JAX
                                chose with JAX_PLATFORMS=cuda (so a failed start-up says why
                                instead of falling back to the CPU).
Run by tests/gpu/jax.sh natively and through remora-run over shm and tcp.
"""
import importlib
import os
import sys
import traceback


def census() -> int:
    os.environ.setdefault("JAX_PLATFORMS", "cuda")
    versions = None
    for pkg in ("jax_cuda13_plugin", "jax_cuda12_plugin", "jaxlib.cuda"):
        try:
            versions = importlib.import_module(f"{pkg}._versions")
            print(f"census: {pkg}._versions")
            break
        except ImportError as e:
            print(f"census: no {pkg}._versions ({e})")
    failed = 0
    if versions is not None:
        names = sorted(n for n in dir(versions) if not n.startswith("_"))
        for name in names:
            fn = getattr(versions, name)
            if not callable(fn):
                continue
            args = (0,) if name in ("cuda_compute_capability", "cuda_supports_multicast") else ()
            try:
                print(f"census: {name}{args if args else '()'} = {fn(*args)}")
            except Exception as e:  # noqa: BLE001 - the census reports every failure
                failed += 1
                print(f"census: {name}{args if args else '()'} FAILED: {type(e).__name__}: {e}")
    try:
        import jax

        print(f"census: jax {jax.__version__}, devices {jax.devices()}")
        backend = jax.extend.backend.get_backend() if hasattr(jax, "extend") else None
        if backend is not None:
            print(f"census: platform {backend.platform}, version {backend.platform_version}")
    except Exception:  # noqa: BLE001
        failed += 1
        print("census: JAX did not start on the GPU:")
        traceback.print_exc(file=sys.stdout)
    print(f"{'PASS' if failed == 0 else 'FAIL'} jax_census: {failed} failure(s)")
    return 0 if failed == 0 else 1


def checks() -> int:
    import jax
    import jax.numpy as jnp
    import numpy as np

    failures = []

    def check(name, ok, detail):
        print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}")
        if not ok:
            failures.append(name)

    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    check("devices", bool(gpus), f"{jax.devices()}")
    if not gpus:
        print("FAIL jax_check: JAX fell back to the CPU")
        return 1
    gpu, cpu = gpus[0], jax.devices("cpu")[0]

    def on(dev, x):
        return jax.device_put(x, dev)

    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 256), dtype=np.float32)
    w = rng.standard_normal((256, 128), dtype=np.float32)

    @jax.jit
    def f(x, w):
        return jnp.tanh(x @ w).sum(axis=1)

    with jax.default_matmul_precision("highest"):
        yg = np.asarray(f(on(gpu, x), on(gpu, w)))
        yc = np.asarray(f(on(cpu, x), on(cpu, w)))
    check("jit", np.allclose(yg, yc, rtol=1e-4, atol=1e-4), f"max |gpu-cpu| {np.abs(yg - yc).max():.2e}")

    def loss(w, x):
        return jnp.mean(jnp.tanh(x @ w) ** 2)

    with jax.default_matmul_precision("highest"):
        gg = np.asarray(jax.grad(loss)(on(gpu, w), on(gpu, x)))
        gc = np.asarray(jax.grad(loss)(on(cpu, w), on(cpu, x)))
    check("grad", np.allclose(gg, gc, rtol=1e-3, atol=1e-5), f"max |gpu-cpu| {np.abs(gg - gc).max():.2e}")

    img = rng.standard_normal((8, 3, 32, 32), dtype=np.float32)
    ker = rng.standard_normal((16, 3, 3, 3), dtype=np.float32)

    def conv(i, k):
        return jax.lax.conv_general_dilated(i, k, (1, 1), "SAME", precision=jax.lax.Precision.HIGHEST)

    cg = np.asarray(jax.jit(conv)(on(gpu, img), on(gpu, ker)))
    cc = np.asarray(jax.jit(conv)(on(cpu, img), on(cpu, ker)))
    check("conv", np.allclose(cg, cc, rtol=1e-3, atol=1e-3), f"max |gpu-cpu| {np.abs(cg - cc).max():.2e}")

    with jax.default_device(gpu):
        r = np.asarray(jax.random.normal(jax.random.key(42), (1 << 20,)))
    with jax.default_device(cpu):
        rc = np.asarray(jax.random.normal(jax.random.key(42), (1 << 20,)))
    check("random", abs(r.mean()) < 0.01 and abs(r.std() - 1) < 0.01 and np.allclose(r, rc, atol=1e-5),
          f"mean {r.mean():.4f} std {r.std():.4f}, same numbers as the CPU: {np.allclose(r, rc, atol=1e-5)}")

    # 100 steps of a small MLP on a fixed regression task, on each device from the same start.
    xs = rng.standard_normal((512, 32), dtype=np.float32)
    ys = np.sin(xs @ rng.standard_normal((32, 1), dtype=np.float32))
    params0 = {
        "w1": rng.standard_normal((32, 64), dtype=np.float32) * 0.2,
        "b1": np.zeros(64, np.float32),
        "w2": rng.standard_normal((64, 1), dtype=np.float32) * 0.2,
        "b2": np.zeros(1, np.float32),
    }

    def model_loss(p, x, y):
        h = jnp.tanh(x @ p["w1"] + p["b1"])
        return jnp.mean((h @ p["w2"] + p["b2"] - y) ** 2)

    @jax.jit
    def step(p, x, y):
        l, g = jax.value_and_grad(model_loss)(p, x, y)
        return jax.tree_util.tree_map(lambda a, b: a - 0.05 * b, p, g), l

    def train(dev):
        p = jax.tree_util.tree_map(lambda a: on(dev, a), params0)
        x, y = on(dev, xs), on(dev, ys)
        losses = []
        with jax.default_matmul_precision("highest"):
            for _ in range(100):
                p, l = step(p, x, y)
                losses.append(float(l))
        return losses

    lg, lc = train(gpu), train(cpu)
    check("train", lg[-1] < lg[0] * 0.9 and abs(lg[-1] - lc[-1]) <= 1e-3 * max(1.0, lc[-1]),
          f"loss {lg[0]:.4f} -> {lg[-1]:.4f} on the GPU, {lc[0]:.4f} -> {lc[-1]:.4f} on the CPU")

    print(f"{'PASS' if not failures else 'FAIL'} jax_check: {'all checks passed' if not failures else ', '.join(failures)}"
          f" on {gpu.device_kind}")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(census() if sys.argv[1:] == ["census"] else checks())
