"""Which VML computation gives a differing sqrt that bench/straight_runs.py kept: the odd run's
input and output of `5_sqrt` for one tensor, recomputed by oneMKL's vmsSqrt in each accuracy mode
(LA, HA, EP) on each code branch (MKL_CBWR, one fresh process per branch), and by the AVX
approximation x * rsqrt(x) when a C compiler is at hand. The caught case (docs/operations.md) was
equal to the bit to EP on the SSE4_2/AVX/AVX2 branches, which is x * _mm256_rsqrt_ps(x), while
torch asks for HA on the process's AVX-512 branch.

    .venv/bin/python bench/vml_identify.py --ref /tmp/straight-daemon/differ/r00000.pt \\
        --odd /tmp/straight-daemon/differ/r00023.pt --key s1/p0
"""
from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
from pathlib import Path

BRANCHES = ("AUTO", "COMPATIBLE", "SSE4_2", "AVX", "AVX2", "AVX512")
MODES = {"LA": 0x1, "HA": 0x2, "EP": 0x3}  # mkl_vml_defines.h; | VML_ERRMODE_IGNORE (0x100)


def load(args):
    import torch

    ref, odd = torch.load(args.ref), torch.load(args.odd)
    x = ref[f"{args.key}/4_exp_avg_sq_addcmul"].flatten().contiguous()
    assert torch.equal(x, odd[f"{args.key}/4_exp_avg_sq_addcmul"].flatten()), "the sqrt's inputs differ: not the first difference"
    good, bad = ref[f"{args.key}/5_sqrt"].flatten(), odd[f"{args.key}/5_sqrt"].flatten()
    apart = (good != bad).nonzero().flatten()
    lo, hi = int(apart.min()), int(apart.max()) + 1
    return x, good, bad, lo, hi


def branch(args) -> None:
    import torch

    x, good, bad, lo, hi = load(args)
    lib = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
    xs = x[lo:hi].contiguous()
    n = ctypes.c_int(hi - lo)
    said = []
    for name, mode in MODES.items():
        out = torch.empty_like(xs)
        m = ctypes.c_longlong(mode | 0x100)
        lib.VMSSQRT_(ctypes.byref(n), ctypes.c_void_p(xs.data_ptr()), ctypes.c_void_p(out.data_ptr()), ctypes.byref(m))
        said.append(f"{name}: " + ("= the odd run's" if torch.equal(out, bad[lo:hi]) else "= the reference's" if torch.equal(out, good[lo:hi])
                                   else f"{int((out != bad[lo:hi]).sum())} elements apart from the odd run's"))
    print(f"MKL_CBWR={os.environ['MKL_CBWR']}: " + "; ".join(said))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", required=True)
    ap.add_argument("--odd", required=True)
    ap.add_argument("--key", default="s1/p0", help="STEP/PARAM whose 5_sqrt differs")
    ap.add_argument("--branch", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.branch:
        branch(args)
        return
    x, good, bad, lo, hi = load(args)
    print(f"{args.key}/5_sqrt: elements {lo}-{hi - 1} apart ({int((good != bad).sum())} of them)")
    for b in BRANCHES:
        subprocess.run([sys.executable, __file__, "--branch", "--ref", args.ref, "--odd", args.odd, "--key", args.key],
                       env={**os.environ, "MKL_CBWR": b}, check=True)
    src = Path("/tmp/vml_identify_rsqrt.c")
    src.write_text("#include <immintrin.h>\nvoid f(const float*x,float*o,int n){for(int i=0;i+8<=n;i+=8){__m256 a=_mm256_loadu_ps(x+i);"
                   "_mm256_storeu_ps(o+i,_mm256_mul_ps(a,_mm256_rsqrt_ps(a)));}}\n")
    if subprocess.run(["gcc", "-O2", "-mavx", "-shared", "-fPIC", str(src), "-o", "/tmp/vml_identify_rsqrt.so"]).returncode == 0:
        import torch

        xs = x[lo:hi].contiguous()
        out = xs.clone()  # a tail of fewer than 8 keeps its input: compared on the full vectors only
        ctypes.CDLL("/tmp/vml_identify_rsqrt.so").f(ctypes.c_void_p(xs.data_ptr()), ctypes.c_void_p(out.data_ptr()), ctypes.c_int(hi - lo))
        full = (hi - lo) // 8 * 8
        print(f"x * _mm256_rsqrt_ps(x): {int((out[:full] != bad[lo:lo + full]).sum())} of {full} elements apart from the odd run's")


if __name__ == "__main__":
    main()
