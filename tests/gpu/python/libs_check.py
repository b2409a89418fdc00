"""cuSOLVER, cuSPARSE, cuRAND and cuFFT as PyTorch and CuPy use them, checked against CPU
references (issue 42): torch.linalg (svd, eigh, eig, qr, lstsq, pinv, matrix_rank, det, inv,
cholesky_ex, lu_factor), torch.sparse (CSR and COO matmul, sampled addmm), CuPy's linalg,
cupyx.scipy.sparse (spsolve, eigsh, matrix products, conversions), cupy.random (host and device
generators, large draws) and cupy.fft. Prints one `PASS name: ...` or `FAIL name: ...` line per
check, `SKIP name: ...` for a framework that is not installed, and a final `PASS libs_check: ...`
or `FAIL libs_check: ...` (exit 0 / 1; 77 without a CUDA device). Runs natively and through
Remora (tests/gpu/python/libs-gpu.sh runs both and prints the table):

    python3 tests/gpu/python/libs_check.py [torch|cupy]
    build/bin/remora-run --backend cuda --transport tcp -- python3 tests/gpu/python/libs_check.py
"""
import sys
import traceback

NAME = "libs_check"
failures = []
passes = []


def check(name, fn):
    try:
        detail = fn()
        passes.append(name)
        print("PASS %s: %s" % (name, detail), flush=True)
    except Exception as e:  # noqa: BLE001 - each check reports its own failure and the run goes on
        failures.append(name)
        msg = str(e).splitlines()[0] if str(e) else ""
        print("FAIL %s: %s: %s" % (name, type(e).__name__, msg), flush=True)
        if "-v" in sys.argv:
            traceback.print_exc()


# ---- PyTorch -----------------------------------------------------------------------------------


