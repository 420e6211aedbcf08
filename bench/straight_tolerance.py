"""How far apart a thread-count change puts the killed-sweep test's sweep: the same plan
(tests/sweep/test_foreground_run.py) run through at TATU_THREADS=1 and at torch's default count,
compared with that test's own measures. The count changes LayerNorm's gradient sums at every step,
a larger perturbation than the rare straight-run difference (a few ulps after one update), so the
printed sizes bound what the test's tolerances must admit.

    .venv/bin/python -u bench/straight_tolerance.py --world /tmp/straight/world --out /tmp/calib

WORLD is bench/straight_runs.py's tiny world (the tests' data and trunk).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "sweep"))

from sweep_world import plan_text, run_through  # noqa: E402


def float_gaps(a, b, out: list) -> None:
    """Every (relative, absolute) gap of two JSON-like values' floats, into out."""
    if isinstance(a, dict):
        for k in a:
            float_gaps(a[k], b.get(k), out)
    elif isinstance(a, (list, tuple)):
        for x, y in zip(a, b):
            float_gaps(x, y, out)
    elif isinstance(a, float) and isinstance(b, (int, float)) and math.isfinite(a) and math.isfinite(b):
        gap = abs(a - b)
        out.append((gap / max(abs(a), abs(b), 1e-300), gap))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    import test_foreground_run as t

    world = json.loads((args.world / "world.json").read_text())
    dirs = {}
    for label, extra in (("t1", ", TATU_THREADS = 1"), ("default", "")):
        root = args.out / label
        root.mkdir(parents=True, exist_ok=True)
        plan = root / "tuned.toml"
        plan.write_text(plan_text("tuned", Path(world["data"]), Path(world["trunk"]), tune=t.TUNE, extra=extra))
        run_through(plan, root / "sweeps", "compare: 4/4 done")
        dirs[label] = root / "sweeps" / "tuned"
    a, b = dirs["t1"], dirs["default"]
    wa, wb = t.final_weights(a), t.final_weights(b)
    for name in wa:
        print(f"{name}: weights max |diff| {t.weights_apart(wa[name], wb[name])[0]:.3g} (bits {'equal' if wa[name] == wb[name] else 'differ'})")
    for what, x, y in (("tuned", t.read_lock(a).tuned.to_json(), t.read_lock(b).tuned.to_json()),
                       ("losses", t.step_losses(a), t.step_losses(b)),
                       ("report", json.loads(t.report_numbers(a)), json.loads(t.report_numbers(b)))):
        gaps: list = []
        float_gaps(x, y, gaps)
        print(f"{what}: {len(gaps)} floats, largest relative gap {max((g[0] for g in gaps), default=0):.3g}, "
              f"largest absolute {max((g[1] for g in gaps), default=0):.3g}; "
              f"beyond the test's tolerances: {t.numbers_apart(x, y, what)[:5]}")


if __name__ == "__main__":
    main()
