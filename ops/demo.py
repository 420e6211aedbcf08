"""`make demo`: from nothing to a finished experiment, on the embedded default data.

    demo sources (Debian packages + generated pairs) -> BPE tokenizer -> data build
    -> a trunk pretrained from scratch (the daemon, TATU_MODE=pretrain)
    -> two SFT runs from that trunk, same steps: without replay, with replay
    -> tatu compare of their final checkpoints -> tatu report -> a closing table

Every stage is a tatu command an operator could type; the runs go through the daemon under
`systemd --user` when a user manager answers, in the foreground otherwise.
`python -m tatu.ops.demo --scale tiny` is the seconds-long version the tests run.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tatu.data.demo import CHAT_PRETRAIN_FILE, HELD_OUT_FILE
from tatu.formats import fmt_p, fmt_pct
from tatu.ops.cli import main as tatu
from tatu.systemctl import SystemctlError, systemctl_user


@dataclass(frozen=True)
class Scale:
    vocab: int
    model: dict[str, int]  # TATU_N_LAYER etc.
    pretrain_steps: int
    pretrain_lr: float
    micro_batch: int
    seq_len: int
    pretrain_micro: int
    sft_steps: int
    sft_lr: float
    sft_ge: int
    replay_n: int
    eval_every: int
    resamples: int


SCALES = {
    "demo": Scale(vocab=2048, model={"TATU_N_LAYER": 4, "TATU_N_HEAD": 4, "TATU_N_EMBD": 128, "TATU_BLOCK_SIZE": 128},
                  pretrain_steps=1000, pretrain_lr=3e-3, micro_batch=8, seq_len=128, pretrain_micro=4,
                  sft_steps=48, sft_lr=1e-3, sft_ge=8, replay_n=6, eval_every=8, resamples=2000),
    "tiny": Scale(vocab=300, model={"TATU_N_LAYER": 1, "TATU_N_HEAD": 2, "TATU_N_EMBD": 32, "TATU_BLOCK_SIZE": 128},
                  pretrain_steps=6, pretrain_lr=3e-3, micro_batch=4, seq_len=128, pretrain_micro=2,
                  sft_steps=4, sft_lr=1e-3, sft_ge=2, replay_n=2, eval_every=2, resamples=200),
}


def say(text: str) -> None:
    print(f"\n=== {text}", flush=True)


def check(code: int, what: str) -> None:
    if code != 0:
        raise SystemExit(f"demo: {what} failed with exit code {code}")


# Held-out domains the demo scores beside the three roles when its sources have them: no training
# channel reads these files.
HELD_OUT = {"ptFaq": HELD_OUT_FILE}
HELD_OUT_ABOUT = {"ptFaq": "European Portuguese Debian FAQ, read by no training source"}


def prepare_data(sources: Path, work: Path, kind: str, vocab: int, seq_len: int) -> Path:
    """Tokenizer + data dir (channels pretrain, replay, sft; evals sftHeld, ptVal, enRuler and the
    HELD_OUT domains present in `sources`) + dictionary."""
    from tatu.evals.words import Dictionary

    tokenizer = work / "tokenizer.json"
    data = work / "data"
    pt, en = sources / "pt_corpus.txt", sources / "en_corpus.txt"
    # The SFT tasks in other phrasings (data/demo.py), in pretraining only: the trunk knows the
    # format and the tasks before SFT. A sources dir without them (the tests' own) pretrains on text alone.
    chat = [sources / CHAT_PRETRAIN_FILE] if (sources / CHAT_PRETRAIN_FILE).is_file() else []
    vocab_args = ["--vocab", str(vocab)] if vocab else []
    check(tatu(["tokenizer", "train", "--kind", kind, *vocab_args, "--out", str(tokenizer),
                str(pt), str(en), str(sources / "sft_train.jsonl"), *map(str, chat)]), "tokenizer train")
    check(tatu(["data", "build", "--tokenizer", str(tokenizer), "--out", str(data),
                "--text", "pretrain=" + ",".join(map(str, [pt, en, *chat])), "--text", f"replay={en}", "--sft", f"sft={sources / 'sft_train.jsonl'}",
                "--eval", f"sftHeld={sources / 'sft_held.jsonl'}", "--eval", f"ptVal={sources / 'pt_val.txt'}",
                "--eval", f"enRuler={sources / 'en_ruler.txt'}", *held_out_args(sources),
                "--seq-len", str(seq_len)]), "data build")
    # The invented-word ruler's dictionary: every text the model was trained on (a dictionary
    # from the conversations alone calls real words invented), words seen >= 3 times.
    texts = [pt.read_text(encoding="utf-8"), en.read_text(encoding="utf-8")]
    for line in [line for path in [sources / "sft_train.jsonl", *chat] for line in path.read_text(encoding="utf-8").splitlines()]:
        if line.strip():
            pair = json.loads(line)
            texts.append(f"{pair['prompt']}\n{pair['response']}")
    Dictionary.build(texts, min_count=3).save(data / "dictionary.json")
    return data


def held_out_args(sources: Path) -> list[str]:
    """--eval for the held-out domains and --task for the multiple-choice tasks the sources have."""
    held = [arg for name, file in HELD_OUT.items() if (sources / file).is_file()
            for arg in ("--eval", f"{name}={sources / file}")]
    return held + [arg for path in sorted(sources.glob("task_*.jsonl"))
                   for arg in ("--task", f"{path.stem.removeprefix('task_')}={path}")]


def user_manager_running() -> bool:
    try:
        state = systemctl_user("is-system-running", timeout=5, check=False)  # "degraded" exits 1
    except (SystemctlError, OSError, subprocess.TimeoutExpired):
        return False
    return state.strip() in ("running", "degraded")


def run_daemon(env: dict[str, str], use_systemd: bool) -> int:
    """One run through the daemon; returns its exit status. Its variables are kept beside the
    run dir as <run>.env (what ran; `tatu smoke --env-file` takes it as it is)."""
    env_file = Path(env["TATU_OUT"]) / f"{env['TATU_RUN']}.env"
    env_file.parent.mkdir(parents=True, exist_ok=True)
    env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    if use_systemd:
        check(tatu(["units", "install", "--run", env["TATU_RUN"], "--env-file", str(env_file), "--force-env"]), "units install")
        unit = f"tatu-sft@{env['TATU_RUN']}.service"
        systemctl_user("start", "--wait", unit, timeout=None, check=False, capture=False)
        shown = systemctl_user("show", "-p", "ExecMainStatus", "--value", unit, timeout=None, check=False)
        systemctl_user("reset-failed", unit, timeout=None, check=False)  # an abort leaves it failed
        return int(shown.strip() or 1)
    return subprocess.run([sys.executable, "-m", "tatu.daemon"], env={**os.environ, **env}).returncode


def closing_table(run_dirs: list[Path]) -> str:
    """One row per run: its verdict, sftHeld and ptVal change and enRuler drift, each with its
    paired CI vs the run's step 0; then the drift of every run at the last step they all reached."""
    def with_ci(change):
        return f"{fmt_pct(change['value'])} [{fmt_pct(change['lo'])},{fmt_pct(change['hi'])}]" if change else "n/a"

    from tatu.ops.report.page import load_run

    runs = {}
    for run_dir in run_dirs:
        record = load_run(run_dir)
        runs[record.name] = ({e["step"]: e for e in record.evals}, record.verdict)
    head = f"{'run':<14} {'step':>4} {'sftHeld change':>24} {'ptVal change':>24} {'enRuler drift':>24} {'p':>6}  verdict"
    rows = [head]
    for name, (evals, verdict) in runs.items():
        last = evals[max(evals)]
        rows.append(f"{name:<14} {last['step']:>4} {with_ci(last['changes'].get('sftHeld')):>24} "
                    f"{with_ci(last['changes'].get('ptVal')):>24} {with_ci(last['drift']):>24} "
                    f"{fmt_p(last['drift']['p_value']):>6}  {verdict['verdict'] if verdict else 'unfinished'}")
    common = set.intersection(*(set(evals) - {0} for evals, _ in runs.values()))
    if common:
        step = max(common)
        rows.append(f"at step {step}, the last eval every run reached: " + "; ".join(
            f"{name} drift {with_ci(evals[step]['drift'])}" for name, (evals, _) in runs.items()))
    rows.append("verdicts judge sftHeld and the English ruler (drift) only; ptVal is shown, not judged.")
    for held_out, about in HELD_OUT_ABOUT.items():
        changes = {name: evals[max(evals)]["changes"].get(held_out) for name, (evals, _) in runs.items()}
        if any(changes.values()):
            rows.append(f"held-out {held_out} ({about}), change vs step 0: "
                        + "; ".join(f"{name} {with_ci(change)}" for name, change in changes.items()))
    return "\n".join(rows)


