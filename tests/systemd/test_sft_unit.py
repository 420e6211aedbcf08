"""The daemon as a `tatu-sft@` unit under a real `systemd --user` with journald
(tests/systemd_harness.py starts and removes both).

One tiny world and one installed run ("tiny") are shared by the tests below, which run in
file order and walk the unit's life: start -> observe -> stop -> start again -> SIGKILL ->
automatic restart -> SIGABRT (the watchdog's signal: the stack dump lands at err priority).
An instance whose env file names another run must fail with 78 without touching that run.
A second instance ("forget") is made to forget and must end failed with status 10, not
restarted. CI sets CI_STRICT=1, so these fail there instead of skipping when the harness
cannot run. Run under the lock:
`flock /tmp/tatu-systemd.lock .venv/bin/pytest -q tests/systemd/test_sft_unit.py`.
"""
from __future__ import annotations

import json
import re
import shutil
import stat
import threading
import time
from pathlib import Path

import pytest

from systemd_harness import address_the_manager, scrub_environment_for_units, user_manager_session
from tiny_world import base_env

from tatu.daemon.control.server import socket_path
from tatu.daemon.logs import read_events
from tatu.ops.doctor import cli as doctor
from tatu.daemon.control.client import request, resolve_socket
from tatu.ops.units import install_units

pytestmark = pytest.mark.systemd

UNIT = "tatu-sft@tiny.service"
FORGET_UNIT = "tatu-sft@forget.service"
IDENTIFIER = "tatu-sft-tiny"  # SyslogIdentifier=tatu-sft-%i
STEPS_LIMIT = 100_000  # never reached: the tests stop the run; steps only have to keep coming
EVAL_EVERY = 10
CKPT_EVERY = 5
EVAL_LINE = re.compile(r"EVAL ([0-9]+): sftHeld")
STATUS_STEP = re.compile(r"^step ([0-9]+)/([0-9]+) ")


def drop_in(exits_log: Path) -> str:
    """Short restarts for the test, and a record of every exit of every instance.

    The record is how the test sees a clean stop: systemd unloads an instance that went
    inactive cleanly, and its ExecMainStatus goes with it. ExecStopPost= gets the exit in
    SERVICE_RESULT / EXIT_CODE / EXIT_STATUS ($$ leaves the expansion to the shell).
    Everything else is the shipped unit.
    """
    record = f'echo "%i $${{SERVICE_RESULT}} $${{EXIT_CODE}} $${{EXIT_STATUS}}" >> {exits_log}'
    return f"[Service]\nRestartSec=1s\nExecStopPost=/bin/sh -c '{record}'\n"


def env_file_text(env: dict[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in env.items())


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_trunk):
    started = time.monotonic()
    root = tmp_path_factory.mktemp("sysd-world")
    with pytest.MonkeyPatch.context() as mp:
        scrub_environment_for_units(mp)
        # The session's tiny world and trunk (tests/conftest.py), trained before the manager exists.
        data, trunk = tiny_trunk["data"], tiny_trunk["trunk"]

        # Absolute paths: the unit's WorkingDirectory is not where the test runs.
        tiny_env = base_env(data.absolute(), (root / "runs").absolute(), TATU_RUN="tiny", TATU_SEED_CKPT=trunk.absolute(),
                            SFT_GE=2, REPLAY_N=1, MIX_STEPS_LIMIT=STEPS_LIMIT, EVAL_EVERY=EVAL_EVERY,
                            TATU_CKPT_EVERY=CKPT_EVERY, TATU_LR="1e-3")
        # test_daemon's planted forgetting: no replay and a high learning rate.
        forget_env = base_env(data.absolute(), (root / "runs").absolute(), TATU_RUN="forget", TATU_SEED_CKPT=trunk.absolute(),
                              SFT_GE=2, REPLAY_N=0, TATU_LR="3e-2", MIX_FORGET_LIMIT="0.02", MIX_STEPS_LIMIT=30,
                              EVAL_EVERY=2, TATU_GRAD_CLIP=0)
        env_files = root / "env"
        env_files.mkdir()
        (env_files / "tiny.env").write_text(env_file_text(tiny_env))
        (env_files / "forget.env").write_text(env_file_text(forget_env))

        with user_manager_session() as um:
            address_the_manager(mp, um)
            workdir = root / "work"
            workdir.mkdir()
            (um.unit_dir / "tatu-sft@.service.d").mkdir(parents=True)
            exits_log = um.runtime_dir.parent / "exits.log"
            (um.unit_dir / "tatu-sft@.service.d" / "test.conf").write_text(drop_in(exits_log))
            installed = install_units(run="tiny", env_file=env_files / "tiny.env", workdir=workdir)
            install_units(run="forget", env_file=env_files / "forget.env", workdir=workdir)
            try:
                yield {"um": um, "root": root, "runs": root / "runs", "installed": installed, "workdir": workdir,
                       "exits_log": exits_log, "started": started}
            finally:
                for unit in (UNIT, FORGET_UNIT):
                    um.systemctl("stop", unit, check=False, timeout=120)
                    um.systemctl("reset-failed", unit, check=False)


