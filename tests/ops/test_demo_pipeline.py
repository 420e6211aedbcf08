"""`make demo`, scaled down to seconds, through the same code path (tatu.ops.demo).

The demo's text comes from Debian packages (ops/packages.py installs them as root). Where they
cannot be installed this skips with the reason — except under CI (CI_STRICT=1, set by
.ci/run, runs as root), where it must run.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from strict import cannot_run
from tiny_world import RUN_PREFIXES, clean_environ

from tatu.daemon.logs import read_events


def _packages_ready() -> str | None:
    from tatu.data.demo import DemoPackagesError
    from tatu.ops.packages import ensure_demo_packages

    try:
        ensure_demo_packages()
    except DemoPackagesError as exc:
        return str(exc)
    return None


@pytest.mark.slow
def test_tiny_demo_end_to_end(tmp_path):
    problem = _packages_ready()
    if problem:
        cannot_run(f"demo packages unavailable: {problem}")
    env = clean_environ()
    out = tmp_path / "demo"
    proc = subprocess.run([sys.executable, "-m", "tatu.ops.demo", "--scale", "tiny", "--foreground", "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = out / "runs"
    for name in ("trunk", "sft-noreplay", "sft-replay"):
        assert (runs / name / "events.jsonl").exists()
    # the trunk's reference metrics travelled into both SFT runs: drift_tronco is a number
    for name in ("sft-noreplay", "sft-replay"):
        evals = [e for e in read_events(runs / name / "events.jsonl") if e["event"] == "eval"]
        assert evals[0]["drift"]["value"] == 0.0
        assert evals[-1]["drift_tronco"] is not None
    # same seed checkpoint, same steps; only the mix differs
    steps = {name: [e for e in read_events(runs / name / "events.jsonl") if e["event"] == "step"] for name in ("sft-noreplay", "sft-replay")}
    assert len(steps["sft-noreplay"]) == len(steps["sft-replay"])
    assert all(e["replay_fraction"] == 0.0 for e in steps["sft-noreplay"])
    assert all(e["replay_fraction"] > 0.0 for e in steps["sft-replay"])
    # the closing table: one row per run, drift with its CI, a verdict — equal to the events
    for name in ("sft-noreplay", "sft-replay"):
        events = read_events(runs / name / "events.jsonl")
        last = [e for e in events if e["event"] == "eval"][-1]
        verdict = [e for e in events if e["event"] == "verdict"][-1]["verdict"]
        d = last["drift"]
        row = next(line for line in proc.stdout.splitlines() if line.startswith(name + " "))
        expected = f"{d['value'] * 100:+.1f}% [{d['lo'] * 100:+.1f}%,{d['hi'] * 100:+.1f}%]"
        assert expected in row and row.rstrip().endswith(verdict), (row, expected, verdict)
        # the held-out domain no training source covers: its change, after the table's rows
        held = next(line for line in proc.stdout.splitlines() if line.startswith("held-out ptFaq "))
        c = last["changes"]["ptFaq"]
        assert f"{name} {c['value'] * 100:+.1f}% [{c['lo'] * 100:+.1f}%,{c['hi'] * 100:+.1f}%]" in held
        assert last["sets"]["ptFaq"]["n_lines"] == 12
    assert (out / "report" / "index.html").exists()
    compare = json.loads((out / "compare.json").read_text())
    assert compare  # written by tatu compare
    assert re.search(r"report\s+\S+index\.html", proc.stdout)


@pytest.mark.slow
@pytest.mark.systemd
def test_tiny_demo_runs_through_systemd_when_a_user_manager_answers(tmp_path):
    """The same demo, but the runs go through `systemctl --user start --wait tatu-sft@RUN`
    of a real user manager (tests/systemd_harness.py)."""
    from systemd_harness import user_manager_session

    problem = _packages_ready()
    if problem:
        cannot_run(f"demo packages unavailable: {problem}")
    out = tmp_path / "demo"
    journals: dict[str, str] | None = None
    with user_manager_session() as um:
        env = {k: v for k, v in um.env.items() if not k.startswith(RUN_PREFIXES)}
        proc = subprocess.run([sys.executable, "-m", "tatu.ops.demo", "--scale", "tiny", "--out", str(out)],
                              env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "(systemd --user)" in proc.stdout
        for name in ("trunk", "sft-noreplay", "sft-replay"):
            # `tatu units install` put the template and the run's env file where this manager
            # reads them: the instance loads, and it has ended (the demo waited for it).
            shown = um.show(f"tatu-sft@{name}.service", "LoadState", "ActiveState", "FragmentPath")
            assert shown == {"LoadState": "loaded", "ActiveState": "inactive",
                             "FragmentPath": str(um.unit_dir / "tatu-sft@.service")}, shown
            assert (um.config_home / "tatu" / f"{name}.env").is_file()
            assert (out / "runs" / name / "verdict.json").exists()
        if um.journal_available:
            # journald reads the units' stdout on its own time: wait for the lines, with a deadline.
            journals = {name: um.wait_for(
                lambda name=name: (lambda text: text if re.search(r"EVAL [0-9]+: sftHeld", text) else None)(
                    um.journalctl("-t", f"tatu-sft-{name}", "-o", "cat")),
                timeout=30, what=f"tatu-sft@{name}'s EVAL lines in the journal") for name in ("sft-noreplay", "sft-replay")}
    assert (out / "report" / "index.html").exists()
    if journals is None:  # everything else was checked: only the journal half could not run
        cannot_run("journald is not running and the harness could not start it: the units' journal is not checked")
    for name, journal in journals.items():
        assert "VERDICT " in journal, (name, journal[-2000:])
