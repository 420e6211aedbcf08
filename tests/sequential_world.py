"""Sequential sweeps without training (fast): a locked plan with a `[design]`, a backend whose members
"run" by writing their verdict one poll after their start, and member results whose per-line
enRuler scores are simulated from the configuration's true drift (seed + shared line + seed x line
noise, as tests/sweep/test_config_looks.py's). The coordinator, the schedule, the looks log and the
report's recomputation are tatu's own; only the daemon is replaced.

`python tests/sequential_world.py SWEEP_DIR` runs the coordinator on such a sweep (what the kill -9
test kills and starts again)."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import threading
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from run_records import eval_record, member_result, verdict  # noqa: E402
from sweep_world import plan_text  # noqa: E402

from tatu.sweep.run.backends import UnitState  # noqa: E402
from tatu.sweep.plan.lock import reconcile  # noqa: E402
from tatu.sweep.plan.load import load_plan  # noqa: E402
from tatu.sweep.plan.member import Member  # noqa: E402
from tatu.sweep.judge.records import MemberResult  # noqa: E402

N_LINES = 40
STARTED = "started"  # a file in the member's run dir: the backend started it (what a test waits on)
HOLD = "SEQ_WORLD_HOLD"  # "start:MEMBER" or "finish:MEMBER": the backend blocks there (a kill -9 lands at that point)
HELD = "held"        # a file in the sweep dir: the backend is blocked at the hold point
# each configuration's true drift (relative), by its name or its REPLAY_N value
DRIFTS = {"a": 0.20, "b": -0.05, "c": -0.05, "d": 0.035, "e": -0.05, "0": 0.20, "1": -0.05, "2": 0.20, "4": -0.05}
# the worst drift of a member's evals during training (its eval events), when not its end's
EVAL_SPIKES = {"e": 0.30}


def write_sweep(root: Path, name: str, rule: str, configs: str = "", replay=(0, 2), max_seeds: int = 5,
                seeds=(1, 2, 3, 4, 5), min_seeds: int | None = None) -> Path:
    """Plan and lock; returns the sweep dir (ROOT/sweeps/NAME). min_seeds None: the default (3)."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{name}.toml"
    path.write_text(plan_text(name, Path("data"), Path("runs/trunk/final"), seeds=seeds, replay=replay, rule=rule,
                              configs=configs)
                    + f'\n[design]\nsequential = "obf"\nmax_seeds = {max_seeds}\n'
                    + (f"min_seeds = {min_seeds}\n" if min_seeds is not None else ""))
    sweep_dir = root / "sweeps" / name
    reconcile(load_plan(path), sweep_dir)
    return sweep_dir


def drift_of(member: Member) -> float:
    return DRIFTS[member.values.get("config", member.values.get("REPLAY_N"))]


def simulated_result(member: Member) -> MemberResult:
    """The member's result (what sweep/judge/analysis.member_result gives once it has an end), seeded by its
    configuration and seed: the same member gives the same scores in every process."""
    rng = np.random.default_rng([member.seed, sum(map(ord, member.config_key))])
    line = np.random.default_rng(7).normal(0, 0.002, N_LINES)  # shared lines: the same for every member
    change = math.log1p(drift_of(member)) + rng.normal(0, 0.01) + line + rng.normal(0, 0.01, N_LINES)
    base = np.random.default_rng(8).uniform(2.0, 3.0, N_LINES)
    improve = -0.05 + rng.normal(0, 0.01, N_LINES)  # sftHeld: what the report's tables also read
    lines = lambda nll: {"nll_sum": (nll * 10).tolist(), "line_tokens": [10] * N_LINES, "line_index": list(range(N_LINES))}
    result = member_result(member.config_key, member.seed, {"enRuler": lines(base), "sftHeld": lines(base)},
                           {"enRuler": lines(base + change), "sftHeld": lines(base + improve)}, values=member.values)
    return dataclasses.replace(result, member=member.run)  # a member is named by its folder, as the report names it


def scored(member: Member, *_) -> MemberResult:
    """sweep/judge/analysis.member_result for these members: their simulated result once they ran, pending before."""
    if (member.run_dir / "verdict.json").exists():
        return simulated_result(member)
    return dataclasses.replace(simulated_result(member), state="pending", steps=None, lines={})


class InstantBackend:
    """start() marks the member started; the next poll finishes it (its verdict.json) and says it
    is running; after that its verdict says done. A restarted coordinator finds the same files."""

    name = "instant"

    def __init__(self, sweep_dir: Path):
        self.sweep_dir = Path(sweep_dir)
        self.starts: list[str] = []

    def env_path(self, member: Member) -> Path:
        return self.sweep_dir / "env" / f"{member.run}.env"

    def start(self, member: Member, device) -> None:
        member.run_dir.mkdir(parents=True, exist_ok=True)
        (member.run_dir / STARTED).write_text("1")
        self.starts.append(member.name)
        self._hold("start", member)

    def poll(self, member: Member) -> UnitState:
        if (member.run_dir / STARTED).exists() and not (member.run_dir / "verdict.json").exists():
            drift = EVAL_SPIKES.get(member.values.get("config", ""), drift_of(member))
            event = {"event": "eval", **eval_record(step=2, drift=drift).to_json()}
            (member.run_dir / "events.jsonl").write_text(json.dumps(event) + "\n")
            (member.run_dir / "verdict.json").write_text(json.dumps(verdict("holds").to_json()))
            self._hold("finish", member)
            return UnitState("running")
        return UnitState("absent")

    def stop(self, member: Member) -> None:
        """Nothing to stop: a member here is files written at once in poll(), never a process."""

    def _hold(self, where: str, member: Member) -> None:
        """Block for good at the hold point, once it is announced (the test kills this process)."""
        if os.environ.get(HOLD) == f"{where}:{member.name}":
            (self.sweep_dir / HELD).write_text(f"{where}:{member.name}")
            threading.Event().wait()

    def last_error(self, member: Member) -> str:
        return ""


def coordinator(sweep_dir: Path, k: int = 3, out=None):
    from tatu.sweep.run.coordinator import Coordinator

    return Coordinator(sweep_dir, InstantBackend(sweep_dir), k, out=out, poll_seconds=0.02,
                       results_of=simulated_result)


def ran(sweep_dir: Path) -> list[str]:
    """The members that were started, by their run dirs."""
    return sorted(p.parent.name.split(".", 1)[1] for p in (Path(sweep_dir) / "runs").glob(f"*/{STARTED}"))


if __name__ == "__main__":
    sys.exit(coordinator(Path(sys.argv[1])).run())
