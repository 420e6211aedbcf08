"""The harness itself: a real user manager runs a Type=notify unit, shows its STATUS, journald has its output."""
import os
import sys
import time
from pathlib import Path

import pytest

from systemd_harness import user_manager  # noqa: F401  (the fixture)

pytestmark = pytest.mark.systemd

# Sleeps before READY so that "start returned after READY" is observable; then a STATUS
# with an accent (folded by our Notifier), a line on stdout, and it waits to be stopped.
NOTIFY_PROGRAM = """
import sys, time
sys.path[:0] = {paths!r}
from tatu.daemon.notify import Notifier
n = Notifier()
print("harness-probe starting", flush=True)
time.sleep(1.5)
n.ready()
n.status("passo 3/10 régua ok")
print("harness-probe ready", flush=True)
while True:
    time.sleep(1)
"""


def unit_text(program_path: Path) -> str:
    return f"""[Unit]
Description=harness probe

[Service]
Type=notify
NotifyAccess=main
ExecStart={sys.executable} {program_path}
SyslogIdentifier=tatu-harness-probe
TimeoutStartSec=30
"""


def test_notify_unit_start_waits_for_ready_and_status_and_journal_show(user_manager, tmp_path):
    program = user_manager.runtime_dir.parent / "probe.py"
    program.write_text(NOTIFY_PROGRAM.format(paths=[p for p in sys.path if p]))
    user_manager.install_unit("probe.service", unit_text(program))

    started = time.monotonic()
    user_manager.systemctl("start", "probe.service")
    # Type=notify: start blocks until READY=1, which the probe sends after 1.5 s.
    assert time.monotonic() - started >= 1.4
    shown = user_manager.show("probe.service", "ActiveState", "SubState", "StatusText", "MainPID")
    assert shown["ActiveState"] == "active" and shown["SubState"] == "running"
    assert shown["StatusText"] == "passo 3/10 regua ok"
    main_pid = int(shown["MainPID"])
    assert main_pid > 0 and Path(f"/proc/{main_pid}").exists()

    if not user_manager.journal_available:
        pytest.fail("journald did not come up: the harness could not start it")
    output = user_manager.wait_for(
        lambda: (lambda text: text if "harness-probe ready" in text else None)(
            user_manager.journalctl("-t", "tatu-harness-probe", "-o", "cat")),
        timeout=15, what="the probe's stdout in the journal")
    assert "harness-probe starting" in output

    user_manager.systemctl("stop", "probe.service")
    assert user_manager.show("probe.service", "ActiveState")["ActiveState"] == "inactive"
    assert not Path(f"/proc/{main_pid}").exists()


def test_cleanup_leaves_no_cgroup_marker_or_manager_behind(tmp_path):
    from systemd_harness import SYSTEMD_MARKER, user_manager_session

    marker_before = SYSTEMD_MARKER.exists()
    cgroups_before = Path("/proc/self/cgroup").read_text()
    with user_manager_session(start_journald=False) as manager:
        manager_pid = manager.process.pid
        assert "tatu-test-" in Path("/proc/self/cgroup").read_text()
        assert SYSTEMD_MARKER.exists()
    assert Path("/proc/self/cgroup").read_text() == cgroups_before
    assert SYSTEMD_MARKER.exists() == marker_before
    assert not Path(f"/proc/{manager_pid}").exists() or \
        Path(f"/proc/{manager_pid}/stat").read_text().split()[2] == "Z"
    assert not any(p.name.startswith(f"tatu-test-{os.getpid()}")
                   for mount in Path("/sys/fs/cgroup").iterdir() if mount.is_dir()
                   for p in mount.rglob(f"tatu-test-{os.getpid()}"))
