"""`make trunk`: rebuild the demo's shipped trunk (data/demo/trunk/, ops/shipped_trunk.py) by tatu's own recipe.

    demo sources (scale demo, seed 0) -> BPE tokenizer -> data build -> the daemon, TATU_MODE=pretrain,
    in the foreground, the demo scale's trunk variables (ops/demo.py trunk_env) -> its final checkpoint,
    run.log and env file copied to data/demo/trunk/ -> trunk.json: the command, the CPU, every sha256

The run is the one `make demo` used to train itself before the trunk was shipped: the same code,
the scale's steps. Pinned to TATU_THREADS=1 and fp32, so on the same CPU kind and torch build it
writes the same bytes (a CPU that sums in another order writes other last bits, the same recipe).
Relative paths (run from the repository's root): the env file and the checkpoint's meta say where
it ran without naming this machine's directories.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from tatu.ops import shipped_trunk
from tatu.ops.demo import RUNS, SCALES, check, prepare_data, run_daemon, say, trunk_env
from tatu.ops.cli import main as tatu

COMMAND = "make trunk"
SEED = 0
BUILD = Path("demo") / "trunk-build"  # under the demo's own directory (.gitignore'd)


def build(out: Path, scale_name: str = "demo", threads: int = 1) -> Path:
    """Sources, tokenizer, data and the trunk run under `out`; the run's directory."""
    scale = SCALES[scale_name]
    sources = out / "sources"
    check(tatu(["data", "demo", str(sources), "--scale", scale_name, "--seed", str(SEED)]), "data demo")
    data = prepare_data(sources, out, "bpe", scale.vocab, scale.seq_len)
    common = {"TATU_DATA": str(data), "TATU_OUT": str(out / RUNS), "TATU_DEVICE": "cpu", "TATU_SEED": str(SEED),
              "TATU_MICRO_BATCH": str(scale.micro_batch), "TATU_SEQ_LEN": str(scale.seq_len),
              "TATU_EVAL_RESAMPLES": str(scale.resamples), "TATU_MEM_FLOOR_MB": "0", "TATU_PRECISION": "fp32",
              "TATU_THREADS": str(threads), "TATU_TENSORBOARD": "off"}
    env = trunk_env(scale, common)
    say(f"trunk: pretraining from scratch, {scale.pretrain_steps} steps (cosine), {threads} thread(s)")
    check(run_daemon(env, use_systemd=False), "trunk pretraining")
    if scale.pretrain_tail:
        # the same run resumed with a larger MIX_STEPS_LIMIT: the cosine's curve is kept, the steps past
        # its end train at TATU_MIN_LR (run.log says so), and the EVAL lines show what they still move
        tail = {**env, "MIX_STEPS_LIMIT": str(scale.pretrain_steps + scale.pretrain_tail)}
        say(f"trunk: {scale.pretrain_tail} more steps at TATU_MIN_LR={tail['TATU_MIN_LR']}")
        check(run_daemon(tail, use_systemd=False), "trunk pretraining (its tail)")
    return out / RUNS / env["TATU_RUN"]


def ship(run_dir: Path, trunk: Path, command: str, machine: str, seconds: float) -> shipped_trunk.TrunkManifest:
    """The run's final checkpoint, run.log and env file as the shipped trunk, with its manifest."""
    from tatu.daemon.run.paths import RunDir

    files = RunDir(run_dir)
    if not files.final.is_dir():
        raise SystemExit(f"trunk: {run_dir} has no final checkpoint")
    if trunk.exists():
        shutil.rmtree(trunk)
    trunk.mkdir(parents=True)
    shutil.copytree(files.final, trunk / shipped_trunk.FINAL)
    shutil.copy2(files.log_file, trunk / shipped_trunk.RUN_LOG)
    shutil.copy2(files.env_file, trunk / shipped_trunk.ENV)
    return shipped_trunk.write_manifest(trunk, command, machine, seconds)


def main(argv: list[str] | None = None) -> int:
    from tatu.model.cpu_sums import machine_line

    parser = argparse.ArgumentParser(prog="python -m tatu.ops.trunk", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=BUILD, help="where the sources, data and run are built")
    parser.add_argument("--trunk", type=Path, default=shipped_trunk.SHIPPED, help="where the trunk is shipped")
    parser.add_argument("--scale", choices=sorted(SCALES), default="demo", help="tiny: the tests' seconds-long trunk")
    args = parser.parse_args(argv)
    machine = machine_line()
    say(f"{COMMAND}: the demo's trunk in {args.out}, shipped to {args.trunk}\n{machine}")
    if args.out.exists():
        shutil.rmtree(args.out)  # a rebuild starts from nothing: the run would otherwise resume
    started = time.time()
    run_dir = build(args.out, args.scale)
    command = COMMAND if args.scale == "demo" else f"python -m tatu.ops.trunk --scale {args.scale}"
    manifest = ship(run_dir, args.trunk, command, machine, time.time() - started)
    say(f"shipped {args.trunk}: model.safetensors sha256 {manifest.files['final/model.safetensors']}")
    print(shipped_trunk.flat_end(args.trunk / shipped_trunk.RUN_LOG).line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