@pytest.fixture
def um(setup, monkeypatch):
    """The manager, with this test's environment pointed at it (conftest gives each test its own
    XDG_RUNTIME_DIR; here `tatu status` / `tatu doctor` must find the unit's)."""
    manager = setup["um"]
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(manager.runtime_dir))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(manager.config_home))
    monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS", raising=False)
    return manager


def events(setup, run: str = "tiny") -> list[dict]:
    path = setup["runs"] / run / "events.jsonl"
    return read_events(path) if path.exists() else []


def exits(setup, instance: str) -> list[tuple[str, str, str]]:
    """(SERVICE_RESULT, EXIT_CODE, EXIT_STATUS) of each exit of `instance`, oldest first."""
    path = setup["exits_log"]
    lines = path.read_text().splitlines() if path.exists() else []
    return [tuple(line.split()[1:]) for line in lines if line.split()[0] == instance]


def journal(um, *extra: str) -> str:
    # By SyslogIdentifier: journald derives _SYSTEMD_USER_UNIT (what `journalctl --user -u`
    # matches) from a cgroup under user@UID.service, and the harness's manager lives elsewhere.
    return um.journalctl("-t", IDENTIFIER, *extra)


def wait_for_journal(um, needle: str, timeout: float = 30) -> str:
    return um.wait_for(lambda: (lambda text: text if needle in text else None)(journal(um, "-o", "cat")),
                       timeout=timeout, what=f"{needle!r} in the journal of {IDENTIFIER}")


# --- install ----------------------------------------------------------------------------------

def test_units_install_writes_units_and_env_where_the_manager_reads_them(setup, um):
    installed = setup["installed"]
    assert um.unit_dir / "tatu-sft@.service" in installed.written
    assert um.config_home / "tatu" / "tiny.env" in installed.written and installed.reloaded
    unit_text = (um.unit_dir / "tatu-sft@.service").read_text()
    assert "@TATU_" not in unit_text and f"WorkingDirectory={setup['workdir']}" in unit_text
    env_file = um.config_home / "tatu" / "tiny.env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    shown = um.show(UNIT, "LoadState", "FragmentPath", "DropInPaths", "EnvironmentFiles", "RestartUSec",
                    "RuntimeDirectory", "Type")
    assert shown["LoadState"] == "loaded" and shown["Type"] == "notify"
    assert shown["FragmentPath"] == str(um.unit_dir / "tatu-sft@.service")
    assert str(env_file) in shown["EnvironmentFiles"]
    assert shown["RestartUSec"] == "1s" and "test.conf" in shown["DropInPaths"]
    assert shown["RuntimeDirectory"] == "tatu"


# --- start, status, journal, doctor -----------------------------------------------------------

def watch_status_texts(um, unit: str) -> tuple[list[str], threading.Event]:
    """StatusText of `unit` polled in a thread: each distinct text once, in order."""
    seen: list[str] = []
    done = threading.Event()

    def poll():
        while not done.is_set():
            text = um.show(unit, "StatusText")["StatusText"]
            if text and (not seen or seen[-1] != text):
                seen.append(text)
            time.sleep(0.02)

    threading.Thread(target=poll, daemon=True).start()
    return seen, done


