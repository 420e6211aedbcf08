"""tatu asks oneMKL for its strict reproducible sums before a process's first matmul, and says
what MKL actually runs with (read back from MKL, not from the variable it set)."""
import os
import subprocess
import sys
import warnings

from strict import cannot_run

from tatu.model import cpu_sums

# Products whose inner dimension MKL may split across threads, from a gemm with a long inner
# dimension to gemv-like ones. In MKL's default mode some of them change their last bits with the
# thread count on some CPUs (an AMX Xeon does for the first; an AVX2-only EPYC was seen to keep it
# equal), so the test searches them for a counterexample instead of assuming one. Printed: the
# mode read back from MKL, where its value came from, then per shape whether 1 and 2 threads gave
# the same bits.
SHAPES = [(64, 8192, 64), (16, 131072, 16), (1, 262144, 1), (128, 4096, 128), (8, 65536, 256),
          (256, 65536, 8), (1, 32768, 512), (512, 32768, 1), (33, 50001, 17), (256, 2048, 256)]
GEMM = f"""
import hashlib, sys
from tatu.model import cpu_sums
source = cpu_sums.request()
import torch
same = []
for m, k, n in {SHAPES!r}:
    g = torch.Generator().manual_seed(m * 1000003 + k + n)
    a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
    hashes = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        hashes.append(hashlib.sha256((a @ b).numpy().tobytes()).hexdigest())
    same.append(str(int(hashes[0] == hashes[1])))
print(cpu_sums.active_mode(), source, "".join(same), sep="|")
"""


def gemm_in_fresh_process(mkl_cbwr: str | None) -> tuple[str, str, list[bool]]:
    """(the mode MKL reports, where its value came from, per shape: equal bits at 1 and 2 threads)."""
    env = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"}
    if mkl_cbwr is not None:
        env["MKL_CBWR"] = mkl_cbwr
    proc = subprocess.run([sys.executable, "-c", GEMM], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    mode, source, same = proc.stdout.strip().split("|")
    assert len(same) == len(SHAPES)
    return mode, source, [flag == "1" for flag in same]


def test_strict_sums_keep_every_gemms_bits_whatever_the_thread_count():
    if cpu_sums.active_mode() is None:
        cannot_run("this torch has no oneMKL")
    if (os.cpu_count() or 1) < 2:
        cannot_run("a thread count of 2 needs 2 CPUs")
    mode, source, same = gemm_in_fresh_process(None)
    assert (mode, source) == ("AUTO,STRICT", "tatu's default")
    assert all(same), [shape for shape, equal in zip(SHAPES, same) if not equal]
    # a process tatu started inherits the value, and it is still tatu's default, not the user's
    assert gemm_in_fresh_process(cpu_sums.MKL_CBWR)[:2] == ("AUTO,STRICT", "tatu's default")


def test_the_default_mode_is_really_switched_and_searched_for_a_counterexample():
    """The other direction, so the check above could fail: the environment's value wins, MKL
    reports that it runs in it, and where one of the shapes changes its bits with the thread
    count in that mode, the strict test above is shown to be able to see a difference. Where none
    does (a CPU whose MKL code path keeps these sums equal), the read-back mode is the evidence
    that the strict test's equality came from the mode, and the test says so."""
    if cpu_sums.active_mode() is None:
        cannot_run("this torch has no oneMKL")
    if (os.cpu_count() or 1) < 2:
        cannot_run("a thread count of 2 needs 2 CPUs")
    mode, source, same = gemm_in_fresh_process("AUTO")
    assert (mode, source) == ("AUTO", "env")
    if all(same):
        warnings.warn(f"MKL_CBWR=AUTO (read back from MKL) kept all {len(SHAPES)} shapes' bits at 1 and 2 "
                      "threads on this CPU: no counterexample to the default mode here")


def test_the_line_a_run_prints_says_what_mkl_runs_with():
    assert cpu_sums.describe("AUTO,STRICT", "tatu's default") == "CPU matmul sums: MKL_CBWR=AUTO,STRICT (tatu's default)"
    assert "may change from run to run (a matmul ran before MKL_CBWR was set)" in cpu_sums.describe("OFF", "tatu's default")
    assert "may change from run to run (env)" in cpu_sums.describe("OFF", "env")
    assert "no oneMKL" in cpu_sums.describe(None, "tatu's default")


def test_settle_warms_every_vml_op_on_one_thread_then_on_every_thread_of_the_team(monkeypatch):
    """settle() calls each VML op first on a tensor below ATen's VML grain size (2048: one
    thread), then on one 2048-element chunk per team thread, so a run's own VML calls (AdamW's
    sqrt among them) are never the process's first (docs/operations.md, the straight-run
    difference). Recorded by wrapping torch's functions; the results are not used."""
    import torch

    calls = []
    for op in cpu_sums.VML_OPS:
        real = getattr(torch, op)
        monkeypatch.setattr(torch, op, lambda x, _op=op, _real=real: calls.append((_op, x.numel())) or _real(x))
    monkeypatch.setattr(cpu_sums, "_WARMED_AT", set())  # as in a fresh process (earlier tests scored)
    team = torch.get_num_threads()
    cpu_sums.settle()
    assert [op for op, n in calls if n < 2048] == list(cpu_sums.VML_OPS)
    assert [op for op, n in calls if n >= 2048 * team] == list(cpu_sums.VML_OPS)
    assert [i for i, (_, n) in enumerate(calls) if n < 2048] == list(range(len(cpu_sums.VML_OPS)))  # one thread first
    warmed = len(calls)
    cpu_sums.warm_vml()  # once per process and thread count: score_lines' call after the daemon's costs nothing
    assert len(calls) == warmed
    assert "sqrt" in cpu_sums.VML_OPS
