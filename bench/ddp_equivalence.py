"""How far does a run on 2 ranks end from the same run on 1 process, as the steps and the
micro-batches per rank grow? The daemon itself, torchrun + DDP (gloo) on CPU, on the tests'
tiny world (tests/tiny_world.py: synthetic text, a char tokenizer, a 1-layer 32-wide trunk
trained here for 24 steps).

Each row is one SFT configuration run twice from that trunk, `python -m tatu.daemon` and
`python -m tatu.daemon.launch --nproc-per-node=2`, OMP_NUM_THREADS=1 for both (the same
kernels: the comparison measures the split of the step). Micro-batches per rank 1, 3 and 7 are
SFT_GE + REPLAY_N = 1+1, 4+2 and 8+6 (8+6 is the demo's split: 14 micro-batches, 7 per rank);
each run evals at step 0 and at its end. Printed per row:

- tokens: every step's token count equal in both (the same micro-batches, the same data order);
- max |dloss|: the largest difference of a step's logged loss;
- max |dw|: the largest difference of any final weight, and how many tensors are bit-identical;
- EVAL: whether the end's EVAL lines (run.log, without the seconds) are equal to their printed
  digits, else how many printed numbers differ and the pair that differs most.

    .venv/bin/python -u bench/ddp_equivalence.py [--per-rank 1,3,7] [--steps 4,8,16,24] [--shape tests|demo]
                                                 [--anchor-weight W] [--data DIR --trunk CKPT] [--precision fp32,bf16]

--shape demo runs the demo's model and micro-batches (ops/demo.py's SCALES["demo"]: 4 layers x 128,
8 x 128 tokens a micro-batch) on the same tiny world; --anchor-weight adds TATU_ANCHOR=l2sp with
that weight (L2-SP toward the trunk) to every row. After `make demo`, the demo's own data and
trunk: `--data demo/data --trunk demo/runs/trunk/final --shape demo --per-rank 7 --steps 24`.
--precision: the SFT runs' TATU_PRECISION, one row per value (default fp32, the tests' exact setting;
bf16 is what TATU_PRECISION=auto picks on a GPU and on a CPU with avx512_bf16/AMX: the bound an
operator moving to torchrun meets there). The trunk is fp32 either way.
Prints numbers; asserts nothing (exit 0 unless a run fails).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # tiny_world: the synthetic world the daemon tests use

from tiny_world import base_env, build_world, clean_environ  # noqa: E402

from tatu.daemon.logs import read_events  # noqa: E402
from tatu.model.checkpoint import load_checkpoint  # noqa: E402
from tatu.model.cpu_sums import machine_line  # noqa: E402
from tatu.ops.demo import SCALES  # noqa: E402

# micro-batches per rank on 2 ranks -> (SFT_GE, REPLAY_N); 7 is the demo's 8 + 6
SPLITS = {1: (1, 1), 3: (4, 2), 7: (8, 6)}
MODEL = ("TATU_N_LAYER", "TATU_N_HEAD", "TATU_N_EMBD", "TATU_MICRO_BATCH", "TATU_SEQ_LEN")
NUMBER = re.compile(r"[-+]?\d+\.\d+(?:e[-+]?\d+)?")


def shape(name: str) -> tuple[int, dict[str, str]]:
    """(the data's sequence length, the run variables) of the tests' tiny model or the demo's."""
    if name == "tests":
        return 192, {}
    demo = SCALES["demo"]
    return demo.seq_len, {**{k: str(v) for k, v in demo.model.items()}, "TATU_MICRO_BATCH": str(demo.micro_batch),
                          "TATU_SEQ_LEN": str(demo.seq_len)}


def trunk(root: Path, seq_len: int, model: dict[str, str]) -> tuple[Path, Path]:
    """The tests' tiny world and a 24-step trunk on it (tests/conftest.py's tiny_trunk): (data, trunk)."""
    with contextlib.redirect_stdout(io.StringIO()):  # the data build's progress lines
        data = build_world(root, seq_len).absolute()
    env = base_env(data, root / "runs", TATU_RUN="trunk", TATU_MODE="pretrain", SFT_GE=2, MIX_STEPS_LIMIT=24,
                   EVAL_EVERY=12, TATU_LR="3e-3", TATU_GEN_PROMPTS=0, **model)
    daemon(env, root, [sys.executable, "-m", "tatu.daemon"], "the trunk")
    return data, (root / "runs" / "trunk" / "final").absolute()


def daemon(env: dict[str, str], root: Path, command: list[str], what: str) -> None:
    # XDG_RUNTIME_DIR: the control sockets under this bench's own folder, clear of other runs named alike
    proc = subprocess.run(command, env={**clean_environ(), **env, "OMP_NUM_THREADS": "1", "XDG_RUNTIME_DIR": str(root)},
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{what} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")


def printed_evals(run_dir: Path) -> list[str]:
    """The run's EVAL lines as run.log holds them, without the wall-clock seconds."""
    lines = [line[line.index("EVAL "):] for line in (run_dir / "run.log").read_text().splitlines()
             if re.search(r"EVAL [0-9]+: ", line)]
    return [re.sub(r" \([0-9.]+s\)", "", line) for line in lines]


def steps_of(run_dir: Path) -> list[dict]:
    return [e for e in read_events(run_dir / "events.jsonl") if e["event"] == "step"]


def weights(run_dir: Path) -> dict:
    return load_checkpoint(run_dir / "final").model_state


def compare(one: Path, two: Path) -> str:
    a, b = steps_of(one), steps_of(two)
    same_tokens = [s["tokens"] for s in a] == [s["tokens"] for s in b]
    dloss = max(abs(x["loss"] - y["loss"]) for x, y in zip(a, b))
    wa, wb = weights(one), weights(two)
    diffs = {k: float((wa[k].double() - wb[k].double()).abs().max()) for k in wa}
    identical = sum(d == 0.0 for d in diffs.values())
    ea, eb = printed_evals(one), printed_evals(two)
    if ea == eb:
        evals = "equal to their printed digits"
    else:
        pairs = [(x, y) for la, lb in zip(ea, eb) for x, y in zip(NUMBER.findall(la), NUMBER.findall(lb)) if x != y]
        worst = max(pairs, key=lambda p: abs(float(p[0]) - float(p[1])))
        evals = f"differ: {len(pairs)} printed numbers, largest {worst[0]} vs {worst[1]}"
    return (f"tokens {'same' if same_tokens else 'DIFFER'}  max |dloss| {dloss:.2g}  max |dw| {max(diffs.values()):.2g} "
            f"({identical}/{len(diffs)} tensors identical)  EVAL lines {evals}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-rank", default="1,3,7", help=f"micro-batches per rank, of {sorted(SPLITS)}")
    parser.add_argument("--steps", default="4,8,16,24")
    parser.add_argument("--shape", default="tests", choices=["tests", "demo"],
                        help="the tests' model (1x32, 2 x 192 tokens a micro-batch) or the demo's (4x128, 8 x 128)")
    parser.add_argument("--data", type=Path, help="a built data dir (with --trunk): instead of the tiny world")
    parser.add_argument("--trunk", type=Path, help="the seed checkpoint the SFT runs start from (with --data)")
    parser.add_argument("--anchor-weight", type=float, default=None, help="TATU_ANCHOR=l2sp with this weight")
    parser.add_argument("--precision", default="fp32", help="the SFT runs' TATU_PRECISION, comma-separated: fp32, bf16")
    args = parser.parse_args()
    precisions = args.precision.split(",")
    if (args.data is None) != (args.trunk is None):
        parser.error("--data and --trunk go together")
    per_rank = [int(n) for n in args.per_rank.split(",")]
    steps = [int(n) for n in args.steps.split(",")]
    anchor = {} if args.anchor_weight is None else {"TATU_ANCHOR": "l2sp", "TATU_ANCHOR_WEIGHT": str(args.anchor_weight)}
    seq_len, model = shape(args.shape)
    print(machine_line())
    shown = base_env(Path("data"), Path("runs"), **model)  # the model variables every run gets
    world = f"data {args.data}, trunk {args.trunk}" if args.data else "the tests' tiny world and a 24-step trunk"
    print(f"1 process vs 2 ranks (gloo), OMP_NUM_THREADS=1; {world}; the {args.shape} model: "
          f"{' '.join(f'{k}={shown[k]}' for k in MODEL)}; "
          f"{' '.join(f'{k}={v}' for k, v in anchor.items()) or 'no anchor'}", flush=True)
    with tempfile.TemporaryDirectory(prefix="tatu-ddp-equivalence-") as tmp:
        root = Path(tmp)
        data, seed = (args.data.absolute(), args.trunk.absolute()) if args.data else trunk(root, seq_len, model)
        for p in per_rank:
            sft_ge, replay_n = SPLITS[p]
            for n, precision in ((n, precision) for n in steps for precision in precisions):
                env = base_env(data, root / "runs", TATU_SEED_CKPT=seed, SFT_GE=sft_ge, REPLAY_N=replay_n,
                               MIX_STEPS_LIMIT=n, EVAL_EVERY=n, TATU_CKPT_EVERY=n, TATU_LR="1e-3", TATU_GEN_PROMPTS=0,
                               **model, **anchor, TATU_PRECISION=precision)
                name = f"p{p}-n{n}-{precision}"
                daemon({**env, "TATU_RUN": f"{name}-one"}, root, [sys.executable, "-m", "tatu.daemon"], f"{name} on 1 process")
                daemon({**env, "TATU_RUN": f"{name}-two"}, root,
                       [sys.executable, "-m", "tatu.daemon.launch", "--nproc-per-node=2", "--monitor-interval=0.2"],
                       f"{name} on 2 ranks")
                runs = root / "runs"
                shown_precision = f" {precision}" if precisions != ["fp32"] else ""  # the fp32 rows as they always read
                print(f"{p} per rank (SFT_GE={sft_ge} + REPLAY_N={replay_n}), {n:2d} steps{shown_precision}: "
                      f"{compare(runs / f'{name}-one', runs / f'{name}-two')}", flush=True)


if __name__ == "__main__":
    main()