# After READY the steps run on, and every EVAL_EVERY steps an eval shows its progress (it may
# fall inside the time this test watches, until a finished step's text shows).
STARTING_TEXT = re.compile(r"loading|baseline eval [1-3]/3 sets|step 0/\d+ .*first step running"
                           r"|step \d+/\d+ .*tok/s ETA.*|step \d+/\d+ eval [1-3]/3 sets")
PERIODIC_EVAL_TEXT = re.compile(r"step ([0-9]+)/[0-9]+ eval [1-3]/3 sets")


def test_start_returns_once_ready_after_the_baseline_eval(setup, um):
    started = time.monotonic()
    texts, done = watch_status_texts(um, UNIT)
    um.systemctl("start", UNIT)
    setup["start_seconds"] = time.monotonic() - started
    # Watched until a text of the running steps shows (after READY), not for a fixed time.
    um.wait_for(lambda: any(STATUS_STEP.match(t) and "first step running" not in t for t in texts), timeout=60,
                interval=0.05, what="a STATUS text of a finished step")
    done.set()
    # `systemctl --user status` says what the start is busy with (torch loads for seconds
    # under "loading"; each text is polled, so a short one may pass unseen, never out of order).
    assert texts and texts[0] == "loading", texts
    assert all(STARTING_TEXT.fullmatch(t) for t in texts), texts
    order = [0 if t == "loading" else 1 if t.startswith("baseline") else 2 for t in texts]
    assert order == sorted(order), texts
    shown = um.show(UNIT, "ActiveState", "SubState", "MainPID", "NRestarts")
    assert shown["ActiveState"] == "active" and shown["SubState"] == "running", shown
    assert int(shown["MainPID"]) > 0 and shown["NRestarts"] == "0"
    # READY=1 comes after the baseline eval and its saved state: both are already on disk when
    # start returns (a Type=simple unit would return while torch is still loading).
    seen = events(setup)
    assert [e["step"] for e in seen if e["event"] == "eval"][:1] == [0], seen[:5]
    assert any(e["event"] == "checkpoint" and e["reason"] == "baseline" for e in seen)
    um.wait_for(lambda: any(e["event"] == "ready" for e in events(setup)), timeout=10, what="the ready event")


def test_status_text_moves_with_the_steps(setup, um):
    steps_seen: list[int] = []

    def two_steps():
        text = um.show(UNIT, "StatusText")["StatusText"]
        match = STATUS_STEP.match(text)
        if match and "first step running" not in text:
            assert int(match.group(2)) == STEPS_LIMIT, text
            eval_text = PERIODIC_EVAL_TEXT.fullmatch(text)
            assert eval_text or "tok/s ETA" in text, text
            if eval_text:
                assert int(eval_text.group(1)) % EVAL_EVERY == 0, text
            if not steps_seen or int(match.group(1)) != steps_seen[-1]:
                steps_seen.append(int(match.group(1)))
        return len(steps_seen) >= 2

    um.wait_for(two_steps, timeout=60, interval=0.1, what="two different 'step N/M' StatusTexts")
    assert steps_seen[1] > steps_seen[0] >= 1


