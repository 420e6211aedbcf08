"""A sequential sweep through the systemd backend (a real `systemd --user`, tests/systemd_harness.py):
tests/sweep_world.py's sequential plan (`first config`, one look at 3 seeds, a limit every
configuration meets; as tests/sweep/test_sequential_foreground.py and test_sequential_ray.py) run by a tatu-sweep@ coordinator unit with tatu-sft@ member units. The
coordinator is SIGKILLed once the first member has its verdict; systemd restarts it, and the
restarted one schedules from the looks log: one look, the same three members, `second` never
started, each member started once, and `tatu sweep report` recomputes the look and agrees.
Run under the flock (README): `flock /tmp/tatu-systemd.lock .venv/bin/pytest -q tests/systemd/test_sweep_systemd_sequential.py`.
CI sets CI_STRICT=1, so this fails there instead of skipping.
"""
from __future__ import annotations

import pytest

from sweep_world import sequential_plan_world
from systemd_harness import sweep_units_session

from tatu.ops.cli import main as tatu
from tatu.sweep.judge import looks_log

pytestmark = [pytest.mark.systemd, pytest.mark.slow]

NAME = "seqsd"
COORDINATOR = f"tatu-sweep@{NAME}.service"
MEMBERS = ("first-s1", "first-s2", "first-s3", "second-s1", "second-s2", "second-s3")


def test_a_sequential_sweep_through_units_survives_a_coordinator_kill(tmp_path_factory, tiny_trunk, capsys):
    root, plan = sequential_plan_world(tmp_path_factory, tiny_trunk, NAME)
    sweeps = root / "sweeps"
    sweep_dir = sweeps / NAME
    with sweep_units_session(root / "work", NAME, MEMBERS) as (um, _):
        assert tatu(["sweep", "start", str(plan), "-K", "2", "--sweeps", str(sweeps)]) == 0
        assert f"started {COORDINATOR} (K=2)" in capsys.readouterr().out
        assert um.show(COORDINATOR, "ActiveState")["ActiveState"] == "active"

        first_verdict = sweep_dir / "runs" / f"{NAME}.first-s1" / "verdict.json"
        um.wait_for(first_verdict.exists, timeout=600, interval=0.1, what="the first member's verdict")
        um.kill_main_and_wait_restart(COORDINATOR)

        def finished():
            log = (sweep_dir / "coordinator.log").read_text()
            return log if "sweep finished" in log else None

        log = um.wait_for(finished, timeout=900, interval=0.5, what="the sweep to finish")
        um.wait_for(lambda: um.show(COORDINATOR, "ActiveState")["ActiveState"] == "inactive", timeout=60,
                    what="the coordinator to exit 0")
        assert um.show(COORDINATOR, "Result")["Result"] == "success"
        assert log.count("coordinator up") == 2, log  # the first and the one systemd restarted
        for member in ("first-s1", "first-s2", "first-s3"):
            assert log.count(f"started {member}") == 1, log
            # each ran as its tatu-sft@ unit (its SyslogIdentifier carries its lines to the journal)
            assert "EVAL 4: sftHeld" in um.journalctl("-t", f"tatu-sft-{NAME}.{member}", "-o", "cat"), member
        assert "started second" not in log, log

    looks = looks_log.read(sweep_dir)
    assert [(l.config, l.look.n_seeds, l.look.decision) for l in looks] == [("first", 3, "pass")]
    assert looks[0].members == tuple(f"{NAME}.first-s{seed}" for seed in (1, 2, 3))
    assert sorted(p.name for p in (sweep_dir / "runs").iterdir()) == [f"{NAME}.first-s1", f"{NAME}.first-s2",
                                                                       f"{NAME}.first-s3"]
    assert tatu(["sweep", "report", NAME, "--sweeps", str(sweeps)]) == 0  # recomputes the look; 65 if it disagreed
    printed = capsys.readouterr().out
    assert "VERDICT (locked rule): config=first (first config such that drift_hi < 50%); sequential obf" in printed, printed
    assert "PROVISIONAL" not in printed
