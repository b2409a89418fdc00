"""CuPy through Remora (issue 15): CuPy 14 links the CUDA runtime statically, so it reaches
Remora only through libcuda.so.1, the driver facade, and the runtime's private tables. Each check
computes on the GPU and compares with NumPy, printing one "PASS <check>: ..." or
"FAIL <check>: ..." line; exit 0 when all passed (77 without CuPy or a GPU).

  python3 cupy_check.py [CHECK...]   checks: elementwise reduction matmul rawkernel fft
"""
import sys
import traceback

try:
    import numpy as np
    import cupy as cp
except ImportError as e:  # pragma: no cover - the GPU host has CuPy, CI does not
    print("SKIP cupy_check: %s" % e)
    sys.exit(77)

rng = np.random.default_rng(15)


def close(name, got, want, rtol, atol=0.0):
    got = cp.asnumpy(got)
    if got.shape != want.shape:
        raise AssertionError("%s: shape %s, expected %s" % (name, got.shape, want.shape))
    if not np.allclose(got, want, rtol=rtol, atol=atol):
        err = np.max(np.abs(got - want))
        raise AssertionError("%s: max error %g (rtol %g)" % (name, err, rtol))


def elementwise():
    a = rng.standard_normal(1 << 20).astype(np.float32)
    b = rng.standard_normal(1 << 20).astype(np.float32)
    da, db = cp.asarray(a), cp.asarray(b)
    close("a*b+sin(a)", da * db + cp.sin(da), a * b + np.sin(a), 1e-5, 1e-6)
    k = cp.ElementwiseKernel("float32 x, float32 y", "float32 z", "z = x > y ? x - y : y * 2.0f", "remora_ew")
    close("ElementwiseKernel", k(da, db), np.where(a > b, a - b, b * 2.0), 1e-6)
    return "2^20 floats, ufuncs and an ElementwiseKernel"


def reduction():
    a = rng.standard_normal((512, 1024)).astype(np.float64)
    da = cp.asarray(a)
    close("sum", da.sum(), np.array(a.sum()), 1e-10)
    close("max axis 0", da.max(axis=0), a.max(axis=0), 0)
    close("mean axis 1", da.mean(axis=1), a.mean(axis=1), 1e-12)
    close("argmin", da.argmin(), np.array(a.argmin()), 0)
    k = cp.ReductionKernel("float64 x", "float64 y", "x * x", "a + b", "y = sqrt(a)", "0", "remora_l2")
    close("ReductionKernel l2", k(da), np.array(np.linalg.norm(a)), 1e-10)
    return "sum, max, mean, argmin and a ReductionKernel over 512x1024 doubles"


def matmul():
    for dtype, rtol in ((np.float32, 1e-4), (np.float64, 1e-10)):
        a = rng.standard_normal((384, 256)).astype(dtype)
        b = rng.standard_normal((256, 320)).astype(dtype)
        close("matmul %s" % np.dtype(dtype).name, cp.matmul(cp.asarray(a), cp.asarray(b)), a @ b, rtol, 1e-4)
    return "cupy.matmul float32 and float64 (cuBLAS)"


def rawkernel():
    src = r'''
    extern "C" __global__ void saxpy(float a, const float* x, const float* y, float* out, int n) {
      int i = blockDim.x * blockIdx.x + threadIdx.x;
      if (i < n) out[i] = a * x[i] + y[i];
    }'''
    k = cp.RawKernel(src, "saxpy")  # compiled by NVRTC on the client
    n = 100003
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    dx, dy = cp.asarray(x), cp.asarray(y)
    out = cp.empty_like(dx)
    k(((n + 255) // 256,), (256,), (np.float32(2.5), dx, dy, out, np.int32(n)))
    # The GPU fuses a*x+y into one rounding (FMA), NumPy rounds twice: near zero only an
    # absolute tolerance of a float32 ulp or so separates them (seen natively: 9.5e-07).
    close("RawKernel saxpy", out, 2.5 * x + y, 1e-6, 4e-6)
    return "an NVRTC-compiled RawKernel (saxpy, %d elements)" % n


def fft():
    x = (rng.standard_normal(4096) + 1j * rng.standard_normal(4096)).astype(np.complex64)
    close("fft", cp.fft.fft(cp.asarray(x)), np.fft.fft(x), 1e-3, 1e-3)
    r = rng.standard_normal((64, 128)).astype(np.float64)
    close("rfft2", cp.fft.rfft2(cp.asarray(r)), np.fft.rfft2(r), 1e-9, 1e-9)
    close("ifft round trip", cp.fft.ifft(cp.fft.fft(cp.asarray(x))), x, 1e-4, 1e-4)
    return "cupy.fft fft, rfft2 and a round trip (cuFFT)"


CHECKS = {f.__name__: f for f in (elementwise, reduction, matmul, rawkernel, fft)}


def main(names):
    try:
        n = cp.cuda.runtime.getDeviceCount()
    except Exception as e:  # no GPU, no server
        print("FAIL cupy_check: no device (%s)" % e)
        return 1
    print("cupy %s, %d device(s), %s" % (cp.__version__, n, cp.cuda.runtime.getDeviceProperties(0)["name"].decode()))
    failed = 0
    for name in names or CHECKS:
        try:
            what = CHECKS[name]()
            cp.cuda.Device().synchronize()
            print("PASS %s: %s" % (name, what))
        except Exception as e:
            failed += 1
            print("FAIL %s: %s" % (name, e))
            traceback.print_exc()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
