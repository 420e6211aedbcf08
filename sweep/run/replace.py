"""`tatu sweep start PLAN --replace`: a locked sweep none of whose members trained a step (each
ended before its first step, or none started) gives its name to the plan now given. What it
discards is said first: the lock, and the sweep directory's env files, logs and members' run
directories, none of which holds a step. A sweep with any member past step 0 is refused (78):
its results are the pre-registration's, and a new plan takes a new name."""
from __future__ import annotations

import shutil
from pathlib import Path

from tatu.daemon.run.paths import RunDir
from tatu.exitcodes import BAD_CONFIG
from tatu.sweep.errors import SweepError
from tatu.sweep.plan.lock import lock_path, read_lock


def trained_members(sweep_dir: Path) -> list[str]:
    """The locked members whose run directory holds a training step."""
    return [m.member.name for m in read_lock(sweep_dir).members if RunDir(m.member.run_dir).events("step")]


def discard_unstarted(sweep_dir: Path) -> str:
    """Remove a locked sweep whose members trained nothing; what was removed, in words. SweepError(78)
    naming the members that trained, where any did."""
    sweep_dir = Path(sweep_dir)
    if not lock_path(sweep_dir).exists():
        return ""
    trained = trained_members(sweep_dir)
    if trained:
        raise SweepError(BAD_CONFIG, f"--replace: sweep {sweep_dir.name} has members that trained "
                                     f"({', '.join(trained)}): its lock stays; a new plan takes a new name")
    members = len(read_lock(sweep_dir).members)
    shutil.rmtree(sweep_dir)
    return (f"--replace: discarded the lock of sweep {sweep_dir.name} ({lock_path(sweep_dir)}) and {sweep_dir}: "
            f"{members} members, none of which trained a step")
