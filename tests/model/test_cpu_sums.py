"""tatu asks oneMKL for its strict reproducible sums before a process's first matmul, and says
what MKL actually runs with (read back from MKL, not from the variable it set)."""
import os
import subprocess
import sys

from strict import cannot_run

from tatu.model import cpu_sums

# One gemm whose inner dimension MKL splits across threads: in MKL's default mode its bits follow
# the thread count (so a thread that runs short of work, or a run with a different count, moves
# the last bits); in the strict mode they do not. Printed: the result's hash at 1 and at 2 threads.
GEMM = """
import hashlib, sys
from tatu.model import cpu_sums
source = cpu_sums.request()
import torch
g = torch.Generator().manual_seed(0)
a, b = torch.randn(64, 8192, generator=g), torch.randn(8192, 64, generator=g)
hashes = []
for threads in (1, 2):
    torch.set_num_threads(threads)
    hashes.append(hashlib.sha256((a @ b).numpy().tobytes()).hexdigest())
print(cpu_sums.active_mode(), source, *hashes, sep="|")
"""


def gemm_in_fresh_process(mkl_cbwr: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"}
    if mkl_cbwr is not None:
        env["MKL_CBWR"] = mkl_cbwr
    proc = subprocess.run([sys.executable, "-c", GEMM], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().split("|")


def test_strict_sums_keep_a_gemms_bits_whatever_the_thread_count_and_the_default_does_not():
    if cpu_sums.active_mode() is None:
        cannot_run("this torch has no oneMKL")
    if (os.cpu_count() or 1) < 2:
        cannot_run("a thread count of 2 needs 2 CPUs")
    mode, source, one, two = gemm_in_fresh_process(None)
    assert (mode, source) == ("AUTO,STRICT", "tatu's default")
    assert one == two
    # a process tatu started inherits the value, and it is still tatu's default, not the user's
    assert gemm_in_fresh_process(cpu_sums.MKL_CBWR)[:2] == ["AUTO,STRICT", "tatu's default"]
    # The other direction, so the check above could fail: the environment's value wins, and in
    # a mode that is not strict this same product does change with the thread count.
    mode, source, one, two = gemm_in_fresh_process("AUTO")
    assert (mode, source) == ("AUTO", "env")
    assert one != two


def test_the_line_a_run_prints_says_what_mkl_runs_with():
    assert cpu_sums.describe("AUTO,STRICT", "tatu's default") == "CPU matmul sums: MKL_CBWR=AUTO,STRICT (tatu's default)"
    assert "may change from run to run (a matmul ran before MKL_CBWR was set)" in cpu_sums.describe("OFF", "tatu's default")
    assert "may change from run to run (env)" in cpu_sums.describe("OFF", "env")
    assert "no oneMKL" in cpu_sums.describe(None, "tatu's default")