def test_tatu_status_over_the_units_socket(setup, um, capsys):
    from tatu.ops.cli import main as tatu

    # RuntimeDirectory=tatu under this manager's XDG_RUNTIME_DIR: where the client looks.
    expected = um.runtime_dir / "tatu" / "tiny.sock"
    assert socket_path("tiny", {"XDG_RUNTIME_DIR": str(um.runtime_dir)}) == expected
    assert resolve_socket("tiny") == expected
    assert stat.S_ISSOCK(expected.stat().st_mode) and stat.S_IMODE(expected.stat().st_mode) == 0o600
    assert stat.S_IMODE(expected.parent.stat().st_mode) == 0o700

    # Wait for an eval after the baseline so "the last eval" is a training-time one.
    def status_after_an_eval():
        reply = request(expected, "status")
        return reply if (reply.get("last_eval") or {}).get("step", 0) > 0 else None

    reply = um.wait_for(status_after_an_eval, timeout=90, interval=0.5, what="a status whose last eval is past step 0")
    main_pid = int(um.show(UNIT, "MainPID")["MainPID"])
    assert reply["pid"] == main_pid and reply["run"] == "tiny"
    assert reply["limit"] == STEPS_LIMIT and reply["step"] >= reply["last_eval"]["step"]
    assert reply["last_eval"]["step"] % EVAL_EVERY == 0
    # The eval the daemon reports is the one it recorded.
    recorded = {e["step"]: e for e in events(setup) if e["event"] == "eval"}
    last = recorded[reply["last_eval"]["step"]]
    assert reply["last_eval"]["sets"]["sftHeld"]["ppl"] == last["sets"]["sftHeld"]["ppl"]
    assert reply["oom_score_adj"] == int(Path(f"/proc/{main_pid}/oom_score_adj").read_text())

    assert tatu(["status", "tiny"]) == 0
    printed = capsys.readouterr().out
    assert re.search(rf"step \d+/{STEPS_LIMIT}", printed) and f"pid {main_pid}" in printed
    assert re.search(r"eval    @ step \d+: sftHeld", printed), printed


def test_journal_shows_the_eval_lines_at_info_priority(setup, um):
    if not um.journal_available:
        pytest.fail("journald is not running: the harness could not start it")
    um.wait_for(lambda: len(EVAL_LINE.findall(journal(um, "-o", "cat"))) >= 2, timeout=60,
                what="two EVAL lines in the journal")
    text = journal(um, "-o", "cat")
    eval_lines = [line for line in text.splitlines() if EVAL_LINE.search(line)]
    journal_steps = [int(EVAL_LINE.search(line).group(1)) for line in eval_lines]
    assert journal_steps[0] == 0 and journal_steps == sorted(journal_steps)
    # An EVAL line is logged just before its event is appended: wait for the events to catch up.
    um.wait_for(lambda: set(journal_steps) <= {e["step"] for e in events(setup) if e["event"] == "eval"},
                timeout=10, what="the eval events of the journal's EVAL lines")
    # The contract line as written: journald took the <6> prefix as the priority.
    assert all(line.startswith("EVAL ") for line in eval_lines), eval_lines[:3]
    entries = [json.loads(line) for line in journal(um, "-o", "json").splitlines() if line.strip()]
    eval_entries = [e for e in entries if isinstance(e.get("MESSAGE"), str) and EVAL_LINE.search(e["MESSAGE"])]
    assert eval_entries and all(e["PRIORITY"] == "6" for e in eval_entries)
    # Captured from the unit's stdout, in the unit's cgroup (not printed by someone else).
    assert all(e["_TRANSPORT"] == "stdout" and e["_SYSTEMD_CGROUP"].endswith("/" + UNIT) for e in eval_entries)


