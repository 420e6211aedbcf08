"""The order of torch's CPU matmul sums: oneMKL's strict reproducible mode, asked for before the
process's first matmul and read back from MKL itself.

torch's CPU build links oneMKL, whose gemm splits a product's inner dimension across threads and,
left to itself, may sum the parts in an order that follows the thread count (and MKL may pick the
count itself). In its strict conditional numerical reproducibility mode (MKL_CBWR=AUTO,STRICT)
gemm sums in an order fixed by the shapes alone, whatever the thread count: docs/operations.md. MKL reads MKL_CBWR once, at its first call,
so request() runs before any matmul of the process (the daemon's start, the `tatu` command, the
tests' conftest); a value already in the environment wins. request() imports no torch: `tatu` calls it
before a subcommand decides whether to load torch. settle() also makes a run's first VML calls
(torch's sqrt, exp, log... on CPU) its own warm-up's, not the run's: warm_vml() says why.
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

MKL_CBWR = "AUTO,STRICT"
_STRICT = 0x10000  # MKL_CBWR_STRICT, a flag beside the branch in what MKL reports
# MKL's branch numbers (mkl_cbwr.h), the ones an x86 machine may report
_BRANCHES = {1: "OFF", 2: "AUTO", 3: "COMPATIBLE", 4: "SSE2", 6: "SSSE3", 7: "SSE4_1", 8: "SSE4_2",
             9: "AVX", 10: "AVX2", 12: "AVX512", 14: "AVX512_E1"}


def request() -> str:
    """Set MKL_CBWR to the strict mode unless the environment has a value; where the value came
    from. tatu's own value is "tatu's default" in every process: the one that set it, and the
    daemons and members it starts, which inherit it."""
    if not os.environ.get("MKL_CBWR"):
        os.environ["MKL_CBWR"] = MKL_CBWR
    return "tatu's default" if os.environ["MKL_CBWR"] == MKL_CBWR else "env"


def active_mode() -> str | None:
    """The mode MKL runs with in this process ("AUTO,STRICT", "OFF", ...), None where torch has no
    oneMKL. Reading it fixes it for the process: call it after request(). libtorch links oneMKL
    statically and exports its service getter, not the public mkl_cbwr_get it stands behind."""
    import torch  # the library torch loaded, found from torch itself; `tatu` imports this module without it

    lib = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    try:
        getter = ctypes.CDLL(str(lib)).mkl_serv_cbwr_get
    except (OSError, AttributeError):
        return None
    getter.restype = ctypes.c_int
    mode = getter(ctypes.c_int(-1)) & 0xFFFFFFFF  # MKL_CBWR_ALL: the branch and its flags
    branch = _BRANCHES.get(mode & 0xFFFF, str(mode & 0xFFFF))
    return f"{branch},STRICT" if mode & _STRICT else branch


def describe(mode: str | None, source: str) -> str:
    """The line a run prints at start, for active_mode()'s answer and request()'s."""
    if mode is None:
        return "CPU matmul sums: torch has no oneMKL here (its own kernels' order)"
    if mode == "OFF":
        why = "env" if source == "env" else "a matmul ran before MKL_CBWR was set"
        return f"CPU matmul sums: MKL's default order, which may change from run to run ({why})"
    return f"CPU matmul sums: MKL_CBWR={mode} ({source})"


# torch ops that call oneMKL's VML on CPU float tensors (ATen/cpu/vml.h, `vms<Op>(..., VML_HA)`), on
# chunks of at least 2048 elements, one chunk per thread of the intra-op team.
VML_OPS = ("sqrt", "exp", "log", "log10", "log2", "sin", "cos", "tan", "tanh", "acos", "asin", "atan",
           "erf", "erfc", "erfinv", "trunc")


_WARMED_AT: set[int] = set()  # the thread counts this process has warmed VML at


def warm_vml() -> None:
    """Call every VML op once on one thread, then once on every thread of the team, results unused;
    once per process and thread count (the daemon at its start, then any scoring: score_lines).

    Why: a straight run at 2 threads was caught (bench/straight_runs.py --daemon) with its first
    AdamW sqrt of the 10816-element embedding, the process's first VML sqrt, made by the two
    threads at once, back with about 11 correct bits (relative error 3e-4, not VML_HA's 1 ulp) on
    exactly the first thread's chunk, and right in the next call; that is the rare straight-run
    difference of docs/operations.md. So a run's first VML calls are these, on a tensor no run
    uses, before its own: one thread first (below the grain size), then one chunk per thread."""
    import torch

    threads = max(1, torch.get_num_threads())
    if threads in _WARMED_AT:
        return
    _WARMED_AT.add(threads)
    small, large = torch.full((64,), 0.5), torch.full((2048 * threads,), 0.5)
    for x in (small, large):
        for op in VML_OPS:
            getattr(torch, op)(x)


def settle() -> tuple[str | None, str]:
    """request(), then what MKL runs with: (active_mode(), the line a run prints at start); then
    warm_vml(), so the run's own VML calls are not the process's first."""
    source = request()
    mode = active_mode()
    warm_vml()
    return mode, describe(mode, source)


def machine_line() -> str:
    """The CPU and the kernels a number was computed with: its model name, the vector kernels ATen
    dispatches to (ATEN_CPU_CAPABILITY lowers them), whether it has AMX, and MKL's sum mode.

    Another CPU sums in another order, so a table printed with this line says where it came from."""
    import torch

    from tatu.model.precision import CPUINFO, cpu_flags

    cpuinfo = CPUINFO.read_text() if CPUINFO.is_file() else ""
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")),
                 "unknown CPU")
    capability = torch.backends.cpu.get_cpu_capability()
    chosen = f"ATEN_CPU_CAPABILITY={os.environ['ATEN_CPU_CAPABILITY']}" if os.environ.get("ATEN_CPU_CAPABILITY") else "auto"
    amx = "with AMX" if "amx_tile" in cpu_flags(cpuinfo) else "no AMX"
    source = request()
    return (f"machine: {model} ({os.cpu_count()} cores, {amx}); ATen kernels {capability} ({chosen}); "
            f"{describe(active_mode(), source).removeprefix('CPU matmul sums: ')}; torch {torch.__version__}")
