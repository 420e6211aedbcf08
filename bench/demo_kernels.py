"""`make demo`'s conclusions under another CPU's arithmetic, at the demo's own scale.

Runs the demo again with ATEN_CPU_CAPABILITY=default (no vector kernels) and MKL_CBWR=COMPATIBLE
(MKL's most portable code path): another sum order everywhere, trunk included. Then compares its
sweep with the reference demo's (tatu.sweep.report.conclusions): the verdict, the configurations that
passed, and the sign of every judged change whose CI excludes zero; and says how far the numbers
moved. tests/ops/test_demo_kernels.py is the same check at the tiny scale, in every `make test`.

    .venv/bin/python -u bench/demo_kernels.py --reference demo --out /tmp/demo-default-kernels

--env KEY=VALUE (repeatable) replaces those variables: the AVX2 stand-in on a CPU with AVX-512 is
`--env ATEN_CPU_CAPABILITY=avx2 --env MKL_ENABLE_INSTRUCTIONS=AVX2`. A finished demo already in
--out (its sweep's report.json) is compared as it is, not run again: say which variables it ran with.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from tatu.ops.demo import SWEEP
from tatu.sweep.report.conclusions import conclusions, disagreements
from tatu.sweep.judge.sweep_report import REPORT_FILE, read_report_json

OTHER_KERNELS = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}


def report(demo: Path) -> dict:
    return read_report_json(demo / "sweeps" / SWEEP / "report")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, required=True, help="a finished `make demo` directory")
    parser.add_argument("--out", type=Path, required=True, help="where the demo under the other kernels runs")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help=f"the other arithmetic's variables (default {' '.join(f'{k}={v}' for k, v in OTHER_KERNELS.items())})")
    args = parser.parse_args()
    other = dict(e.split("=", 1) for e in args.env) if args.env else OTHER_KERNELS
    if not (args.out / "sweeps" / SWEEP / "report" / REPORT_FILE).is_file():
        env = {**os.environ, **other}
        subprocess.run([sys.executable, "-m", "tatu.ops.demo", "--foreground", "--out", str(args.out)], env=env, check=True)
    here, there = report(args.reference), report(args.out)
    a, b = conclusions(here), conclusions(there)
    print(f"reference: chose {a.chosen}; under {' '.join(f'{k}={v}' for k, v in other.items())}: chose {b.chosen}")
    for name in sorted(a.changes):
        x, y = a.changes[name], b.changes.get(name)
        moved = f"{(y.value - x.value) * 100:+.3f} points" if y else "absent"
        print(f"  {name:<34} {x.value * 100:+7.2f}% [{x.lo * 100:+.2f}%,{x.hi * 100:+.2f}%]   other kernels "
              + (f"{y.value * 100:+7.2f}% [{y.lo * 100:+.2f}%,{y.hi * 100:+.2f}%]   moved {moved}" if y else "absent"))
    found = disagreements(a, b)
    print("conclusions: the same" if not found else "conclusions DIFFER:\n  " + "\n  ".join(found))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
