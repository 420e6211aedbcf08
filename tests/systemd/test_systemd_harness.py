"""The harness itself: a real user manager runs a Type=notify unit, shows its STATUS, journald has its output."""
import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from systemd_harness import user_manager  # noqa: F401  (the fixture)

pytestmark = pytest.mark.systemd

# Blocks before READY until the test writes a byte to its gate (a FIFO), so "start returns only
# after READY" is shown by the order of events, not by a time; then a STATUS with an accent
# (folded by our Notifier), a line on stdout, and it waits to be stopped.
NOTIFY_PROGRAM = """
import sys, time
sys.path[:0] = {paths!r}
from tatu.daemon.notify import Notifier
n = Notifier()
print("harness-probe starting", flush=True)
with open({gate!r}, "rb") as gate:
    assert gate.read(1) == b"g"
n.ready()
n.status("passo 3/10 régua ok")
print("harness-probe ready", flush=True)
while True:
    time.sleep(1)
"""


def _open_for_writing(fifo: Path) -> int | None:
    try:
        return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # no reader yet
            return None
        raise


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
    gate = user_manager.runtime_dir.parent / "probe.gate"
    os.mkfifo(gate)
    program = user_manager.runtime_dir.parent / "probe.py"
    program.write_text(NOTIFY_PROGRAM.format(paths=[p for p in sys.path if p], gate=str(gate)))
    user_manager.install_unit("probe.service", unit_text(program))

    start = subprocess.Popen(["systemctl", "--user", "start", "probe.service"], env=user_manager.env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # A FIFO opened for writing without blocking fails (ENXIO) until a reader holds it: the
        # probe runs and waits at its gate, before READY=1.
        writer = user_manager.wait_for(lambda: _open_for_writing(gate), timeout=30, interval=0.05,
                                       what="the probe to open its gate")
        # Type=notify: until READY=1 the unit is still starting and `systemctl start` still waits.
        waiting = user_manager.show("probe.service", "ActiveState", "SubState")
        assert waiting == {"ActiveState": "activating", "SubState": "start"}, waiting
        assert start.poll() is None, start.communicate()
        os.write(writer, b"g")
        os.close(writer)
        assert start.wait(timeout=30) == 0, start.communicate()
    finally:
        if start.poll() is None:
            start.kill()
            start.wait()
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
