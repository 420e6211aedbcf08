"""The pages' fixtures, shared by the tests of the run report (tests/ops/test_report.py), the
sweep page (tests/sweep/test_report_page.py) and both in a browser (tests/pages/): made-up
events and sweep numbers, so the pages render in milliseconds."""
from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

from meta_only import write_meta
from run_records import rule_plan, sweep_report

from tatu.ops.report.page import build_report
from tatu.formats import fmt_ci, fmt_pct
from tatu.records import RelativeChange
from tatu.sweep.judge.records import ConfigResult, ConfigStat, FailedCondition, MemberResult, RuleCheck, SweepVerdict
from tatu.sweep.judge.sweep_report import SweepReport
from tatu.sweep.plan.lock import LockedMember, LockedPlan
from tatu.sweep.plan.member import Member


def change_point(value, p=0.04):
    return {"value": value, "lo": value - 0.01, "hi": value + 0.012, "p_value": p, "mde": 0.008}


def set_summary(ppl):
    return {"ppl": ppl, "lo": ppl * 0.97, "hi": ppl * 1.031, "se": 0.01, "bpc": 1.5, "bpb": 1.4,
            "n_lines": 10, "n_lines_total": 10, "n_tokens": 300}


# a verdict's criteria as the daemon writes them (daemon/judge.py criteria)
CRITERIA = {"improve": "sftHeld paired CI upper bound < 0 vs step 0", "forget_limit": "drift <= 10.0% at every eval",
            "flat": "sftHeld change CI and final drift CI both include 0"}


def eval_event(step, sft, pt, en, drift, best, generations=None):
    return {"event": "eval", "time": 1000.0 + step, "step": step,
            "sets": {"sftHeld": set_summary(sft), "ptVal": set_summary(pt), "enRuler": set_summary(en)},
            "changes": {"sftHeld": change_point(-0.05 * step / 8), "ptVal": change_point(0.01), "enRuler": change_point(drift)},
            "drift": change_point(drift, p=0.0004 if drift else 1.0), "drift_tronco": change_point(drift + 0.147),
            "trunk_ok": True, "best": best, "best_set": "sftHeld", "abort": None, "notes": {}, "seconds": 1.5,
            "generations": generations, "line": f"EVAL {step}: sftHeld {sft:.4f}"}


def gen_summary(accuracy, rate):
    return {"samples": [{"prompt": "Quanto é 2 mais 2?", "reference": "4", "output": "<b>4</b> & mais"},
                        {"prompt": "Capital do Brasil?", "reference": "Brasília", "output": "Lisboa"}],
            "accuracy": {"value": accuracy, "lo": 0.1, "hi": 0.9, "n": 2},
            "invented": {"rate": rate, "n_words": 40, "n_invented": 3, "examples": ["brasilha"]}}


def write_run(run_dir: Path, events: list[dict], config: dict | None, torn_tail: str = "") -> Path:
    run_dir.mkdir(parents=True)
    text = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events) + torn_tail
    (run_dir / "events.jsonl").write_text(text, encoding="utf-8")
    if config is not None:
        write_meta(run_dir / "state", {"config": config, "step": 8})
    return run_dir


BASE_CONFIG = {"TATU_MODE": "sft", "SFT_GE": 8, "TATU_SEED": 1337, "MIX_FORGET_LIMIT": 0.1, "TATU_LR": 0.0003}


def report_runs(root: Path) -> dict:
    """Two runs under root (one finished with a verdict, one still running) and their report in root/out."""
    superseded = eval_event(8, 8.11111, 30.5, 55.0, 0.031, True, gen_summary(0.25, 0.2))
    finished = write_run(root / "sft-noreplay", [
        {"event": "ready", "time": 1.0, "step": 0, "limit": 8},
        eval_event(0, 9.07021, 31.2, 52.1, 0.0, True),
        {"event": "step", "time": 2.0, "step": 4, "loss": 2.0, "lr": 3e-4, "tokens": {"sft": 100}},
        eval_event(4, 8.50004, 30.9, 53.7, 0.0307, True, gen_summary(0.5, 0.1)),
        superseded,
        {"event": "resumed", "time": 3.0, "step": 4},
        # the restart re-ran step 8: this eval replaces the one above
        eval_event(8, 8.22227, 30.75, 56.3, 0.0806, False, gen_summary(0.5, 0.075)),
        {"event": "verdict", "time": 9.0, "step": 8, "verdict": "forgets",
         "line": "VERDICT forgets: sftHeld -5.0% [-6.0%,-3.8%] drift +8.1% [+7.1%,+9.3%] worst drift +8.1% at step 8",
         "numbers": {"step": 8, "sftHeld_change": change_point(-0.05), "drift": change_point(0.0806),
                     "drift_tronco": change_point(0.2276), "worst_drift": 0.0806, "worst_drift_step": 8, "aborted": None},
         "criteria": CRITERIA,
         # the daemon's wording (tatu.daemon.ci_covers), as long as a real run's
         "ci_covers": {"text": "CIs over the 400 sftHeld and 300 of 1200 enRuler lines; run-to-run variation not "
                               "included (tatu sweep start --env-file <run>.env --seeds 3 measures it)"}},
    ], BASE_CONFIG, torn_tail='{"event": "step", "time": 10.0, "st')
    running = write_run(root / "sft-replay", [
        eval_event(0, 9.07021, 31.2, 52.1, 0.0, True),
        eval_event(4, 8.60001, 31.0, 52.4, 0.0058, True, gen_summary(0.5, 0.05)),
    ], {**BASE_CONFIG, "REPLAY_N": 6, "MIX_FORGET_LIMIT": 10.0})
    out = root / "out"
    index = build_report([finished, running], out)
    return {"finished": finished, "running": running, "out": out, "index": index, "superseded": superseded}


