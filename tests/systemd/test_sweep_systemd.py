"""A sweep under a real `systemd --user` (tests/systemd_harness.py): 2 configurations x 2 seeds,
K=2, through a tatu-sweep@ coordinator unit and tatu-sft@ member units. The coordinator is
SIGKILLed mid-way; systemd restarts it, and it finishes without re-running finished members.
Run under the flock (README): `flock /tmp/tatu-systemd.lock .venv/bin/pytest -q tests/systemd/test_sweep_systemd.py`.
CI sets CI_STRICT=1, so this fails there instead of skipping.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import stat
from pathlib import Path

import pytest

from sweep_world import plan_text
from systemd_harness import sweep_units_session

from tatu.daemon.logs import read_events
from tatu.ops.cli import main as tatu
from tatu.sweep.plan.lock import read_lock

pytestmark = [pytest.mark.systemd, pytest.mark.slow]

COORDINATOR = "tatu-sweep@sd.service"
STATUS = re.compile(r"^(\d+)/4 done, (\d+) running")
MEMBERS = ("replay-n0-s1", "replay-n0-s2", "replay-n2-s1", "replay-n2-s2")


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_trunk):
    root = tmp_path_factory.mktemp("sweep-sysd")
    plan = root / "sd.toml"
    plan.write_text(plan_text("sd", tiny_trunk["data"], tiny_trunk["trunk"], steps=6))
    with sweep_units_session(root / "work", "sd", MEMBERS) as (um, installed):
        yield {"um": um, "root": root, "plan": plan, "sweeps": root / "sweeps", "installed": installed}


def _sweep_dir(setup) -> Path:
    return setup["sweeps"] / "sd"


def _member_units(um) -> dict[str, str]:
    out = {}
    for member in MEMBERS:
        out[member] = um.show(f"tatu-sft@sd.{member}.service", "ActiveState")["ActiveState"]
    return out


def _done(setup) -> set[str]:
    """Members whose run has ended: verdict.json is written, and then the verdict event."""
    done = set()
    for m in read_lock(_sweep_dir(setup)).members_of():
        run = Path(m.env["TATU_OUT"]) / m.run
        last = read_events(run / "events.jsonl")[-1:] if (run / "verdict.json").exists() else []
        if last and last[0]["event"] == "verdict":
            done.add(m.name)
    return done


def test_sweep_runs_through_units_survives_a_coordinator_kill_and_finishes(setup, capsys):
    um = setup["um"]
    assert um.unit_dir / "tatu-sweep@.service" in setup["installed"].written
    assert tatu(["sweep", "start", str(setup["plan"]), "-K", "2", "--sweeps", str(setup["sweeps"])]) == 0
    printed = capsys.readouterr().out
    assert "plan locked" in printed and f"started {COORDINATOR} (K=2)" in printed
    shown = um.show(COORDINATOR, "ActiveState", "Type", "MainPID", "NRestarts", "StatusText")
    assert shown["ActiveState"] == "active" and shown["Type"] == "notify", shown
    assert STATUS.match(shown["StatusText"]), shown["StatusText"]

    # Mid-way: a member has a result and another has none yet. Never more than K=2 running.
    most_active = 0

    def midway():
        nonlocal most_active
        most_active = max(most_active, sum(state in ("active", "activating", "deactivating") for state in _member_units(um).values()))
        done = _done(setup)
        return done if 1 <= len(done) < 4 else None

    done_before = um.wait_for(midway, timeout=600, interval=0.5, what="one member finished, others not")
    assert most_active <= 2
    lock = read_lock(_sweep_dir(setup))
    by_name = {m.name: m for m in lock.members_of()}
    env_file = um.config_home / "tatu" / f"sd.{sorted(done_before)[0]}.env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert f"TATU_RUN=sd.{sorted(done_before)[0]}" in env_file.read_text()
    frozen = {name: (Path(by_name[name].env["TATU_OUT"]) / by_name[name].run / "events.jsonl").read_bytes() for name in done_before}

    um.kill_main_and_wait_restart(COORDINATOR)

    # `tatu sweep stop`: the coordinator ends for good (exit 0: not restarted) and so does every
    # member unit (a running one saves its state first); `tatu sweep start` continues from there.
    # A member's steps last about two seconds here: one is frozen (SIGSTOP) mid-run so that the
    # stop finds it running; systemd follows its SIGTERM with a SIGCONT, as for any stopped unit.
    def saved_steps(events_path: Path) -> list[int]:
        return [e["step"] for e in read_events(events_path) if e["event"] == "checkpoint" and e["reason"] == "scheduled"]

    def member_mid_run():
        for name, m in by_name.items():
            events_path = Path(m.env["TATU_OUT"]) / m.run / "events.jsonl"
            if name in _done(setup) or not events_path.is_file():
                continue
            if not saved_steps(events_path):
                continue
            unit = f"tatu-sft@sd.{name}.service"
            pid = int(um.show(unit, "MainPID")["MainPID"])
            if not pid:
                continue
            # The member may end between the manager's answer and the signal (it finished its
            # last step): a pidfd names that one process, never a later one under a reused PID.
            try:
                pidfd = os.pidfd_open(pid)
            except ProcessLookupError:
                continue  # it has exited since: look again
            if int(um.show(unit, "MainPID")["MainPID"]) != pid:
                os.close(pidfd)  # no longer the unit's main process: look again
                continue
            try:
                signal.pidfd_send_signal(pidfd, signal.SIGSTOP)  # frozen, its files cannot change: look again
            except ProcessLookupError:
                os.close(pidfd)
                continue
            steps = saved_steps(events_path)
            if steps and max(steps) <= 4 and not (events_path.parent / "verdict.json").exists():
                return name, pidfd  # of 6 steps: the stop comes before its last one
            signal.pidfd_send_signal(pidfd, signal.SIGCONT)  # stopped, it cannot have exited
            os.close(pidfd)
        return None

    frozen_name, frozen_pidfd = um.wait_for(member_mid_run, timeout=120, interval=0.05, what="a member mid-run")
    try:
        assert tatu(["sweep", "stop", "sd", "--sweeps", str(setup["sweeps"])]) == 0
    finally:
        # The stop's SIGTERM reaches the frozen member through the coordinator's --no-block stop
        # of its unit, and systemd follows it with a SIGCONT: the member saves its state and exits,
        # often before `tatu sweep stop` returns. This SIGCONT is for a stop that went wrong; a
        # member already gone is the stop having worked.
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(frozen_pidfd, signal.SIGCONT)
        os.close(frozen_pidfd)
    assert "stop requested" in capsys.readouterr().out

    def all_stopped():
        states = [um.show(COORDINATOR, "ActiveState")["ActiveState"], *_member_units(um).values()]
        assert "failed" not in states, (states, um.journalctl("-u", COORDINATOR, "-n", "40", "-o", "cat"))
        return all(state == "inactive" for state in states)

    um.wait_for(all_stopped, timeout=120, interval=0.5, what="the coordinator and every member to stop")
    # It ended through its own stop path (KillMode=mixed: the SIGTERM was its alone, not its
    # `systemctl` children's), not by a failed call.
    assert "coordinator stopping" in (_sweep_dir(setup) / "coordinator.log").read_text()
    # A stopped coordinator stays stopped: a restart the manager decides on is the auto-restart
    # state (ActiveState=activating), entered instead of inactive/dead, and a start would be a
    # queued job; neither is there once the stop job has finished. (`coordinator up` is counted
    # at the end: no start happened between this stop and the next `tatu sweep start`.)
    stopped = um.show(COORDINATOR, "ActiveState", "SubState", "Result", "UnitFileState")
    assert stopped == {"ActiveState": "inactive", "SubState": "dead", "Result": "success",
                       "UnitFileState": "disabled"}, stopped
    assert COORDINATOR not in um.systemctl("list-jobs", "--no-legend").stdout
    assert tatu(["sweep", "status", "sd", "--sweeps", str(setup["sweeps"])]) == 0
    assert "stopped: " in capsys.readouterr().out
    frozen_member = by_name[frozen_name]
    frozen_events = read_events(Path(frozen_member.env["TATU_OUT"]) / frozen_member.run / "events.jsonl")
    assert [(e["event"], e.get("reason")) for e in frozen_events][-1] == ("checkpoint", "stop"), frozen_events[-3:]
    assert tatu(["sweep", "start", str(setup["plan"]), "-K", "2", "--sweeps", str(setup["sweeps"])]) == 0
    assert "continuing a stopped sweep" in capsys.readouterr().out

    def finished():
        most = sum(state in ("active", "activating", "deactivating") for state in _member_units(um).values())
        assert most <= 2
        log = (_sweep_dir(setup) / "coordinator.log").read_text()
        return log if "sweep finished: 4/4 done" in log else None

    log = um.wait_for(finished, timeout=900, interval=0.5, what="the sweep to finish")
    um.wait_for(lambda: um.show(COORDINATOR, "ActiveState")["ActiveState"] == "inactive", timeout=60,
                what="the coordinator to exit 0")
    assert _done(setup) == set(by_name)
    # Finished members were not run again: each started once, their events untouched.
    for name in done_before:
        assert log.count(f"started {name}") == 1, log
        assert (Path(by_name[name].env["TATU_OUT"]) / by_name[name].run / "events.jsonl").read_bytes() == frozen[name]
    for name, m in by_name.items():
        verdict = json.loads((Path(m.env["TATU_OUT"]) / m.run / "verdict.json").read_text())
        assert verdict["verdict"] in ("holds", "flat", "inconclusive", "forgets")
        # It ran as its tatu-sft@ unit: the unit's SyslogIdentifier carries its lines to the journal.
        assert "EVAL 6: sftHeld" in um.journalctl("-t", f"tatu-sft-sd.{name}", "-o", "cat"), name
    assert log.count("coordinator up") == 3  # the first, the one systemd restarted, the one after the stop
    # The member stopped mid-run continued from the state it saved, not from step 0.
    resumed = [e for e in read_events(Path(frozen_member.env["TATU_OUT"]) / frozen_member.run / "events.jsonl")
               if e["event"] == "resumed"]
    assert [e["step"] for e in resumed] == [frozen_events[-1]["step"]], resumed

    assert tatu(["sweep", "start", str(setup["plan"]), "-K", "2", "--sweeps", str(setup["sweeps"])]) == 0
    assert "already finished (4/4 done, 0 running); nothing to do" in capsys.readouterr().out
    assert tatu(["sweep", "status", "sd", "--sweeps", str(setup["sweeps"])]) == 0
    status = capsys.readouterr().out
    assert "(systemd, K=2): 4/4 done, 0 running" in status and status.count(" step 6/6") == 4
