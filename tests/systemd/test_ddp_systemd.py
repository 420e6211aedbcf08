"""The DDP unit for real: tatu-sft-ddp@ under a real `systemd --user` (tests/systemd_harness.py),
two gloo ranks on this CPU. One life in file order: start (READY from rank 0, not the launcher)
-> status over the socket, an eval asked for over it -> systemctl stop (every rank saves at one
step and exits 0, the unit ends clean) -> start again (resumes from that step) -> `stop` over the
socket. CI_STRICT=1 fails instead of skipping.

Run under the lock: flock /tmp/tatu-systemd.lock .venv/bin/pytest -q tests/systemd/test_ddp_systemd.py
"""
from __future__ import annotations

import json

import psutil
import pytest

from systemd_harness import address_the_manager, scrub_environment_for_units, user_manager_session
from tiny_world import base_env

from tatu.daemon.logs import read_events
from tatu.daemon.control.client import request, resolve_socket
from tatu.ops.units import install_units

pytestmark = [pytest.mark.systemd, pytest.mark.slow]

UNIT = "tatu-sft-ddp@ddp.service"
STEPS_LIMIT = 100_000  # never reached: the test stops the run
EVAL_EVERY = 100_000  # so every eval after the baseline is one asked for over the socket


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_trunk):
    root = tmp_path_factory.mktemp("ddp-sysd")
    with pytest.MonkeyPatch.context() as mp:
        scrub_environment_for_units(mp)
        env = base_env(tiny_trunk["data"], (root / "runs").absolute(), TATU_RUN="ddp",
                       TATU_SEED_CKPT=tiny_trunk["trunk"], SFT_GE=2, REPLAY_N=1,
                       MIX_STEPS_LIMIT=STEPS_LIMIT, EVAL_EVERY=EVAL_EVERY, TATU_CKPT_EVERY=5, TATU_LR="1e-3")
        env["PET_NPROC_PER_NODE"] = "2"  # torchrun's own variable, read by the launcher in the unit
        env_file = root / "ddp.env"
        env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
        with user_manager_session() as um:
            address_the_manager(mp, um)
            workdir = root / "work"
            workdir.mkdir()
            drop_in = um.unit_dir / "tatu-sft-ddp@.service.d"
            drop_in.mkdir(parents=True)
            exits_log = um.runtime_dir.parent / "exits.log"
            record = f'echo "%i $${{SERVICE_RESULT}} $${{EXIT_CODE}} $${{EXIT_STATUS}}" >> {exits_log}'
            (drop_in / "test.conf").write_text(f"[Service]\nRestartSec=1s\nExecStopPost=/bin/sh -c '{record}'\n")
            install_units(run="ddp", env_file=env_file, workdir=workdir)
            try:
                yield {"um": um, "run": root / "runs" / "ddp", "exits_log": exits_log}
            finally:
                um.systemctl("stop", UNIT, check=False, timeout=180)
                um.systemctl("reset-failed", UNIT, check=False)


def events(setup) -> list[dict]:
    path = setup["run"] / "events.jsonl"
    return read_events(path) if path.exists() else []


def exits(setup) -> list[list[str]]:
    path = setup["exits_log"]
    return [line.split()[1:] for line in path.read_text().splitlines()] if path.exists() else []


def test_start_is_ready_from_rank0_and_status_answers_over_the_socket(setup):
    um = setup["um"]
    um.systemctl("start", UNIT)  # Type=notify: returns on READY=1, which only rank 0 sends
    shown = um.show(UNIT, "ActiveState", "SubState", "MainPID", "NotifyAccess")
    assert shown["ActiveState"] == "active" and shown["SubState"] == "running", shown
    assert shown["NotifyAccess"] == "all"
    launcher = psutil.Process(int(shown["MainPID"]))
    assert "tatu.daemon.launch" in " ".join(launcher.cmdline())
    ranks = {int(p.environ()["RANK"]): p.pid for p in launcher.children()}
    assert sorted(ranks) == [0, 1]
    # READY=1 goes to systemd just before the `ready` event is appended: wait for the event.
    um.wait_for(lambda: "ready" in [e["event"] for e in events(setup)], timeout=10, what="the ready event")
    assert [e["event"] for e in events(setup)].count("ready") == 1

    def status_after_steps():
        reply = request(resolve_socket("ddp"), "status")
        return reply if reply.get("step", 0) >= 3 else None

    reply = um.wait_for(status_after_steps, timeout=90, interval=0.5, what="status at step >= 3")
    assert reply["ok"] and reply["run"] == "ddp" and reply["pid"] == ranks[0]  # rank 0 serves the socket
    assert reply["limit"] == STEPS_LIMIT
    status_text = um.show(UNIT, "StatusText")["StatusText"]
    assert status_text.startswith("step ") and f"/{STEPS_LIMIT} " in status_text  # STATUS= from rank 0
    setup["ranks"] = ranks

    # An eval asked for over rank 0's socket: every rank must join it at the same boundary
    # (the scoring is shared), or the run would hang and the watchdog restart it.
    assert request(resolve_socket("ddp"), "eval")["ok"]
    evals = um.wait_for(lambda: [e for e in events(setup) if e["event"] == "eval" and e["step"] > 0], timeout=90,
                        what="the requested eval")
    assert len(evals) == 1
    step = evals[0]["step"]
    um.wait_for(lambda: any(e["event"] == "step" and e["step"] > step + 2 for e in events(setup)), timeout=90,
                what="steps after the requested eval")
    assert um.show(UNIT, "ActiveState")["ActiveState"] == "active"


def test_stop_saves_every_rank_at_one_step_and_exits_0(setup):
    um = setup["um"]
    um.wait_for(lambda: any(e["event"] == "checkpoint" and e["step"] >= 5 for e in events(setup)), timeout=90,
                what="a scheduled save")
    um.systemctl("stop", UNIT, timeout=180)
    assert exits(setup)[-1] == ["success", "exited", "0"], exits(setup)
    for pid in setup["ranks"].values():
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    last = events(setup)[-1]
    assert last["event"] == "checkpoint" and last["reason"] == "stop"
    saved = json.loads((setup["run"] / "state" / "resume.json").read_text())
    assert saved["step"] == last["step"] and saved["ranks"]["world_size"] == 2
    assert saved["ranks"]["states"][0]["stream"] == saved["stream"]
    setup["stopped_at"] = saved["step"]


def test_start_again_resumes_from_the_stop(setup):
    um = setup["um"]
    um.systemctl("start", UNIT)
    resumed = [e for e in events(setup) if e["event"] == "resumed"]
    assert resumed and resumed[-1]["step"] == setup["stopped_at"]
    before = setup["stopped_at"]
    um.wait_for(lambda: any(e["event"] == "step" and e["step"] > before + 2 for e in events(setup)), timeout=90,
                what="steps after the resume")
    assert request(resolve_socket("ddp"), "stop")["ok"]  # rank 0's socket; agreed by every rank
    um.wait_for(lambda: um.show(UNIT, "ActiveState")["ActiveState"] in ("inactive", "failed"), timeout=120,
                what="the unit to stop")
    assert exits(setup)[-1] == ["success", "exited", "0"], exits(setup)
    assert um.show(UNIT, "NRestarts")["NRestarts"] == "0"
    last = events(setup)[-1]
    assert last["event"] == "checkpoint" and last["reason"] == "stop" and last["step"] > before