DRIFT = {"replay-n0": {"1": 0.18, "2": 0.19, "3": 0.09}, "replay-n6": {"1": 0.03, "2": 0.04, "3": 0.035}}
CHANGE = {"replay-n0": {"1": -0.98, "2": -0.97, "3": -0.96}, "replay-n6": {"1": -0.99, "2": -0.995, "3": -0.99}}
ABORTED = {("replay-n0", "1"), ("replay-n0", "2")}
LONG_RULE = ("smallest REPLAY_N such that drift_hi < MIX_FORGET_LIMIT and every_eval_drift_hi < MIX_FORGET_LIMIT "
             "and sftHeld_change_hi < 0 and ptFaq_change_hi < 0.05")


def stats(per_seed: dict) -> ConfigStat:
    """What the page and its plots read of a configuration's statistic (the rest: zeros)."""
    mean = sum(per_seed.values()) / len(per_seed)
    return ConfigStat(change=RelativeChange(mean, mean - 0.02, mean + 0.02), log_mean=math.log1p(mean), se=0.0,
                      seed_sd=0.01, seed_effect_sd=0.0, within_se=0.008, shared_line_se=0.0, interaction_se=0.0,
                      df=None, n_seeds=len(per_seed), mde=0.03, parts=None, per_seed=per_seed, outliers=())


def sweep_config(key: str, replay: str) -> ConfigResult:
    results = tuple(MemberResult(member=f"{key}-s{s}", config=key, seed=int(s), values={"REPLAY_N": replay},
                                 state="aborted" if (key, s) in ABORTED else "done", verdict=None)
                    for s in DRIFT[key])
    return ConfigResult(key=key, values={"REPLAY_N": replay}, results=results,
                        stats={"drift": stats(DRIFT[key]), "sftHeld": stats(CHANGE[key])}, categories=None,
                        stats_common=None, categories_common=None, common_step=None,
                        common_missing="no per-line scores kept at step 8", end_steps=(8, 24), trainable=None,
                        effective={"MIX_FORGET_LIMIT": 0.1}, half=None, is_baseline=key == "replay-n0")


def sweep_data() -> SweepReport:
    verdict_line = f"REPLAY_N=6: the {LONG_RULE.split(' such that')[0]} such that {LONG_RULE.split('such that ')[1]}"
    verdict = SweepVerdict(LONG_RULE, "REPLAY_N", "end", None, "6", verdict_line, (RuleCheck(
        "replay-n0", "0", "0", (FailedCondition("drift_hi < MIX_FORGET_LIMIT", 0.177, 0.1, "+17.7%"),), (), False),), ())
    return sweep_report(verdict, [sweep_config("replay-n0", "0"), sweep_config("replay-n6", "6")],
                        question="Does replay hold the ruler?")


# --- a sweep's six member runs (2 configurations x 3 seeds), as `make demo` hands them to `tatu report`

SWEEP_NAME = "demo-replay"
SEED_DRIFT = {"replay-n0": {1: 0.26, 2: 0.28, 3: 0.24}, "replay-n6": {1: -0.03, 2: -0.04, 3: -0.035}}
N_LINES = 40


def _line_scores(rng, set_name: str, step: int, seed: int, drift: float) -> dict:
    """Per-line NLL sums and token counts as TATU_EVAL_LINES keeps them: the same lines at every step;
    each line's NLL grows by the seed's drift (and noise) with training, lines differ in difficulty."""
    import numpy as np

    base = np.random.default_rng(sum(map(ord, set_name)))  # the set's lines: the same for every seed
    tokens = base.integers(5, 30, N_LINES)
    per_token = base.uniform(1.5, 3.5, N_LINES)
    growth = 1.0 + (drift if set_name == "enRuler" else -0.1 if set_name == "sftHeld" else 0.01) * step / 8
    noise = 1.0 + (rng.normal(0, 0.02, N_LINES) if step else 0.0)
    return {"index": list(range(N_LINES)), "nll_sum": (tokens * per_token * growth * noise).tolist(),
            "n_tokens": tokens.tolist()}