def test_doctor_reports_the_effective_oom_score_adj_of_the_live_unit(setup, um):
    show, proc = doctor.gather("tiny", check_gpu=False)
    assert show["Id"] == UNIT and show["ActiveState"] == "active"
    main_pid = int(show["MainPID"])
    effective = int(Path(f"/proc/{main_pid}/oom_score_adj").read_text())
    assert show["OOMScoreAdjust"] == "-600" and proc["oom_score_adj"] == effective
    findings = {f.check: f for f in doctor.diagnose(show, proc)}
    assert set(findings) >= {"oom_score_adj", "ManagedOOMPreference", "MemorySwapMax", "swap", "linger", "gpu"}
    assert "unit" not in findings  # the unit is running: no "live checks use no process" warning
    oom = findings["oom_score_adj"]
    if effective <= -600:  # a manager allowed to lower it
        assert oom.level == "OK" and f"effective {effective}" in oom.why
    else:  # these sandboxes deny it even to root: the silent failure the doctor exists for
        assert oom.level == "FAIL" and f"the process has {effective}" in oom.why and oom.fix
        # the cause named is the one /proc shows for the manager that started the unit
        manager_pid = int(next(line for line in Path(f"/proc/{main_pid}/status").read_text().splitlines()
                               if line.startswith("PPid:")).split()[1])
        status = Path(f"/proc/{manager_pid}/status").read_text().splitlines()
        uid = int(next(line for line in status if line.startswith("Uid:")).split()[2])
        has_cap = bool(int(next(line for line in status if line.startswith("CapEff:")).split()[1], 16) & (1 << 24))
        assert f"its manager (pid {manager_pid}) runs as {'root' if uid == 0 else f'uid {uid}'}" in oom.why
        if uid == 0 and not has_cap:
            assert "without CAP_SYS_RESOURCE" in oom.why and "user manager" not in oom.why
    disk = findings["disk"]
    # WARN only when less is free than the last saved state takes: the test's disk has far more.
    state_dir = setup["runs"] / "tiny" / "state"
    state_bytes = sum(f.stat().st_size for f in state_dir.iterdir()) if state_dir.is_dir() else 0
    assert shutil.disk_usage(setup["runs"]).free > 10 * state_bytes + 2**20, "the test's disk is nearly full"
    assert disk.level == "OK", disk
    assert re.fullmatch(r"[0-9,]+ MB free for " + re.escape(str(setup["runs"] / "tiny")) + r"( \(no saved state yet\)|; the last saved state is .* MB)", disk.why), disk.why


# --- stop, start again ------------------------------------------------------------------------

def test_stop_saves_the_resume_state_and_exits_cleanly(setup, um):
    main_pid = int(um.show(UNIT, "MainPID")["MainPID"])
    um.systemctl("stop", UNIT)
    assert um.show(UNIT, "ActiveState")["ActiveState"] == "inactive"  # not "failed"
    assert exits(setup, "tiny") == [("success", "exited", "0")]  # exited by itself, 0: not killed at the timeout
    assert not Path(f"/proc/{main_pid}").exists()
    saved = [e for e in events(setup) if e["event"] == "checkpoint"]
    assert saved[-1]["reason"] == "stop" and saved[-1]["step"] > 0
    resume = json.loads((setup["runs"] / "tiny" / "state" / "resume.json").read_text())
    assert resume["step"] == saved[-1]["step"]
    setup["stopped_at"] = saved[-1]["step"]


def test_a_new_start_resumes_from_the_stop(setup, um):
    stopped_at = setup["stopped_at"]
    um.systemctl("start", UNIT)
    assert um.show(UNIT, "ActiveState")["ActiveState"] == "active"
    resumed = [e for e in events(setup) if e["event"] == "resumed"]
    assert [e["step"] for e in resumed] == [stopped_at]
    wait_for_journal(um, f"resumed from step {stopped_at}")
    # The baseline is the run's own and never recomputed: still one EVAL 0.
    assert [e["step"] for e in events(setup) if e["event"] == "eval"].count(0) == 1


# --- crash: SIGKILL -> restart -> resume ------------------------------------------------------

def test_sigkill_of_the_main_process_is_restarted_and_resumes(setup, um):
    old_pid = int(um.show(UNIT, "MainPID")["MainPID"])
    resumes_before = len([e for e in events(setup) if e["event"] == "resumed"])
    # Kill after a scheduled save that follows this start, so the resume has somewhere to go.
    floor = setup["stopped_at"] + CKPT_EVERY

    def saved_step():
        steps = [e["step"] for e in events(setup) if e["event"] == "checkpoint" and e["reason"] == "scheduled"]
        return steps[-1] if steps and steps[-1] >= floor else None

    last_saved = um.wait_for(saved_step, timeout=90, interval=0.1, what=f"a scheduled save at step >= {floor}")
    um.kill_main_and_wait_restart(UNIT, timeout=90)
    assert exits(setup, "tiny")[-1] == ("signal", "killed", "KILL")
    assert not Path(f"/proc/{old_pid}").exists()
    resumed = [e for e in events(setup) if e["event"] == "resumed"]
    assert len(resumed) == resumes_before + 1
    # It resumes from what was saved before the kill (a save may have completed just after).
    at = resumed[-1]["step"]
    assert at >= last_saved and at % CKPT_EVERY == 0
    wait_for_journal(um, f"resumed from step {at}")
    assert f"resumed from step {at}" in (setup["runs"] / "tiny" / "run.log").read_text()
    um.systemctl("stop", UNIT)
    assert exits(setup, "tiny")[-1] == ("success", "exited", "0")


