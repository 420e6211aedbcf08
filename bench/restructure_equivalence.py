"""Does the restructure (sweep/ as a package, ops/ as the command line, one home per fact) leave
a sweep's report numbers as they were? Old code against this checkout, on identical inputs.

The code before the restructure (--before, default 3b18263, the parent of f13088e) and the
restructure alone (--restructured, default 90905b8: the house-code branch's last commit before
it merged main's new features) are checked out from this repository's history into detached
worktrees under --work, each with a venv of its own that borrows this interpreter's packages
(torch, ...) and installs only that tatu, editable. Then:

1. one tiny world (tests/tiny_world.py of the --before code: synthetic sources, a char
   tokenizer, a 24-step trunk) is built once, by the --before code;
2. each code runs the same small sweep plan on it (2 REPLAY_N x 3 seeds, 4 steps, foreground
   backend, K=2) and renders its report: "run" rows, daemons and report of that code;
3. each newer code renders the report again from the --before sweep's own member run dirs
   (the sweep dir copied without its scores cache, so it re-scores): "render" rows, the
   analysis alone, on bytes the old daemon wrote.

The plan text is the same for every code except that this checkout's copy sets
TATU_PRECISION = "fp32": before that variable existed every CPU run was fp32, and its default
(auto) is bf16 on a CPU with AMX. Every number of report.json is compared, and the final
weights of every member (sha256 from its final/manifest.json); a number is "same" when it is
equal to the last bit. Prints one line a number that differs, then the counts.

    .venv/bin/python bench/restructure_equivalence.py [--work /tmp/tatu-equiv] [--before REV] [--restructured REV]

A second call with the same --work compares again without running the sweeps again. Exit 0 unless a step fails; what differs is printed, not judged (docs/sweeps.md says which
differences are intended and by which commits).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAME = "equiv"
PLAN = """
name = "{name}"
question = "Does replay hold the ruler while sftHeld improves?"
seeds = [1, 2, 3]

[base]
vars = {{ TATU_DATA = "{data}", TATU_SEED_CKPT = "{trunk}", TATU_DEVICE = "cpu",{precision} TATU_MICRO_BATCH = 2, TATU_SEQ_LEN = 192, TATU_EVAL_RESAMPLES = 200, TATU_MEM_FLOOR_MB = 0, TATU_GEN_PROMPTS = 2, TATU_GEN_TOKENS = 4, SFT_GE = 2, MIX_STEPS_LIMIT = 4, EVAL_EVERY = 2, TATU_CKPT_EVERY = 2, TATU_LR = 3e-3 }}

[axes]
REPLAY_N = [0, 2]