CATEGORIES = ("noun", "verb", "adjective", "function")
# two multiple-choice tasks as evals/choice.py summarises them (acc and acc_norm, each with its McNemar change)
TASKS = {task: {"n": 40, **{key: {"value": 0.5, "lo": 0.35, "hi": 0.65, "change": {"only_a": 3, "only_b": 2, "p_value": 1.0,
                                                                                    "diff": 0.025}}
                            for key in ("acc", "acc_norm")}} for task in ("arith", "dates")}


def _categories(drift: float) -> dict:
    """Each set's word categories at the last eval, with the paired change vs step 0 (evals/categories)."""
    return {set_name: {category: {**set_summary(20.0 + index), "change": change_point(drift if set_name == "enRuler" else -0.1)}
                       for index, category in enumerate(CATEGORIES)} for set_name in ("sftHeld", "ptVal", "enRuler")}


def seed_member_runs(root: Path) -> list[Path]:
    """Six member runs of a sweep's lock (sweeps/demo-replay/runs/<sweep>.<key>-s<seed>), each with
    its events and its per-line scores at steps 0, 4 and 8; replay-n0's seeds abort at step 4 or 8."""
    import numpy as np

    sweep_dir = root / "sweeps" / SWEEP_NAME
    runs, members = [], []
    for key, per_seed in SEED_DRIFT.items():
        for seed, drift in per_seed.items():
            run = f"{SWEEP_NAME}.{key}-s{seed}"
            members.append(LockedMember(Member(f"{key}-s{seed}", run, "compare", key,
                                               {"REPLAY_N": key.removeprefix("replay-n")}, seed, {}), {}, ""))
            rng = np.random.default_rng(seed * 10 + len(key))
            last = 4 if (key == "replay-n0" and seed != 3) else 8
            events = [eval_event(step, 9.0 - 0.1 * step, 31.0, 52.0 * (1 + drift * step / 8), drift * step / 8, True)
                      for step in (0, 4, 8) if step <= last]
            env_file = sweep_dir / "env" / f"{run}.env"
            measured_by = f"run-to-run variation not included (tatu sweep start --env-file {env_file} --seeds 3 measures it)"
            for event in events:  # what each eval's CIs cover, as the daemon writes it (tatu.daemon.ci_covers)
                event["ci_covers"] = {"text": f"CIs over the {N_LINES} sftHeld, {N_LINES} ptVal and {N_LINES} enRuler "
                                              f"lines; {measured_by}", "env_file": str(env_file)}
            events[-1].update(categories=_categories(drift), tasks=TASKS)
            aborted = f"drift {drift * last / 8 * 100:+.1f}% > MIX_FORGET_LIMIT 10.0%" if drift * last / 8 > 0.1 else None
            outcome, sft, at_end = "forgets" if aborted else "holds", change_point(-0.05 * last / 8), change_point(drift * last / 8)
            covers = f"CIs over the {N_LINES} sftHeld and {N_LINES} enRuler lines; {measured_by}"
            # the verdict line as daemon/judge.py writes it: the numbers, then what their CIs cover
            line = (f"VERDICT {outcome}: sftHeld {fmt_ci(sft['value'], sft['lo'], sft['hi'])} drift "
                    f"{fmt_ci(at_end['value'], at_end['lo'], at_end['hi'])} at step {last}; worst drift "
                    f"{fmt_pct(drift * last / 8)} at step {last}" + (f" (aborted: {aborted})" if aborted else ""))
            events.append({"event": "verdict", "time": 9.0, "step": last, "verdict": outcome,
                           "line": f"{line}; {covers}", "numbers": {"step": last, "sftHeld_change": sft,
                                                          "drift": at_end, "worst_drift": drift * last / 8,
                                                          "worst_drift_step": last, "aborted": aborted},
                           "criteria": CRITERIA, "ci_covers": {"text": covers, "env_file": str(env_file)}})
            run_dir = write_run(sweep_dir / "runs" / run, events, {**BASE_CONFIG, "REPLAY_N": int(key[-1]), "TATU_SEED": seed})
            (run_dir / "evals").mkdir()
            for step in (0, 4, 8):
                if step <= last:
                    sets = {name: {"lines": _line_scores(rng, name, step, seed, drift)} for name in ("sftHeld", "ptVal", "enRuler")}
                    (run_dir / "evals" / f"step-{step:06d}.json").write_text(json.dumps({"step": step, "sets": sets}))
            runs.append(run_dir)
    # the lock as tatu writes it (its own writer), of a plan holding what the run report reads: the members
    plan = rule_plan("smallest REPLAY_N such that drift_hi < MIX_FORGET_LIMIT",
                     {"REPLAY_N": [key.removeprefix("replay-n") for key in SEED_DRIFT]}, sweep_dir / "plan.toml")
    locked = LockedPlan(replace(plan, name=SWEEP_NAME, seeds=[1, 2, 3]), "0" * 16, None, "2024-01-01T00:00:00Z",
                        tuple(members))
    (sweep_dir / "plan.lock.json").write_text(json.dumps(locked.to_json()))
    return runs
