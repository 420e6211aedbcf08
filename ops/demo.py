"""`make demo`: from nothing to a finished experiment, on the embedded default data.

    demo sources (Debian packages + generated pairs) -> the trunk `make trunk` shipped (data/demo/trunk/,
    verified against its manifest; ops/trunk.py) -> data build with its tokenizer (word categories by
    Apertium's taggers) -> a sweep from that trunk, same steps: SFT with no replay, with English
    replay and with Portuguese + English replay, each at 3 seeds, judged by a rule written in its
    plan before it runs -> the sweep's report and the runs' report
    -> a closing table over seeds x lines, each seed's own verdict, the machine it ran on

Every stage is a tatu command an operator could type; the runs go through the daemon under
`systemd --user` when a user manager answers, in the foreground otherwise.
`python -m tatu.ops.demo --scale tiny` is the seconds-long version the tests run: it pretrains its
own trunk (TATU_MODE=pretrain) by the same recipe `make trunk` runs at the demo's scale.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tatu.daemon.run.paths import EVENTS, FINAL, RUN_LOG, STATE, TB, VERDICT, RunDir, SweepDir
from tatu.data.demo.sources import CHAT_PRETRAIN_FILE, HELD_OUT_FILE
from tatu.envfile import env_file_text, env_value
from tatu.formats import fmt_pct
from tatu.ops.cli import main as tatu
from tatu.ops.known_runs import DEMO_OUT  # `tatu status` looks in its runs/
from tatu.sweep.judge.sweep_report import SweepReport
from tatu.sweep.run.printed import sweep_command
from tatu.systemctl import SystemctlError, systemctl_user


@dataclass(frozen=True)
class Scale:
    vocab: int
    model: dict[str, int]  # TATU_N_LAYER etc.
    # the trunk's recipe (trunk_env): `make trunk` runs it at the demo scale, the tiny demo itself
    pretrain_steps: int
    pretrain_lr: float
    pretrain_min_lr: float  # the cosine schedule's end
    pretrain_warmup: int
    pretrain_eval_every: int
    micro_batch: int
    seq_len: int
    pretrain_micro: int
    sft_steps: int
    sft_lr: float
    sft_ge: int
    replay_n: int
    eval_every: int
    resamples: int
    # True: the demo starts from the trunk `make trunk` shipped (data/demo/trunk/, ops/shipped_trunk.py)
    # instead of training one; its recipe is the fields above all the same
    shipped_trunk: bool = False
    # steps after the cosine's end, at TATU_MIN_LR (ops/trunk.py resumes the run with MIX_STEPS_LIMIT
    # raised by this much: the daemon keeps the curve, daemon/start.py lr_schedule_end): the trunk's last
    # quarter then shows whether more steps at its final LR still move it
    pretrain_tail: int = 0


SCALES = {
    "demo": Scale(vocab=2048, model={"TATU_N_LAYER": 2, "TATU_N_HEAD": 4, "TATU_N_EMBD": 64, "TATU_BLOCK_SIZE": 128},
                  pretrain_steps=3000, pretrain_lr=5e-3, pretrain_min_lr=1e-4, pretrain_warmup=100,
                  pretrain_eval_every=250, micro_batch=8, seq_len=128, pretrain_micro=4,
                  sft_steps=100, sft_lr=1e-3, sft_ge=2, replay_n=4, eval_every=20, resamples=2000, shipped_trunk=True,
                  pretrain_tail=1000),
    "tiny": Scale(vocab=300, model={"TATU_N_LAYER": 1, "TATU_N_HEAD": 2, "TATU_N_EMBD": 32, "TATU_BLOCK_SIZE": 128},
                  pretrain_steps=6, pretrain_lr=3e-3, pretrain_min_lr=3e-4, pretrain_warmup=1, pretrain_eval_every=2,
                  micro_batch=4, seq_len=128, pretrain_micro=2,
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


# The replay source of Portuguese text: the pretraining corpus's Portuguese, a text channel beside
# `replay` (English) that a run names in REPLAY_SOURCES (docs/data.md).
PT_REPLAY = "ptReplay"


def prepare_data(sources: Path, work: Path, kind: str, vocab: int, seq_len: int, tokenizer: Path | None = None) -> Path:
    """Tokenizer + data dir (channels pretrain, replay, ptReplay, sft; evals sftHeld, ptVal, enRuler and
    the HELD_OUT domains present in `sources`) + dictionary. `tokenizer`: a trunk's own (a shipped
    trunk's), copied to work/tokenizer.json instead of training one."""
    from tatu.evals.words import Dictionary

    data = work / "data"
    pt, en = sources / "pt_corpus.txt", sources / "en_corpus.txt"
    # The SFT tasks in other phrasings (data/demo/sources.py), in pretraining only: the trunk knows the
    # format and the tasks before SFT. A sources dir without them (the tests' own) pretrains on text alone.
    chat = [sources / CHAT_PRETRAIN_FILE] if (sources / CHAT_PRETRAIN_FILE).is_file() else []
    if tokenizer is None:
        tokenizer = work / "tokenizer.json"
        vocab_args = ["--vocab", str(vocab)] if vocab else []
        check(tatu(["tokenizer", "train", "--kind", kind, *vocab_args, "--out", str(tokenizer),
                    str(pt), str(en), str(sources / "sft_train.jsonl"), *map(str, chat)]), "tokenizer train")
    else:
        work.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tokenizer, work / "tokenizer.json")
        tokenizer = work / "tokenizer.json"
    check(tatu(["data", "build", "--tokenizer", str(tokenizer), "--out", str(data),
                "--text", "pretrain=" + ",".join(map(str, [pt, en, *chat])), "--text", f"replay={en}",
                "--text", f"{PT_REPLAY}={pt}", "--sft", f"sft={sources / 'sft_train.jsonl'}",
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


def write_run_env(env: dict[str, str]) -> Path:
    """The run's variables beside its run dir, TATU_OUT/<run>.env (what ran; `tatu smoke --env-file`
    takes it as it is)."""
    env_file = RunDir(Path(env["TATU_OUT"]) / env["TATU_RUN"]).env_file
    env_file.parent.mkdir(parents=True, exist_ok=True)
    env_file.write_text(env_file_text(env))
    return env_file


def run_daemon(env: dict[str, str], use_systemd: bool) -> int:
    """One run through the daemon; returns its exit status. Its variables are kept beside the
    run dir as <run>.env (write_run_env)."""
    env_file = write_run_env(env)
    if use_systemd:
        check(tatu(["units", "install", "--run", env["TATU_RUN"], "--env-file", str(env_file), "--force-env"]), "units install")
        unit = f"tatu-sft@{env['TATU_RUN']}.service"
        systemctl_user("start", "--wait", unit, timeout=None, check=False, capture=False)
        shown = systemctl_user("show", "-p", "ExecMainStatus", "--value", unit, timeout=None, check=False)
        systemctl_user("reset-failed", unit, timeout=None, check=False)  # an abort leaves it failed
        return int(shown.strip() or 1)
    return subprocess.run([sys.executable, "-m", "tatu.daemon"], env={**os.environ, **env}).returncode


def trunk_env(scale: Scale, common: dict[str, str]) -> dict[str, str]:
    """The trunk's run variables: pretraining from scratch, the run `trunk`."""
    return {**common, "TATU_RUN": "trunk", "TATU_MODE": "pretrain", "SFT_GE": str(scale.pretrain_micro),
            "MIX_STEPS_LIMIT": str(scale.pretrain_steps), "TATU_LR": env_value(scale.pretrain_lr),
            "TATU_WARMUP_STEPS": str(scale.pretrain_warmup), "TATU_SCHEDULE": "cosine",
            # the run gets the string its env file holds: the file says what ran
            "TATU_MIN_LR": env_value(scale.pretrain_min_lr), "EVAL_EVERY": str(scale.pretrain_eval_every),
            "TATU_GEN_PROMPTS": "0", **{k: str(v) for k, v in scale.model.items()}}


# How often the time left is printed while the trunk trains (the first once it has logged steps).
ESTIMATE_EVERY_S = 60.0


def trunk_progress(scale: Scale, env: dict[str, str], run_dir: Path):
    """The trunk's measured step and eval times so far (ops/demo_time.py TrunkProgress)."""
    from tatu.ops.demo_time import TrunkProgress
    from tatu.sweep.run.cost import cores

    files = RunDir(run_dir)
    steps = [e for e in files.events("step") if e.get("seconds")]
    evals = [e["seconds"] for e in files.events("eval") if e.get("seconds")]
    every = int(env["EVAL_EVERY"])
    return TrunkProgress(steps_done=max([e["step"] for e in steps] or [0]), steps_total=scale.pretrain_steps,
                         step_seconds=tuple(e["seconds"] for e in steps), eval_seconds=tuple(evals),
                         evals_total=scale.pretrain_steps // every + 2,
                         slot_tokens=scale.pretrain_micro * scale.micro_batch * scale.seq_len,
                         threads=int(env.get("TATU_THREADS") or cores()))


def sweep_members(out: Path) -> list:
    """The sweep's members as its plan lists them (written before the trunk trains: it does not depend on it)."""
    from tatu.sweep.plan.load import load_plan

    return load_plan(out / "demo-plan.toml").compare_members(SweepDir(out / "sweeps" / SWEEP).runs, None)


def sweep_k() -> int:
    return min(2, os.cpu_count() or 1)


def print_time_left(scale: Scale, env: dict[str, str], run_dir: Path, out: Path) -> None:
    from tatu.ops.demo_time import job_estimate

    estimate = job_estimate(trunk_progress(scale, env, run_dir), sweep_members(out), sweep_k())
    if estimate is not None:
        print(estimate.line(), flush=True)


def _train_trunk(scale: Scale, common: dict[str, str], use_systemd: bool, runs: Path, out: Path) -> Path:
    import threading

    say(f"trunk: pretraining from scratch, {scale.pretrain_steps} steps ({'systemd --user' if use_systemd else 'foreground'})")
    env = trunk_env(scale, common)
    done = threading.Event()

    def watch() -> None:  # the time left as the trunk goes, from its own events
        while not done.wait(ESTIMATE_EVERY_S):
            try:
                print_time_left(scale, env, runs / "trunk", out)
            except (OSError, ValueError):  # a torn events line mid-write: the next look reads it whole
                pass

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        check(run_daemon(env, use_systemd), "trunk pretraining")
    finally:
        done.set()
    final = trunk_checkpoint(runs / "trunk", scale.pretrain_steps)
    print_time_left(scale, env, runs / "trunk", out)
    return final


def install_shipped_trunk(runs: Path, data: Path) -> Path:
    """The trunk `make trunk` shipped, verified byte for byte against its manifest and copied to
    runs/trunk/ (its final checkpoint, run.log, env file); its final checkpoint. It says where it
    was built and whether its run.log shows it finished. runs/trunk.env: its recipe on this demo's
    data (what `tatu smoke --env-file` checks, as for a trunk the demo trained)."""
    from tatu.envfile import parse_env_file
    from tatu.ops import shipped_trunk

    say(f"trunk: the one `make trunk` shipped ({shipped_trunk.SHIPPED}), every byte checked against its manifest")
    try:
        manifest = shipped_trunk.verify()
    except shipped_trunk.ShippedTrunkError as exc:
        raise SystemExit(f"demo: {exc}") from None
    final = shipped_trunk.install(shipped_trunk.SHIPPED, runs / "trunk")
    write_run_env({**parse_env_file(runs / "trunk" / shipped_trunk.ENV), "TATU_DATA": str(data), "TATU_OUT": str(runs)})
    print(f"built by `{manifest.command}` on {manifest.machine.removeprefix('machine: ')}; "
          f"model.safetensors sha256 {manifest.files['final/model.safetensors']}")
    print(shipped_trunk.flat_end(runs / "trunk" / RUN_LOG).line(), flush=True)
    return final


def trunk_checkpoint(run_dir: Path, steps_total: int) -> Path:
    """The trunk's final checkpoint. A stopped daemon exits 0 with its resume state saved
    (`systemctl --user stop tatu-sft@trunk`), so a 0 alone does not say the trunk is there: without
    its final checkpoint the sweep's members could only fail, and the demo ends here saying so."""
    files = RunDir(run_dir)
    if not files.final.is_dir():
        saved = [e["step"] for e in files.events("checkpoint")]
        at = f"at step {max(saved)} of {steps_total}" if saved else "before its first step"
        raise SystemExit(f"demo: the trunk ({run_dir}) was stopped {at}, before its end, its resume state saved; "
                         "`make demo` again continues it")
    return files.final


SWEEP = "demo-replay"
RUNS = "runs"  # the demo's own runs (its trunk's; `make trunk` writes its own there too)
# Each configuration at these TATU_SEEDs (stream order, dropout): a verdict that holds across them,
# not one run's luck (docs/metrics.md, "Two sources of noise").
SEEDS = (1, 2, 3)
# The demo's configurations, in the order the rule tries them: no replay (the baseline), English
# replay, and replay drawn half from the pretraining corpus's Portuguese and half from English
# (REPLAY_SOURCES, docs/data.md); every replaying one at the scale's REPLAY_N micro-batches a step.
NO_REPLAY, ENGLISH, PT_EN = "no-replay", "replay-en", "replay-pt-en"
REPLAY_SOURCES = f"replay:0.5,{PT_REPLAY}:0.5"
# The demo's decision, written into its plan before any SFT run starts and locked by `tatu sweep start`,
# on the seeds x lines CIs: the fine-tune taught answers (held-out answers right rose), English held
# (drift under MIX_FORGET_LIMIT at the end and at every eval) and Portuguese held (ptVal's change
# under the same limit).
RULE = ("first config such that sftHeld_exact_change_lo > 0 and drift_hi < MIX_FORGET_LIMIT "
        "and every_eval_drift_hi < MIX_FORGET_LIMIT and ptVal_change_hi < MIX_FORGET_LIMIT")


def sweep_plan(scale: Scale, common: dict[str, str]) -> str:
    """The demo's SFT comparison as a sweep plan (TOML): no replay, English replay, Portuguese and
    English replay, from the one trunk, the same steps and LR, each at SEEDS. Paths are relative to
    the plan, which lies in the demo's directory."""
    base = {"TATU_DATA": "data", "TATU_SEED_CKPT": "runs/trunk/final", "TATU_DEVICE": common["TATU_DEVICE"],
            "TATU_PRECISION": common["TATU_PRECISION"], "TATU_MICRO_BATCH": scale.micro_batch, "TATU_SEQ_LEN": scale.seq_len,
            "SFT_GE": scale.sft_ge, "REPLAY_N": 0, "MIX_STEPS_LIMIT": scale.sft_steps, "EVAL_EVERY": scale.eval_every,
            "TATU_CKPT_EVERY": scale.sft_steps, "TATU_LR": scale.sft_lr, "TATU_EVAL_RESAMPLES": scale.resamples,
            "TATU_MEM_FLOOR_MB": 0,
            # one thread per member: the same bits under --foreground and systemd, K members at once
            "TATU_THREADS": 1}
    # MIX_FORGET_LIMIT stays at its default (10%): a member that forgets more aborts (exit 10), a
    # result like any other; the rule reads the limit from each member's effective config.
    shown = ", ".join(f"{k} = {json.dumps(v)}" for k, v in base.items())
    return f"""# make demo's question (tatu.ops.demo), written before any SFT run starts; `tatu sweep start` locks it.
name = "{SWEEP}"
question = "Which replay (none, English, Portuguese + English; REPLAY_N={scale.replay_n} per SFT_GE={scale.sft_ge}) holds English and Portuguese under MIX_FORGET_LIMIT while the held-out answers are learned, across seeds?"
seeds = {json.dumps(list(SEEDS))}

[base]
vars = {{ {shown} }}

[configs]
{NO_REPLAY} = {{}}
{ENGLISH} = {{ REPLAY_N = {scale.replay_n} }}
{PT_EN} = {{ REPLAY_N = {scale.replay_n}, REPLAY_SOURCES = "{REPLAY_SOURCES}" }}

[decision]
baseline = {{ config = "{NO_REPLAY}" }}
rule = "{RULE}"
"""


def _compare_over_seeds(scale: Scale, common: dict[str, str], out: Path, use_systemd: bool) -> Path:
    """The SFT comparison through the sweep engine; returns the sweep's directory."""
    plan = out / "demo-plan.toml"
    plan.write_text(sweep_plan(scale, common))
    sweeps = out / "sweeps"
    k = str(sweep_k())
    where = "members as tatu-sft@ units under systemd --user" if use_systemd else "members in the foreground"
    say(f"SFT without replay, with English replay and with Portuguese + English replay (REPLAY_N={scale.replay_n}), "
        f"{scale.sft_steps} steps from the trunk, at seeds "
        f"{', '.join(map(str, SEEDS))}: the sweep {SWEEP} ({where}, {k} at a time); its rule, locked before it runs:\n    {RULE}")
    backend = ["--wait"] if use_systemd else ["--foreground"]
    code = tatu(["sweep", "start", str(plan), "--sweeps", str(sweeps), "-K", k, "--poll", "0.5", *backend])
    check(code, "the SFT sweep")
    return sweeps / SWEEP


def closing_table(data: SweepReport) -> str:
    """The sweep's answer: per configuration over seeds, the paired difference, the locked rule's
    verdict (the sweep report holds the rest: held-out sets, word categories, the common step)."""
    from tatu.sweep.report import tables

    configs = list(data.compare.configs)
    where, paired = tables.closing_paired_rows(configs)  # like with like: at the common step where it exists
    return "\n".join([
        f"{data.question}",
        "per configuration over seeds (* = baseline):",
        tables.text_table(tables.CONFIG_HEADER, tables.config_rows(configs)),
        f"\npaired by seed and line vs the baseline, {where} ({tables.PAIRED_P})",
        tables.text_table(tables.PAIRED_HEADER, paired),
        f"\n{tables.HELD_OUT_NOTE}",
        tables.text_table(tables.HELD_OUT_HEADER, tables.held_out_rows(configs)),
        "", *tables.power_lines(data.seeds_for), "", *tables.verdict_lines(data.verdict, data.compare.complete)])


# The heading of the paragraph written from the sweep's report (sweep/report/prose.py): the README quotes
# what follows it, so a hand-written sentence never states a number or a sign the demo did not print.
WHAT_IT_SAYS = "what it says (one sentence per conclusion, written from the report's numbers; every number is this machine's):"


def what_it_says(report: SweepReport) -> str:
    """The conclusions in sentences, each with its CI (sweep/report/prose.py), wrapped for a terminal."""
    import textwrap

    from tatu.sweep.report.prose import what_it_says as sentences

    return "\n".join(textwrap.fill(s.text, 100, break_on_hyphens=False) for s in sentences(report))


def member_table(data: SweepReport) -> str:
    """Each seed's own run: what the daemon judged on its own (one run's CI: the ruler's lines only)."""
    width = max([len("member"), *(len(r.member) for c in data.compare.configs for r in c.results)])  # runs/<member>/
    rows = [f"{'member':<{width}} {'seed':>4} {'step':>4}  {'its own verdict':<16} {'its last drift [95% CI over lines]':>30}"]
    for config in data.compare.configs:
        for result in config.results:
            last = result.evals.eval_drifts if result.evals else ()
            drift = f"{fmt_pct(last[-1][1])} (hi {fmt_pct(last[-1][2])})" if last else "n/a"
            rows.append(f"{result.member:<{width}} {result.seed:>4} {result.steps or 0:>4}  "
                        f"{result.verdict or result.state:<16} {drift:>30}")
    return "\n".join(rows)


def where_things_are(out: Path, data: Path, trunk: Path, sweep_dir: Path, sweep_page: Path, members: list[Path]) -> str:
    return f"""
Where things are:
  data            {data}
  trunk           {trunk}
  the plan        {out / 'demo-plan.toml'} (locked: {SweepDir(sweep_dir).lock_file})
  member runs     {SweepDir(sweep_dir).runs}/<member>/ ({RUN_LOG}, {EVENTS}, {STATE}/, {FINAL}/, {VERDICT})
  sweep report    {sweep_page} (report.json and plots beside it)
  run report      {out / 'report' / 'index.html'} (a verdict sentence per run, learning vs forgetting, the word-category tables)
  TensorBoard     tensorboard --logdir {out}      (every run's curves: <run>/{TB}; the members' HParams: {sweep_dir / 'tb'})
Next:
  {sweep_command('report', sweep_dir)}      # the tables again, from the files
  tatu generate {RunDir(members[-1]).final} --chat --prompt "Escreva a data 7/9/1822 por extenso."
  tatu smoke --env-file {RunDir(trunk.parent).env_file}      # the 2-step check an operator runs before a real run"""


def main(argv: list[str] | None = None) -> int:
    from tatu.model.cpu_sums import machine_line
    from tatu.ops.packages import ensure_tagger_packages
    from tatu.sweep.report.write import write_report

    parser = argparse.ArgumentParser(prog="python -m tatu.ops.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="demo")
    parser.add_argument("--out", type=Path, default=DEMO_OUT)
    parser.add_argument("--seed", type=int, default=0, help="the sources' and the trunk's seed (the SFT seeds are the plan's)")
    parser.add_argument("--foreground", action="store_true", help="never use systemd --user")
    args = parser.parse_args(argv)
    scale = SCALES[args.scale]
    out: Path = args.out.resolve()
    started = time.time()
    machine = machine_line()

    say(f"tatu demo ({args.scale}) in {out}\n{machine}")
    sources = out / "sources"
    check(tatu(["data", "demo", str(sources), "--scale", args.scale, "--seed", str(args.seed)]), "data demo")
    # Apertium's taggers: the data build stores each eval line's word categories, so the reports
    # have the per-category tables (without them, the demo runs and says what is missing).
    tagger_problem = ensure_tagger_packages()
    if tagger_problem:
        print(f"note: {tagger_problem}; the reports will have no word-category tables")
    use_systemd = not args.foreground and user_manager_running()
    runs = out / RUNS
    if scale.shipped_trunk:
        trunk = install_shipped_trunk(runs, out / "data")
        say("data build with the trunk's own tokenizer")
        data = prepare_data(sources, out, "bpe", scale.vocab, scale.seq_len, tokenizer=trunk / "tokenizer.json")
    else:
        say("tokenizer (byte-level BPE) and data build")
        data = prepare_data(sources, out, "bpe", scale.vocab, scale.seq_len)
    common = {"TATU_DATA": str(data), "TATU_OUT": str(runs), "TATU_DEVICE": os.environ.get("TATU_DEVICE", "auto"),
              "TATU_SEED": str(args.seed), "TATU_MICRO_BATCH": str(scale.micro_batch), "TATU_SEQ_LEN": str(scale.seq_len),
              "EVAL_EVERY": str(scale.eval_every), "TATU_EVAL_RESAMPLES": str(scale.resamples), "TATU_MEM_FLOOR_MB": "0",
              # fp32 unless asked: the README's closing table is the fp32 one, the same on every machine
              # (auto would be bf16 on a CPU with AMX and fp32 on one without; docs/precision.md)
              "TATU_PRECISION": os.environ.get("TATU_PRECISION", "fp32")}
    # the plan is written before the trunk trains, so the time left can count the sweep's members
    (out / "demo-plan.toml").write_text(sweep_plan(scale, common))
    if not scale.shipped_trunk:
        print(f"time left: unknown until the trunk has measured steps (then every {ESTIMATE_EVERY_S:.0f} s)", flush=True)
        trunk = _train_trunk(scale, common, use_systemd, runs, out)
    sweep_dir = _compare_over_seeds(scale, common, out, use_systemd)

    from tatu.ops.demo_time import reports_estimate

    say("reports: the sweep's (tables over seeds, plots) and every member's run report")
    members = sorted(p for p in SweepDir(sweep_dir).runs.iterdir() if p.is_dir())
    print(reports_estimate(members, len(sweep_members(out))).line(), flush=True)
    report, _, sweep_page = write_report(sweep_dir)
    check(tatu(["report", *map(str, members), "--out", str(out / "report")]), "report")

    say(f"done in {time.time() - started:.0f}s: SFT with no replay, English replay and Portuguese + English replay over "
        f"seeds {', '.join(map(str, SEEDS))}, "
        f"CIs over seeds x lines\n{machine}")
    print(closing_table(report))
    print(f"\n{WHAT_IT_SAYS}\n{what_it_says(report)}")
    print("\neach seed's own run, as its daemon judged it (its CI covers the ruler's lines, not the seed):")
    print(member_table(report))
    print(where_things_are(out, data, trunk, sweep_dir, sweep_page, members))
    return 0


if __name__ == "__main__":
    sys.exit(main())