def torch_checks():
    import torch

    if not torch.cuda.is_available():
        print("SKIP torch: no CUDA device")
        return False
    dev = torch.device("cuda")
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False

    def close(what, got, want, rtol=1e-5, atol=1e-6):
        got, want = got.detach().cpu().to(torch.float64 if not got.is_complex() else torch.complex128), want.detach().cpu().to(
            torch.float64 if not want.is_complex() else torch.complex128)
        if not torch.allclose(got, want, rtol=rtol, atol=atol):
            raise AssertionError("%s: max |diff| %g" % (what, (got - want).abs().max().item()))

    a = torch.randn(48, 32, dtype=torch.float64)
    sq = torch.randn(24, 24, dtype=torch.float64)
    spd = sq @ sq.T + 24 * torch.eye(24, dtype=torch.float64)
    sym = sq + sq.T

    def svd():
        for driver in (None, "gesvd", "gesvdj", "gesvda"):
            u, s, vh = torch.linalg.svd(a.to(dev), full_matrices=False, driver=driver)
            close("svd(%s) singular values" % driver, s, torch.linalg.svdvals(a))
            close("svd(%s) reconstruction" % driver, u @ torch.diag(s) @ vh, a, 1e-8, 1e-8)
        batch = torch.randn(6, 9, 7, dtype=torch.float32)
        close("batched svdvals (float32)", torch.linalg.svdvals(batch.to(dev)), torch.linalg.svdvals(batch), 1e-4, 1e-4)
        return "gesvd, gesvdj, gesvda, batched: singular values and U S V^T as the CPU's"

    def eigh():
        w, v = torch.linalg.eigh(sym.to(dev))
        close("eigh eigenvalues", w, torch.linalg.eigvalsh(sym))
        close("eigh reconstruction", v @ torch.diag(w) @ v.T, sym, 1e-8, 1e-8)
        batch = torch.randn(5, 12, 12, dtype=torch.float32)
        batch = batch + batch.transpose(-1, -2)
        close("batched eigvalsh", torch.linalg.eigvalsh(batch.to(dev)), torch.linalg.eigvalsh(batch), 1e-4, 1e-4)
        return "eigenvalues and V W V^T as the CPU's (single and batched)"

    def eig():
        w = torch.linalg.eigvals(sq.to(dev))
        want = torch.linalg.eigvals(sq)
        got = w.cpu()
        key = lambda t: sorted(t.tolist(), key=lambda z: (round(z.real, 6), round(z.imag, 6)))  # noqa: E731
        for g, x in zip(key(got), key(want)):
            if abs(g - x) > 1e-6 * (1 + abs(x)):
                raise AssertionError("eig: %s vs %s" % (g, x))
        w2, v = torch.linalg.eig(sq.to(dev))
        close("eig A V = V W", sq.to(dev).to(torch.complex128) @ v, v @ torch.diag(w2), 1e-7, 1e-7)
        return "eigenvalues as the CPU's, A V = V W"

    def qr():
        q, r = torch.linalg.qr(a.to(dev))
        close("qr reconstruction", q @ r, a, 1e-9, 1e-9)
        close("qr orthogonality", q.T @ q, torch.eye(32, dtype=torch.float64), 1e-9, 1e-9)
        return "Q R = A, Q^T Q = I"

    def lstsq():
        b = torch.randn(48, 3, dtype=torch.float64)
        got = torch.linalg.lstsq(a.to(dev), b.to(dev)).solution
        close("lstsq", got, torch.linalg.lstsq(a, b).solution, 1e-8, 1e-8)
        return "as the CPU's"

    def pinv_rank_det_inv():
        close("pinv", torch.linalg.pinv(a.to(dev)), torch.linalg.pinv(a), 1e-8, 1e-8)
        low = torch.randn(30, 5, dtype=torch.float64) @ torch.randn(5, 20, dtype=torch.float64)
        r = torch.linalg.matrix_rank(low.to(dev)).item()
        if r != 5:
            raise AssertionError("matrix_rank %d, expected 5" % r)
        close("det", torch.linalg.det(sq.to(dev)), torch.linalg.det(sq), 1e-8, 1e-8)
        close("inv", torch.linalg.inv(spd.to(dev)), torch.linalg.inv(spd), 1e-9, 1e-9)
        return "pinv, matrix_rank (5), det, inv as the CPU's"

    def cholesky_lu():
        l, info = torch.linalg.cholesky_ex(spd.to(dev))
        if info.item() != 0:
            raise AssertionError("cholesky_ex info %d" % info.item())
        close("cholesky", l, torch.linalg.cholesky(spd), 1e-9, 1e-9)
        lu, piv = torch.linalg.lu_factor(sq.to(dev))
        lu_cpu, piv_cpu = torch.linalg.lu_factor(sq)
        close("lu_factor", lu, lu_cpu, 1e-9, 1e-9)
        if not torch.equal(piv.cpu(), piv_cpu):
            raise AssertionError("lu_factor pivots differ")
        b = torch.randn(24, 2, dtype=torch.float64)
        close("lu_solve", torch.linalg.lu_solve(lu, piv, b.to(dev)), torch.linalg.solve(sq, b), 1e-8, 1e-8)
        batch = torch.randn(8, 6, 6, dtype=torch.float64)
        batch = batch @ batch.transpose(-1, -2) + 6 * torch.eye(6, dtype=torch.float64)
        close("batched cholesky", torch.linalg.cholesky(batch.to(dev)), torch.linalg.cholesky(batch), 1e-9, 1e-9)
        return "cholesky_ex, lu_factor (pivots too), lu_solve, batched cholesky as the CPU's"

    def sparse():
        dense = torch.randn(40, 30)
        dense[torch.rand(40, 30) < 0.8] = 0
        x = torch.randn(30, 7)
        csr = dense.to_sparse_csr().to(dev)
        close("CSR @ dense", csr @ x.to(dev), dense @ x, 1e-4, 1e-4)
        coo = dense.to_sparse().to(dev)
        close("COO @ dense", torch.sparse.mm(coo, x.to(dev)), dense @ x, 1e-4, 1e-4)
        close("CSR @ vector", csr @ x[:, 0].to(dev), dense @ x[:, 0], 1e-4, 1e-4)
        other = torch.randn(30, 20)
        other[torch.rand(30, 20) < 0.7] = 0
        prod = torch.sparse.mm(coo, other.to_sparse().to(dev)).to_dense()
        close("COO @ COO (SpGEMM)", prod, dense @ other, 1e-4, 1e-4)
        mask = dense.to_sparse_csr().to(dev)
        m1, m2 = torch.randn(40, 16), torch.randn(16, 30)
        got = torch.sparse.sampled_addmm(mask, m1.to(dev), m2.to(dev), beta=0.5, alpha=2.0).to_dense()
        want = (0.5 * dense + 2.0 * (m1 @ m2)) * (dense != 0)
        close("sampled_addmm", got, want, 1e-4, 1e-4)
        tri = torch.tril(torch.randn(20, 20)) + 20 * torch.eye(20)
        rhs = torch.randn(20, 3)
        got = torch.triangular_solve(rhs.to(dev), tri.to_sparse_csr().to(dev), upper=False).solution
        close("sparse triangular solve", got, torch.linalg.solve_triangular(tri, rhs, upper=False), 1e-4, 1e-4)
        return "CSR and COO matmul, SpGEMM, sampled_addmm, triangular solve as the CPU's"

    for name, fn in (("torch.linalg.svd", svd), ("torch.linalg.eigh", eigh), ("torch.linalg.eig", eig), ("torch.linalg.qr", qr),
                     ("torch.linalg.lstsq", lstsq), ("torch.linalg.pinv/matrix_rank/det/inv", pinv_rank_det_inv),
                     ("torch.linalg.cholesky_ex/lu_factor", cholesky_lu), ("torch.sparse", sparse)):
        check(name, fn)
    return True