# --- crash output at err priority ---------------------------------------------------------------

def journal_entries(um, *extra: str) -> list[dict]:
    return [json.loads(line) for line in journal(um, "-o", "json", *extra).splitlines() if line.strip()]


def test_a_watchdog_abort_dumps_the_stack_at_err_priority(setup, um):
    """The watchdog ends a hung daemon with SIGABRT (WatchdogSignal=): faulthandler's dump of
    every thread must reach `journalctl -p err`, not sit at info with the step lines."""
    um.systemctl("start", UNIT)
    old_pid = int(um.show(UNIT, "MainPID")["MainPID"])
    steps_before = len([e for e in events(setup) if e["event"] == "step"])
    um.wait_for(lambda: len([e for e in events(setup) if e["event"] == "step"]) > steps_before + 2, timeout=60,
                what="steps after the start")
    um.systemctl("kill", "-s", "SIGABRT", "--kill-whom=main", UNIT)

    def dump_in_journal():
        return [e for e in journal_entries(um, "-p", "err")
                if isinstance(e.get("MESSAGE"), str) and "Fatal Python error: Aborted" in e["MESSAGE"]]

    dumped = um.wait_for(dump_in_journal, timeout=30, what="the faulthandler dump at err priority")
    assert all(int(e["PRIORITY"]) <= 3 and e["_TRANSPORT"] == "stdout" for e in dumped)
    stack = [e["MESSAGE"] for e in journal_entries(um, "-p", "err") if isinstance(e.get("MESSAGE"), str)]
    assert any(re.search(r'File ".*\.py", line \d+', m) for m in stack)  # the frames themselves, also at err
    # the step lines stay at info (their <6> prefix wins over SyslogLevel=err)
    assert not any(STATUS_STEP.match(m) or EVAL_LINE.search(m) for m in stack)
    shown = um.wait_for(lambda: (lambda sh: sh if sh["ActiveState"] == "active" and int(sh["MainPID"]) not in (0, old_pid)
                                 else None)(um.show(UNIT, "MainPID", "ActiveState")), timeout=90, interval=0.2,
                        what="the restart after the abort (a crash: restarted)")
    assert exits(setup, "tiny")[-1][2] == "ABRT"
    um.systemctl("stop", UNIT)
    assert shown["ActiveState"] == "active"


def test_the_instance_name_wins_over_an_env_file_tatu_run(setup, um):
    """An operator copied run5's env file for run7 and it still says TATU_RUN=tiny: the unit
    tatu-sft@other must not train the run `tiny`; it exits 78 naming both, and stays failed."""
    unit = "tatu-sft@other.service"
    tiny_env = (um.config_home / "tatu" / "tiny.env").read_text()
    assert "TATU_RUN=tiny" in tiny_env
    (um.config_home / "tatu" / "other.env").write_text(tiny_env)  # as copied by hand, not by units install
    tiny_events = len(events(setup))
    um.systemctl("start", unit, check=False)
    shown = um.wait_for(lambda: (lambda sh: sh if sh["ActiveState"] in ("failed", "inactive") else None)(
        um.show(unit, "ActiveState", "ExecMainStatus", "NRestarts")), timeout=60, interval=0.2, what=f"{unit} to end")
    assert shown["ActiveState"] == "failed" and shown["ExecMainStatus"] == "78" and shown["NRestarts"] == "0", shown
    # journald reads the unit's output on its own time: the failed state can come first.
    refused = um.wait_for(lambda: (lambda text: text if "instance other" in text else None)(
        um.journalctl("-t", "tatu-sft-other", "-p", "err", "-o", "cat")), timeout=30, what="the refusal in the journal")
    assert "TATU_RUN=tiny" in refused and "instance other" in refused, refused
    assert len(events(setup)) == tiny_events  # tiny's run dir was not touched
    assert not (setup["runs"] / "other").exists()
    um.systemctl("reset-failed", unit, check=False)