def _train_trunk(scale: Scale, common: dict[str, str], use_systemd: bool, runs: Path) -> Path:
    say(f"trunk: pretraining from scratch, {scale.pretrain_steps} steps ({'systemd --user' if use_systemd else 'foreground'})")
    trunk_env = {**common, "TATU_RUN": "trunk", "TATU_MODE": "pretrain", "SFT_GE": str(scale.pretrain_micro),
                 "MIX_STEPS_LIMIT": str(scale.pretrain_steps), "TATU_LR": str(scale.pretrain_lr),
                 "TATU_WARMUP_STEPS": str(max(1, scale.pretrain_steps // 20)), "TATU_SCHEDULE": "cosine",
                 "TATU_MIN_LR": str(scale.pretrain_lr / 10), "EVAL_EVERY": str(max(scale.eval_every, scale.pretrain_steps // 4)),
                 "TATU_GEN_PROMPTS": "0", **{k: str(v) for k, v in scale.model.items()}}
    check(run_daemon(trunk_env, use_systemd), "trunk pretraining")
    return runs / "trunk" / "final"


def _sft_runs(scale: Scale, common: dict[str, str], trunk: Path, use_systemd: bool) -> dict[str, int]:
    """The two SFT runs, without and with replay: each one's exit status."""
    # The same seed checkpoint, the same steps and LR: only the mix differs.
    sft_common = {**common, "TATU_SEED_CKPT": str(trunk), "SFT_GE": str(scale.sft_ge), "MIX_STEPS_LIMIT": str(scale.sft_steps),
                  "TATU_LR": str(scale.sft_lr), "TATU_CKPT_EVERY": str(scale.sft_steps)}
    # MIX_FORGET_LIMIT stays at its default (10%): a run that forgets more aborts (exit 10) and
    # its verdict says so; that is the daemon doing its job, and the table shows it.
    statuses = {}
    for name, replay in (("sft-noreplay", 0), ("sft-replay", scale.replay_n)):
        say(f"SFT run {name}: SFT_GE={scale.sft_ge} REPLAY_N={replay}, {scale.sft_steps} steps")
        statuses[name] = run_daemon({**sft_common, "TATU_RUN": name, "REPLAY_N": str(replay)}, use_systemd)
        if statuses[name] not in (0, 10):
            check(statuses[name], f"SFT run {name}")
    return statuses


def _compare_and_report(runs: Path, statuses: dict[str, int], sources: Path, out: Path) -> tuple[dict[str, Path], list[Path]]:
    # A run aborted by MIX_FORGET_LIMIT has no final/: its resume state holds its last weights.
    last = {name: runs / name / ("final" if (runs / name / "final").exists() else "state") for name in statuses}
    steps = {name: json.loads((last[name] / "meta.json").read_text())["step"] for name in statuses}
    say(f"paired comparison of the last weights of each run on the same lines: "
        f"A = sft-noreplay (step {steps['sft-noreplay']}), B = sft-replay (step {steps['sft-replay']})")
    check(tatu(["compare", str(last["sft-noreplay"]), str(last["sft-replay"]),
                "--set", f"enRuler={sources / 'en_ruler.txt'}", "--set", f"sftHeld={sources / 'sft_held.jsonl'}",
                "--json", str(out / "compare.json")]), "compare")
    say("report")
    run_dirs = [runs / "sft-noreplay", runs / "sft-replay"]
    check(tatu(["report", *map(str, run_dirs), "--out", str(out / "report")]), "report")
    return last, run_dirs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tatu.ops.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="demo")
    parser.add_argument("--out", type=Path, default=Path("demo"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--foreground", action="store_true", help="never use systemd --user")
    args = parser.parse_args(argv)
    scale = SCALES[args.scale]
    out: Path = args.out.resolve()
    started = time.time()

    say(f"tatu demo ({args.scale}) in {out}")
    sources = out / "sources"
    check(tatu(["data", "demo", str(sources), "--scale", args.scale, "--seed", str(args.seed)]), "data demo")
    say("tokenizer (byte-level BPE) and data build")
    data = prepare_data(sources, out, "bpe", scale.vocab, scale.seq_len)

    use_systemd = not args.foreground and user_manager_running()
    runs = out / "runs"
    common = {"TATU_DATA": str(data), "TATU_OUT": str(runs), "TATU_DEVICE": os.environ.get("TATU_DEVICE", "auto"),
              "TATU_SEED": str(args.seed), "TATU_MICRO_BATCH": str(scale.micro_batch), "TATU_SEQ_LEN": str(scale.seq_len),
              "EVAL_EVERY": str(scale.eval_every), "TATU_EVAL_RESAMPLES": str(scale.resamples), "TATU_MEM_FLOOR_MB": "0",
              # fp32 unless asked: the README's closing table is the fp32 one, the same on every machine
              # (auto would be bf16 on a CPU with AMX and fp32 on one without; docs/precision.md)
              "TATU_PRECISION": os.environ.get("TATU_PRECISION", "fp32")}
    trunk = _train_trunk(scale, common, use_systemd, runs)
    statuses = _sft_runs(scale, common, trunk, use_systemd)
    last, run_dirs = _compare_and_report(runs, statuses, sources, out)

    say(f"done in {time.time() - started:.0f}s: enRuler drift without vs with replay (paired 95% CIs vs each run's step 0)")
    print(closing_table(run_dirs))
    finals = ", ".join(f"{name}/{last[name].name}" for name in statuses)
    print(f"""
Where things are:
  data            {data}
  trunk           {trunk}
  runs            {runs}/<run>/ (run.log, events.jsonl, state/, best/, verdict.json; {finals}); <run>.env beside
  comparison      {out / 'compare.json'}
  report          {out / 'report' / 'index.html'}
Next:
  tatu report {' '.join(map(str, run_dirs))}
  tatu generate {last['sft-replay']} --chat --prompt "Quanto é 12 mais 30?"
  tatu smoke --env-file {runs / 'sft-replay.env'}      # the 2-step check an operator runs before a real run""")
    return 0


if __name__ == "__main__":
    sys.exit(main())