# ---- CuPy --------------------------------------------------------------------------------------


def cupy_checks():
    import cupy as cp
    import numpy as np

    rng = np.random.default_rng(1)

    def close(what, got, want, rtol=1e-6, atol=1e-8):
        got = cp.asnumpy(got) if isinstance(got, cp.ndarray) else got
        if not np.allclose(got, want, rtol=rtol, atol=atol):
            raise AssertionError("%s: max |diff| %g" % (what, np.abs(np.asarray(got) - np.asarray(want)).max()))

    a = rng.standard_normal((40, 30))
    sq = rng.standard_normal((25, 25))
    spd = sq @ sq.T + 25 * np.eye(25)
    sym = sq + sq.T

    _lstsq_rhs = None

    def linalg_with_rhs():
        nonlocal _lstsq_rhs
        _lstsq_rhs = rng.standard_normal(40)
        close("svd", cp.linalg.svd(cp.asarray(a), compute_uv=False), np.linalg.svd(a, compute_uv=False))
        w, _ = cp.linalg.eigh(cp.asarray(sym))
        close("eigh", w, np.linalg.eigvalsh(sym))
        q, r = cp.linalg.qr(cp.asarray(a))
        close("qr", q @ r, a)
        close("cholesky", cp.linalg.cholesky(cp.asarray(spd)), np.linalg.cholesky(spd))
        close("inv", cp.linalg.inv(cp.asarray(spd)), np.linalg.inv(spd))
        b = rng.standard_normal(25)
        close("solve", cp.linalg.solve(cp.asarray(sq), cp.asarray(b)), np.linalg.solve(sq, b))
        close("det", cp.linalg.det(cp.asarray(sq)), np.linalg.det(sq))
        close("lstsq", cp.linalg.lstsq(cp.asarray(a), cp.asarray(_lstsq_rhs), rcond=None)[0],
              np.linalg.lstsq(a, _lstsq_rhs, rcond=None)[0])
        close("pinv", cp.linalg.pinv(cp.asarray(a)), np.linalg.pinv(a))
        batch = rng.standard_normal((5, 8, 8))
        close("batched inv", cp.linalg.inv(cp.asarray(batch)), np.linalg.inv(batch))
        return "svd, eigh, qr, cholesky, inv, solve, det, lstsq, pinv, batched inv as NumPy's"

    def sparse():
        import cupyx.scipy.sparse as csp
        import cupyx.scipy.sparse.linalg as cspl
        import scipy.sparse as ssp

        m = ssp.random(60, 60, density=0.08, random_state=3, format="csr") + 10 * ssp.eye(60, format="csr")
        x = rng.standard_normal(60)
        g = csp.csr_matrix(m)
        close("csr @ vector", g @ cp.asarray(x), m @ x)
        close("csr @ csr", (g @ g).toarray(), (m @ m).toarray())
        close("csr + csr", (g + g.T).toarray(), (m + m.T).toarray())
        close("csr -> csc -> coo", g.tocsc().tocoo().toarray(), m.toarray())
        b = m @ x
        close("spsolve", cspl.spsolve(g, cp.asarray(b)), x, 1e-6, 1e-6)
        s = m + m.T
        w = cspl.eigsh(csp.csr_matrix(s), k=3, which="LA", return_eigenvectors=False)
        want = np.sort(np.linalg.eigvalsh(s.toarray()))[-3:]
        close("eigsh", np.sort(cp.asnumpy(w)), want, 1e-5, 1e-5)
        close("cg", cspl.cg(csp.csr_matrix(s + 60 * ssp.eye(60)), cp.asarray(b))[0],
              np.linalg.solve((s + 60 * ssp.eye(60)).toarray(), b), 1e-4, 1e-4)
        return "SpMV, SpGEMM, add, conversions, spsolve, eigsh, cg as SciPy's"

    def random():
        for gen in (cp.random.default_rng(7), cp.random.RandomState(7)):
            u = gen.random(2_400_000) if hasattr(gen, "random") else gen.random_sample(2_400_000)
            m = float(u.mean())
            if abs(m - 0.5) > 0.01 or float(u.min()) < 0 or float(u.max()) > 1:
                raise AssertionError("uniform: mean %g" % m)
        n = cp.random.RandomState(3).standard_normal(1_000_000)
        if abs(float(n.mean())) > 0.01 or abs(float(n.std()) - 1) > 0.01:
            raise AssertionError("normal: mean %g std %g" % (float(n.mean()), float(n.std())))
        a1 = cp.random.RandomState(11).standard_normal(1000)
        a2 = cp.random.RandomState(11).standard_normal(1000)
        if not bool(cp.all(a1 == a2)):
            raise AssertionError("the same seed gave other numbers")
        return "uniform (2.4M, two generators), normal, reproducible seeds"

    def fft():
        x = rng.standard_normal((64, 48)) + 1j * rng.standard_normal((64, 48))
        close("fft2", cp.fft.fft2(cp.asarray(x)), np.fft.fft2(x), 1e-8, 1e-8)
        r = rng.standard_normal(1000)
        close("rfft", cp.fft.rfft(cp.asarray(r)), np.fft.rfft(r), 1e-8, 1e-8)
        close("irfft", cp.fft.irfft(cp.fft.rfft(cp.asarray(r)), 1000), r, 1e-8, 1e-8)
        close("fftn", cp.fft.fftn(cp.asarray(x.reshape(8, 8, 48))), np.fft.fftn(x.reshape(8, 8, 48)), 1e-8, 1e-8)
        return "fft2, rfft, irfft, fftn as NumPy's"

    for name, fn in (("cupy.linalg", linalg_with_rhs), ("cupyx.scipy.sparse", sparse), ("cupy.random", random), ("cupy.fft", fft)):
        check(name, fn)
    return True


def main():
    want = [w for w in sys.argv[1:] if not w.startswith("-")] or ["torch", "cupy"]
    ran = False
    try:
        import torch  # noqa: F401

        have_torch = True
    except ImportError:
        have_torch = False
    if "torch" in want:
        if have_torch:
            ran |= torch_checks()
        else:
            print("SKIP torch: not installed")
    if "cupy" in want:
        try:
            import cupy  # noqa: F401

            ran |= cupy_checks()
        except ImportError:
            print("SKIP cupy: not installed")
    if not ran:
        print("SKIP %s: no framework with a CUDA device" % NAME)
        return 77
    if failures:
        print("FAIL %s: %d of %d checks failed: %s" % (NAME, len(failures), len(failures) + len(passes), ", ".join(failures)))
        return 1
    print("PASS %s: %d checks" % (NAME, len(passes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