[decision]
rule = "smallest REPLAY_N such that drift_hi < MIX_FORGET_LIMIT and sftHeld_change_hi < 0"
"""
WORLD = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from tiny_world import base_env, build_world
from tatu.daemon.main import main
root = Path(sys.argv[2])
data = build_world(root)
env = base_env(data, root / "runs", TATU_RUN="trunk", TATU_MODE="pretrain", SFT_GE=2, MIX_STEPS_LIMIT=24,
               EVAL_EVERY=12, TATU_LR="3e-3", TATU_GEN_PROMPTS=0)
assert main(env) == 0
"""


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(map(str, cmd))}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def code_at(rev: str, work: Path) -> Path:
    """A detached worktree of `rev` with a venv of its own: that tatu, editable; every other
    package from this interpreter's site-packages (a plain path line: its .pth files, among
    them this checkout's editable tatu, are not read)."""
    tree = work / f"code-{rev}"
    python = tree / ".venv" / "bin" / "python"
    if python.exists():
        return python
    if not tree.exists():
        sh(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev])
    sh([sys.executable, "-m", "venv", "--without-pip", str(tree / ".venv")])
    purelib = sh([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    Path(purelib, "zz-borrowed.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    sh([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", str(tree)])
    return python


def clean_env(runtime: Path) -> dict[str, str]:
    runtime.mkdir(mode=0o700, parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SFT_", "REPLAY_", "MIX_", "EVAL_", "TATU_", "PYTHON"))}
    env.update(XDG_RUNTIME_DIR=str(runtime))
    for key in ("RUNTIME_DIRECTORY", "NOTIFY_SOCKET", "JOURNAL_STREAM", "VIRTUAL_ENV"):
        env.pop(key, None)
    return env


def run_sweep(python: Path, label: str, work: Path, data: Path, trunk: Path, precision: bool) -> Path:
    sweeps = work / f"sweeps-{label}"
    if (sweeps / NAME / "report" / "report.json").exists():  # a rerun of the comparison: the members ran already
        return sweeps / NAME
    plan = work / f"plan-{label}.toml"
    plan.write_text(PLAN.format(name=NAME, data=data, trunk=trunk, precision=' TATU_PRECISION = "fp32",' if precision else ""))
    env = clean_env(work / f"rt-{label}")
    started = time.monotonic()
    sh([str(python), "-m", "tatu.ops.cli", "sweep", "start", str(plan), "--foreground", "-K", "2", "--poll", "0.5",
        "--sweeps", str(sweeps)], env=env, cwd=work, timeout=3600)
    print(f"  {label}: sweep ran in {time.monotonic() - started:.0f}s", flush=True)
    report(python, sweeps, env, work)
    return sweeps / NAME


def report(python: Path, sweeps: Path, env: dict[str, str], work: Path) -> None:
    """The report, its closing text kept beside the sweeps dir (sweeps-LABEL.txt) to be read side by side."""
    proc = sh([str(python), "-m", "tatu.ops.cli", "sweep", "report", NAME, "--sweeps", str(sweeps)], env=env, cwd=work,
              timeout=1800)
    sweeps.with_suffix(".txt").write_text(proc.stdout)


def render_from(python: Path, label: str, work: Path, source: Path) -> Path:
    """The report of `python`'s code over the members `source` (a sweep dir) ran."""
    target = work / f"render-{label}" / NAME
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("scores", "report"))
    report(python, target.parent, clean_env(work / f"rt-render-{label}"), work)
    return target


def flatten(value, path: str = "") -> dict[str, object]:
    """Every leaf of report.json by its path; configurations and members by name, not position."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            out.update(flatten(item, f"{path}.{key}" if path else str(key)))
        return out
    if isinstance(value, list) and value and all(isinstance(v, dict) and ("key" in v or "member" in v) for v in value):
        out = {}
        for item in value:
            out.update(flatten(item, f"{path}[{item.get('key', item.get('member'))}]"))
        return out
    if isinstance(value, list):
        out = {}
        for i, item in enumerate(value):
            out.update(flatten(item, f"{path}[{i}]"))
        return out
    return {path: value}


def numbers(sweep_dir: Path) -> dict[str, object]:
    found = flatten(json.loads((sweep_dir / "report" / "report.json").read_text()))
    # a config's effective settings hold this sweep's own paths; the weights are compared below
    found = {k: v for k, v in found.items() if ".effective." not in k}
    lock = json.loads((sweep_dir / "plan.lock.json").read_text())
    for member in lock["members"]:
        final = Path(member["env"]["TATU_OUT"]) / member["run"] / "final" / "manifest.json"
        found[f"weights[{member['name']}]"] = json.loads(final.read_text())["files"]["model.safetensors"]
    return found


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def compare(label: str, before: dict, after: dict) -> None:
    shared = sorted(set(before) & set(after))
    differ = [k for k in shared if not same(before[k], after[k])]
    print(f"\n{label}: {len(shared) - len(differ)} of {len(shared)} shared numbers the same; "
          f"{len(differ)} differ; {len(set(before) - set(after))} only before, {len(set(after) - set(before))} only after")
    for key in differ:
        print(f"  differs  {key}: {before[key]!r} -> {after[key]!r}")
    for key in sorted(set(before) - set(after)):
        print(f"  gone     {key}: {before[key]!r}")
    fields = sorted({re.sub(r"\[[^]]*\]", "[]", k) for k in set(after) - set(before)})
    for field in fields:
        print(f"  new      {field}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/tatu-equiv"))
    parser.add_argument("--before", default="3b18263")
    parser.add_argument("--restructured", default="90905b8", help="'' to skip")
    args = parser.parse_args()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    codes = {"before": code_at(args.before, work)}
    if args.restructured:
        codes["restructured"] = code_at(args.restructured, work)
    codes["this checkout"] = Path(sys.executable)
    world = work / "world"
    if not (world / "runs" / "trunk" / "final").exists():
        tests = work / f"code-{args.before}" / "tests"
        sh([str(codes["before"]), "-c", WORLD, str(tests), str(world)], env=clean_env(work / "rt-world"), cwd=work,
           timeout=1800)
    data, trunk = world / "data", world / "runs" / "trunk" / "final"
    print(f"world: {world} (built by {args.before})", flush=True)
    ran = {label: run_sweep(python, label.replace(" ", "-"), work, data, trunk, precision=label == "this checkout")
           for label, python in codes.items()}
    before = numbers(ran["before"])
    for label, python in codes.items():
        if label == "before":
            continue
        compare(f"run ({args.before} -> {label}: its daemons and its report)", before, numbers(ran[label]))
        rendered = render_from(python, label.replace(" ", "-"), work, ran["before"])
        compare(f"render ({args.before} -> {label}: its report over the {args.before} members)", before, numbers(rendered))
    return 0


if __name__ == "__main__":
    sys.exit(main())
