"""A member that ends on any of the daemon's four non-finite reasons (exit 11, no verdict) is
"diverged" everywhere a sweep says what its members did: `tatu sweep status`, `tatu sweep report`'s
closing text, report.json and the verdict, which completes instead of waiting for ever.

The daemon writes the four reasons in daemon/loop.py ("non-finite loss", "non-finite gradient norm")
and daemon/actions.py ("non-finite eval", "non-finite tensor"), each with its exit code: the run's
one view (daemon/run/view.py) decides by that code, never by the words. One tiny sweep is run once;
each case turns one finished member into a diverged one, as the daemon leaves it (its events up to the
abort, its resume state, no verdict and no final/), and restores it afterwards.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sweep_world import plan_world, run_through
from tiny_world import clean_environ

from tatu.exitcodes import NONFINITE_LOSS
from tatu.sweep.plan.lock import read_lock

pytestmark = pytest.mark.slow

REASONS = ("non-finite loss", "non-finite gradient norm", "non-finite eval", "non-finite tensor")
VICTIM = "replay-n2-s2"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, tiny_trunk):
    root, plan = plan_world(tmp_path_factory, tiny_trunk, "nan", rule="smallest REPLAY_N such that drift < 50%")
    run_through(plan, root / "sweeps", "4/4 done")
    return root / "sweeps"


def _tatu(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tatu.ops.cli", *args], env=clean_environ(), capture_output=True,
                          text=True, timeout=600)


@pytest.fixture
def diverged(sweep, request, tmp_path):
    """The victim member's run dir as a divergence at step 3 with `request.param` leaves it; put back after."""
    member = next(m for m in read_lock(sweep / "nan").members_of() if m.name == VICTIM)
    run_dir = member.run_dir
    saved = tmp_path / "saved"
    shutil.copytree(run_dir, saved)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    kept = [e for e in events if e.get("event") not in ("verdict", "abort") and (e.get("step") or 0) <= 2]
    kept.append({"event": "abort", "time": kept[-1]["time"] + 1, "step": 3, "reason": request.param,
                 "code": NONFINITE_LOSS})
    (run_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in kept))
    (run_dir / "verdict.json").unlink()
    shutil.rmtree(run_dir / "final")
    yield run_dir
    shutil.rmtree(run_dir)
    shutil.copytree(saved, run_dir)


@pytest.mark.parametrize("diverged", REASONS, indirect=True)
def test_a_member_that_went_non_finite_is_diverged_and_the_verdict_completes(sweep, diverged):
    reason = json.loads(diverged.joinpath("events.jsonl").read_text().splitlines()[-1])["reason"]
    status = _tatu("sweep", "status", "nan", "--sweeps", str(sweep))
    assert status.returncode == 0, status.stderr
    line = next(line for line in status.stdout.splitlines() if VICTIM in line)
    assert line.split()[1:3] == ["diverged", "diverged"] and reason in line, status.stdout
    assert "4/4 done" in status.stdout and "1 diverged" in status.stdout, status.stdout

    report = _tatu("sweep", "report", "nan", "--sweeps", str(sweep))
    assert report.returncode == 0, report.stderr
    assert "VERDICT (locked rule): " in report.stdout and "PROVISIONAL" not in report.stdout, report.stdout
    assert "+1 diverged" in report.stdout, report.stdout
    data = json.loads((sweep / "nan" / "report" / "report.json").read_text())
    states = {r["member"]: r["state"] for c in data["compare"]["configs"] for r in c["results"]}
    victim = next(name for name in states if name.endswith(VICTIM))
    assert states[victim] == "diverged" and sum(s == "done" for s in states.values()) == 3, states
    assert data["compare"]["complete"] is True and data["verdict"]["complete"] is True


def test_a_report_opens_each_members_events_once(sweep, monkeypatch, tmp_path):
    """`tatu sweep report` reads each member's events.jsonl once (the run's one view), where the
    report's readers (state, evals, answers at the end and at the common step) each parsed it again."""
    import builtins
    from collections import Counter

    from tatu.daemon.run import view
    from tatu.sweep.report.write import write_report

    opened: Counter = Counter()
    real_open = builtins.open

    def counting_open(file, *args, **kwargs):
        if Path(str(file)).name == "events.jsonl":
            opened[Path(file).parent.name] += 1
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(view, "_CACHE", {})  # a fresh process's view: nothing read yet
    monkeypatch.setattr(builtins, "open", counting_open)
    write_report(sweep / "nan", tmp_path / "report")
    members = {m.run for m in read_lock(sweep / "nan").members_of()}
    assert set(opened) == members and set(opened.values()) == {1}, opened
