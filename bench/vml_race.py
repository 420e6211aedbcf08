"""The cause of the straight-run difference, in isolation: torch's CPU sqrt (and exp, log, tanh...)
calls oneMKL's VML (`vmsSqrt(..., VML_HA)`, ATen/cpu/vml.h) on chunks of 2048 elements or more, one
chunk per thread of the intra-op team. bench/straight_runs.py caught a run whose first AdamW sqrt
(10816 elements: two chunks) came back with about 11 correct bits (relative error 3e-4, not VML_HA's
1 ulp) on exactly the first chunk, the only time in the run that this happened. This script asks
whether the first VML calls of a fresh process, made by two threads at once, are what does that.

Each trial is a fresh process: MKL's strict mode asked for as a tatu run does (model/cpu_sums.py),
then, with --team, a few matmuls (the intra-op team's threads started, as in a run), with --warm
tatu's mend (model/cpu_sums.py warm_vml()), then each VML function on 10816 elements at the default
thread count, and each result
compared with float64's (beyond 1e-6 relative: low accuracy; which half of the tensor).

    nice -n 10 .venv/bin/python -u bench/vml_race.py --trials 200 [--team] [--warm] [--parallel 3] [--busy 1]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OPS = ("sqrt", "exp", "log", "tanh", "erf", "sin")
N = 10816  # the tiny model's largest tensor (wte): two chunks at ATen's VML grain size (2048) and 2 threads


def trial(warm: bool, team: bool) -> dict:
    from tatu.model import cpu_sums

    cpu_sums.request()
    import torch

    mode = cpu_sums.active_mode()
    g = torch.Generator().manual_seed(0)
    x = torch.rand(N, generator=g) * 1e-4 + 1e-6
    if team:  # the intra-op team's threads started and busy first, as in a run (matmuls, LayerNorm)
        a = torch.rand(256, 256, generator=g)
        for _ in range(3):
            (a @ a).sum()
    if warm:
        from tatu.model.cpu_sums import warm_vml

        warm_vml()
    bad = {}
    for op in OPS:
        y = getattr(torch, op)(x)
        exact = getattr(torch, op)(x.double())
        err = ((y.double() - exact).abs() / exact.abs().clamp_min(1e-300))
        wrong = (err > 1e-6).nonzero().flatten()
        if len(wrong):
            bad[op] = {"elements": len(wrong), "first": int(wrong.min()), "last": int(wrong.max()),
                       "max_rel_err": float(err.max())}
    return {"threads": torch.get_num_threads(), "mkl_cbwr": mode, "bad": bad}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--warm", action="store_true", help="tatu's mend first: model/cpu_sums.py warm_vml()")
    ap.add_argument("--team", action="store_true", help="start the intra-op team with matmuls first")
    ap.add_argument("--parallel", type=int, default=3)
    ap.add_argument("--busy", type=int, default=1, help="busy loops beside every other trial")
    ap.add_argument("--trial", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.trial:
        print(json.dumps(trial(args.warm, args.team)))
        return
    running, done, hits, n = [], 0, 0, 0
    cmd = [sys.executable, __file__, "--trial"] + (["--warm"] if args.warm else []) + (["--team"] if args.team else [])
    while done < args.trials:
        while n < args.trials and len(running) < args.parallel:
            busy = [subprocess.Popen(["timeout", "5", "sh", "-c", "while :; do :; done"], start_new_session=True)
                    for _ in range(args.busy if n % 2 else 0)]
            running.append((subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT), busy))
            n += 1
        proc, busy = running.pop(0)
        out, _ = proc.communicate()
        for b in busy:  # timeout and its loop: the whole session
            try:
                os.killpg(b.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            b.wait()
        done += 1
        got = json.loads(out.strip().splitlines()[-1])
        if got["bad"]:
            hits += 1
            print(json.dumps(got), flush=True)
    print(f"{done} fresh processes ({'warm' if args.warm else 'cold'}, team {'started' if args.team else 'not started'} "
          f"first): {hits} with a low-accuracy VML result")


if __name__ == "__main__":
    main()
