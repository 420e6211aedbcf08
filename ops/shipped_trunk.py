"""The demo's shipped trunk: a seed checkpoint `make trunk` built by tatu's own recipe (ops/trunk.py),
committed under data/demo/trunk/ with the run.log of the run that trained it and a manifest.

    data/demo/trunk/final/      the daemon's final checkpoint as it wrote it (weights only: model,
                                config, tokenizer, meta, its own manifest.json)
    data/demo/trunk/run.log     the trunk run's log: its EVAL lines say it is finished (flat_end)
    data/demo/trunk/trunk.env   the run variables it trained with
    data/demo/trunk/trunk.json  the command, the CPU, the wall time and every file's sha256 (TrunkManifest)

`make demo` verifies every byte against trunk.json before it copies the trunk into its runs/trunk/,
where an operator's own seed would be: the sweep's members load it as TATU_SEED_CKPT, which checks
the checkpoint's own manifest again. Torch-free: the demo reads this before torch loads.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from tatu.daemon.run.paths import FINAL, RUN_LOG

# data/demo/trunk/, beside the demo's source code (package data of tatu.data.demo)
SHIPPED = Path(__file__).resolve().parent.parent / "data" / "demo" / "trunk"
MANIFEST = "trunk.json"
ENV = "trunk.env"
# The trunk is finished when each set's perplexity moves by less than this over its last quarter of steps.
FLAT_LIMIT = 0.02
FLAT_SETS = ("ptVal", "enRuler")


class ShippedTrunkError(RuntimeError):
    """The shipped trunk is missing or a byte of it differs from its manifest (exit 65)."""


@dataclass(frozen=True)
class TrunkManifest:
    command: str  # what rebuilds it
    machine: str  # model.cpu_sums.machine_line() of the machine that built it
    seconds: float  # the trunk run's wall time there
    files: dict[str, str]  # path relative to the trunk dir -> sha256

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True) + "\n"

    @classmethod
    def read(cls, trunk: Path) -> "TrunkManifest":
        path = trunk / MANIFEST
        if not path.is_file():
            raise ShippedTrunkError(f"{path}: no such file (`make trunk` writes the shipped trunk)")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls(command=data["command"], machine=data["machine"], seconds=float(data["seconds"]),
                       files=dict(data["files"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise ShippedTrunkError(f"{path}: not a trunk manifest ({exc})") from None


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def verify(trunk: Path = SHIPPED) -> TrunkManifest:
    """The manifest, after every file it lists matched its sha256 and no file was left out of it."""
    manifest = TrunkManifest.read(trunk)
    found = {p.relative_to(trunk).as_posix() for p in trunk.rglob("*") if p.is_file()} - {MANIFEST}
    missing = sorted(set(manifest.files) - found)
    if missing:
        raise ShippedTrunkError(f"{trunk / missing[0]}: listed in {MANIFEST} but missing")
    extra = sorted(found - set(manifest.files))
    if extra:
        raise ShippedTrunkError(f"{trunk / extra[0]}: not listed in {trunk / MANIFEST}")
    for name, digest in sorted(manifest.files.items()):
        actual = sha256_file(trunk / name)
        if actual != digest:
            raise ShippedTrunkError(f"{trunk / name}: sha256 {actual[:12]}.. is not {digest[:12]}.. ({trunk / MANIFEST})")
    return manifest


def write_manifest(trunk: Path, command: str, machine: str, seconds: float) -> TrunkManifest:
    files = {p.relative_to(trunk).as_posix(): sha256_file(p) for p in sorted(trunk.rglob("*"))
             if p.is_file() and p.relative_to(trunk).as_posix() != MANIFEST}
    manifest = TrunkManifest(command=command, machine=machine, seconds=round(seconds, 1), files=files)
    (trunk / MANIFEST).write_text(manifest.to_json(), encoding="utf-8")
    return manifest


def install(trunk: Path, run_dir: Path) -> Path:
    """The verified shipped trunk copied to run_dir (final/, run.log, trunk.env, trunk.json), as a run
    the demo trained would lie; its final checkpoint's path. An older copy there is replaced."""
    verify(trunk)
    if run_dir.exists():
        shutil.rmtree(run_dir)
    shutil.copytree(trunk, run_dir)
    return run_dir / FINAL


# --- finished: the EVAL lines of its run.log ----------------------------------------------------

_EVAL = re.compile(r"\bEVAL (\d+): (.*)$")


def eval_perplexities(run_log: Path, names: tuple[str, ...] = FLAT_SETS) -> dict[int, dict[str, float]]:
    """step -> {set: perplexity} from a run.log's EVAL lines (daemon/judge.py's eval_line)."""
    out: dict[int, dict[str, float]] = {}
    for line in run_log.read_text(encoding="utf-8").splitlines():
        match = _EVAL.search(line)
        if not match:
            continue
        values = {}
        for name in names:
            found = re.search(rf"\b{name} ([0-9.]+)\b", match.group(2))
            if found:
                values[name] = float(found.group(1))
        out[int(match.group(1))] = values
    return out


@dataclass(frozen=True)
class FlatEnd:
    """How much each set's perplexity moved over the trunk's last quarter of steps."""

    start: int  # the last EVAL step at or before 3/4 of the steps
    end: int  # the last EVAL step
    changes: dict[str, float]  # set -> relative change, end vs start

    @property
    def flat(self) -> bool:
        return all(abs(c) < FLAT_LIMIT for c in self.changes.values())

    def line(self) -> str:
        from tatu.formats import fmt_pct

        moved = ", ".join(f"{name} {fmt_pct(c)}" for name, c in self.changes.items())
        verdict = "finished" if self.flat else "NOT finished"
        return (f"trunk {verdict}: over its last quarter of steps ({self.start} -> {self.end}, its run.log's EVAL lines) "
                f"{moved} (finished: each under {FLAT_LIMIT * 100:.0f}%)")


def flat_end(run_log: Path) -> FlatEnd:
    evals = eval_perplexities(run_log)
    if not evals:
        raise ShippedTrunkError(f"{run_log}: no EVAL line")
    end = max(evals)
    start = max(step for step in evals if step <= end * 3 // 4)
    changes = {name: evals[end][name] / evals[start][name] - 1 for name in FLAT_SETS
               if name in evals[end] and name in evals[start]}
    return FlatEnd(start, end, changes)


__all__ = ["ENV", "FINAL", "FLAT_LIMIT", "MANIFEST", "RUN_LOG", "SHIPPED", "FlatEnd", "ShippedTrunkError",
           "TrunkManifest", "flat_end", "install", "verify", "write_manifest"]