def test_a_typo_in_the_units_env_file_is_refused_naming_its_line(setup, um):
    """SFTGE=4 (meant SFT_GE) in a unit's EnvironmentFile: systemd hands the daemon SFTGE among its own
    variables, and the unit's TATU_ENV_FILE=%E/tatu/%i.env (expanded by systemd) lets the daemon name
    the file and the line. Exit 78, failed, not restarted, the run dir never made."""
    unit = "tatu-sft@typo.service"
    text = "".join(line + "\n" for line in (um.config_home / "tatu" / "tiny.env").read_text().splitlines()
                   if not line.startswith("TATU_RUN="))
    env_file = um.config_home / "tatu" / "typo.env"
    env_file.write_text(text + "# the seed run's mix\nSFTGE=4\n")
    line = len(text.splitlines()) + 2
    um.systemctl("start", unit, check=False)
    shown = um.wait_for(lambda: (lambda sh: sh if sh["ActiveState"] in ("failed", "inactive") else None)(
        um.show(unit, "ActiveState", "ExecMainStatus", "NRestarts")), timeout=60, interval=0.2, what=f"{unit} to end")
    assert shown["ActiveState"] == "failed" and shown["ExecMainStatus"] == "78" and shown["NRestarts"] == "0", shown
    said = f"{env_file}:{line}: unknown variable SFTGE (did you mean SFT_GE?)"
    refused = um.wait_for(lambda: (lambda text: text if said in text else None)(
        um.journalctl("-t", "tatu-sft-typo", "-p", "err", "-o", "cat")), timeout=30, what="the refusal in the journal")
    assert said in refused
    assert not (setup["runs"] / "typo").exists()
    um.systemctl("reset-failed", unit, check=False)


# --- forgetting: exit 10, failed, never restarted -----------------------------------------------

def test_forget_abort_leaves_the_unit_failed_with_10_and_not_restarted(setup, um):
    um.systemctl("start", FORGET_UNIT)

    def ended():
        shown = um.show(FORGET_UNIT, "ActiveState", "SubState", "Result", "ExecMainStatus", "ExecMainCode", "NRestarts",
                        "Restart", "RestartPreventExitStatus")
        return shown if shown["ActiveState"] in ("failed", "inactive") else None

    # A restart the manager decides on is the auto-restart state (ActiveState=activating), entered
    # instead of failed, and counted in NRestarts; restarts that run into the start limit end
    # failed too, so failed/failed with NRestarts=0 and one recorded exit is what shows the first
    # exit was final. (With 10 taken out of RestartPreventExitStatus this fails: 5 exits, 4 restarts.)
    shown = um.wait_for(ended, timeout=120, interval=0.2, what=f"{FORGET_UNIT} to end")
    assert (shown["ActiveState"], shown["SubState"], shown["Result"]) == ("failed", "failed", "exit-code"), shown
    assert shown["NRestarts"] == "0", shown
    assert shown["ExecMainCode"] == "1" and shown["ExecMainStatus"] == "10"
    assert exits(setup, "forget") == [("exit-code", "exited", "10")]
    aborts = [e for e in events(setup, "forget") if e["event"] == "abort"]
    assert aborts and "MIX_FORGET_LIMIT" in aborts[-1]["reason"]
    # Why: the unit restarts on failure (the SIGKILL test saw it), except for the exit statuses
    # it lists, and 10 (the forget abort, README's table: not restarted) is one of them.
    assert shown["Restart"] == "on-failure" and "10" in shown["RestartPreventExitStatus"].split(), shown
    assert FORGET_UNIT not in um.systemctl("list-jobs", "--no-legend").stdout  # no start queued either
    assert len(exits(setup, "forget")) == 1
    print(f"tatu-sft@ under systemd: first start took {setup.get('start_seconds', float('nan')):.1f}s; "
          f"the module so far (world, trunk, manager, all tests) {time.monotonic() - setup['started']:.1f}s")
