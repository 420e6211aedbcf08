"""A sweep's numbers: per-member results, per-configuration statistics over seeds, paired
comparisons with the baseline, the tune stage's choice and the locked rule's verdict.

Everything here is a pure function of the lock, the members' run dirs and checkpoints: the
same files give the same numbers (fixed resampling seeds), however often and by whatever
coordinator the sweep was run. Statistics (tatu.evals.seeds) are on the log scale of the
paired perplexity ratio end/start and shown as relative changes: drift (enRuler) and the
sftHeld change. With a tune stage, sftHeld is judged on its judge half only (odd line
indices); the tune stage chose on the dev half (even ones); the ruler never chooses.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from tatu.evals import seeds as st
from tatu.sweep.coordinator import TERMINAL, member_status, run_dir
from tatu.sweep.backends import UnitState
from tatu.sweep.plan import Member, parse_rule
from tatu.sweep.scores import end_checkpoint, score_checkpoint

RESAMPLES = 2000
HALVES = {"dev": 0, "judge": 1}


def _half(scores: dict, half: str | None) -> tuple[np.ndarray, np.ndarray]:
    nll, tok = np.asarray(scores["nll_sum"]), np.asarray(scores["line_tokens"])
    if half is None:
        return nll, tok
    keep = np.asarray(scores["line_index"]) % 2 == HALVES[half]
    return nll[keep], tok[keep]


def run_lines(result: dict, set_name: str, half: str | None = None) -> st.RunLines:
    nb, tb = _half(result["base"][set_name], half)
    ne, te = _half(result["end"][set_name], half)
    return st.RunLines(nb, tb, ne, te)


def member_result(member: Member, sweep_dir: Path) -> dict:
    """Status, verdict, per-line start/end scores, the worst drift over its evals."""
    from tatu.daemon.logs import read_events

    status = member_status(member, UnitState("absent"))
    directory = run_dir(member)
    result = {"member": member.name, "config": member.config_key, "seed": member.seed, "values": member.values,
              "state": status.state, "verdict": status.verdict}
    if status.state not in ("done", "aborted"):
        return result
    cache = Path(sweep_dir) / "scores"
    result["base"] = score_checkpoint(Path(member.env["TATU_SEED_CKPT"]), member.env, cache)
    result["end"] = score_checkpoint(end_checkpoint(directory), member.env, cache)
    evals = {}
    for event in read_events(directory / "events.jsonl"):
        if event.get("event") == "eval" and event.get("step", 0) > 0:
            evals[event["step"]] = event  # a re-run eval after a kill repeats the same numbers: last wins
    result["steps"] = max(evals) if evals else 0
    result["every_eval_drift"] = max((e["drift"]["value"] for e in evals.values()), default=0.0)
    result["every_eval_drift_hi"] = max((e["drift"]["hi"] for e in evals.values()), default=0.0)
    result["daemon_drift"] = evals[max(evals)]["drift"]["value"] if evals else None
    return result


def _rel(x: float) -> float:
    return math.expm1(x)


def _ci_json(ci: st.SeedCI) -> dict:
    return {"value": _rel(ci.mean), "lo": _rel(ci.lo), "hi": _rel(ci.hi), "log_mean": ci.mean, "se": ci.se,
            "seed_sd": ci.seed_sd, "seed_effect_sd": ci.seed_effect_sd, "within_se": ci.within_se,
            "df": ci.df if math.isfinite(ci.df) else None, "n_seeds": ci.n_seeds,
            "mde": _rel(ci.mde) if math.isfinite(ci.mde) else None}


def _seed_rng(*parts: int) -> np.random.Generator:
    return np.random.default_rng([*parts])


def config_stats(results: list[dict], set_name: str, half: str | None, index: int) -> dict | None:
    usable = [r for r in results if "end" in r]
    if not usable:
        return None
    runs = [run_lines(r, set_name, half) for r in usable]
    est = [r.log_ratio() for r in runs]
    reps = [st.line_replicates([run], RESAMPLES, _seed_rng(index, r["seed"], len(set_name)))[0] for run, r in zip(runs, usable)]
    ci = st.hierarchical_ci(est, reps, n_resamples=RESAMPLES, seed=index)
    z = st.robust_z(est) if len(est) >= 3 else [0.0] * len(est)
    return {**_ci_json(ci), "per_seed": {str(r["seed"]): _rel(e) for r, e in zip(usable, est)},
            "outliers": [{"seed": usable[i]["seed"], "z": z[i]} for i in st.outliers(est)]}


def paired_stats(results: list[dict], baseline: list[dict], set_name: str, half: str | None, index: int) -> dict | None:
    by_seed = {r["seed"]: r for r in baseline if "end" in r}
    pairs = [(by_seed[r["seed"]], r) for r in results if "end" in r and r["seed"] in by_seed]
    if len(pairs) < 2:
        return None
    diffs, reps = [], []
    a_est, b_est = [], []
    for base_r, r in pairs:
        rb, rc = run_lines(base_r, set_name, half), run_lines(r, set_name, half)
        b_rep, c_rep = st.line_replicates([rb, rc], RESAMPLES, _seed_rng(1000 + index, r["seed"], len(set_name)))
        a_est.append(rc.log_ratio())
        b_est.append(rb.log_ratio())
        diffs.append(rc.log_ratio() - rb.log_ratio())
        reps.append(c_rep - b_rep)
    ci = st.hierarchical_ci(diffs, reps, n_resamples=RESAMPLES, seed=1000 + index)
    test = st.paired_t(a_est, b_est)
    sd = float(np.std(diffs, ddof=1))
    return {"diff": ci.mean, "lo": ci.lo, "hi": ci.hi, "p_value": test.p_value, "t": test.t if math.isfinite(test.t) else None,
            "n_seeds": len(pairs), "seed_sd": sd, "seeds_needed": st.seeds_needed(ci.mean, sd)}


def _metrics(stats: dict, results: list[dict]) -> dict:
    """The values a rule's conditions name, for one configuration."""
    drift, change = stats.get("drift"), stats.get("sftHeld")
    usable = [r for r in results if "end" in r]
    out = {"aborted": float(sum(r["state"] == "aborted" for r in results))}
    if drift:
        out.update(drift=drift["value"], drift_lo=drift["lo"], drift_hi=drift["hi"])
    if change:
        out.update(sftHeld_change=change["value"], sftHeld_change_lo=change["lo"], sftHeld_change_hi=change["hi"])
    if usable:
        out["every_eval_drift"] = max(r["every_eval_drift"] for r in usable)
        out["every_eval_drift_hi"] = max(r["every_eval_drift_hi"] for r in usable)
    return out


def _fmt_metric(name: str, value: float) -> str:
    return f"{value:.0f}" if name == "aborted" else f"{value * 100:+.1f}%"


def decide(lock: dict, configs: list[dict]) -> dict:
    """The locked rule over the comparison stage's configurations."""
    rule = parse_rule(lock["rule"], lock["axes"], Path(lock["plan_file"]))
    axis_values = lock["axes"][rule.axis]
    ordered = sorted(configs, key=lambda c: float(c["values"][rule.axis]) if _is_number(c["values"][rule.axis])
                     else axis_values.index(c["values"][rule.axis]), reverse=rule.choose == "largest")
    checks = []
    for config in ordered:
        failed, missing = [], []
        for cond in rule.conditions:
            value = config["metrics"].get(cond.metric)
            if value is None:
                missing.append(cond.metric)
            elif not cond.holds(value, config["effective"]):
                failed.append({"condition": cond.text(), "measured": value, "threshold": cond.threshold(config["effective"]),
                               "shown": _fmt_metric(cond.metric, value)})
        checks.append({"config": config["key"], "value": config["values"][rule.axis], "failed": failed, "missing": missing})
    chosen = next((c for c in checks if not c["failed"] and not c["missing"]), None)
    if chosen:
        line = f"{rule.axis}={chosen['value']}: the {rule.choose} {rule.axis} such that {rule.text.split('such that', 1)[1].strip()}"
    else:
        line = f"no {rule.axis} satisfies the rule ({rule.text})"
    return {"rule": rule.text, "axis": rule.axis, "chosen": chosen and chosen["value"], "line": line,
            "checks": checks, "would_change": _would_change(rule, ordered, checks, chosen)}


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _would_change(rule, ordered: list[dict], checks: list[dict], chosen: dict | None) -> list[str]:
    """What more seeds could settle: a condition failed by its CI bound while its point estimate
    passes, and the paired difference between the chosen value and its neighbour before it."""
    notes = []
    by_key = {c["key"]: c for c in ordered}
    for check in checks:
        if chosen is not None and check is chosen:
            break
        config = by_key[check["config"]]
        for fail in check["failed"]:
            metric = fail["condition"].split()[0]
            base = metric.removesuffix("_hi").removesuffix("_lo")
            stats = config["stats"].get("drift" if base.startswith("drift") and not base.startswith("every") else "sftHeld")
            if not stats or metric == base or base.startswith("every") or base == "aborted":
                continue
            point = stats["value"]
            # On the log scale: the bound must move inside the threshold; a CI half-width over n
            # seeds is about t_{n-1} * sd / sqrt(n) with sd the per-seed spread (line noise included).
            margin = abs(math.log1p(fail["threshold"]) - stats["log_mean"]) if fail["threshold"] > -1 else 0.0
            sd = max(stats["seed_sd"], stats["within_se"])
            passes_point = (point < fail["threshold"]) if metric.endswith("_hi") else (point > fail["threshold"])
            if passes_point and margin > 0 and sd > 0:
                need = next((n for n in range(2, 1001) if st.t_ppf(0.975, n - 1) * sd / math.sqrt(n) < margin), None)
                more = f"about {need - stats['n_seeds']} more seeds" if need else "more than 1000 seeds"
                notes.append(f"{rule.axis}={check['value']}: its {base} point estimate {_fmt_metric(base, point)} passes; "
                             f"{more} would narrow {metric} enough to pass (if the estimate and the spread hold)")
    if chosen is not None:
        # The chosen value against the one just before it (the cheaper dose it beat): is the
        # difference resolved across seeds, and if not, how many seeds would resolve it?
        position = [c["config"] for c in checks].index(chosen["config"])
        if position > 0:
            before, this = by_key[checks[position - 1]["config"]], by_key[chosen["config"]]
            if "results" in before and "results" in this:
                p = paired_stats(this["results"], before["results"], "enRuler", None, 99)
                if p and p["p_value"] > 0.05:
                    more = (f"{max(1, p['seeds_needed'] - p['n_seeds'])} more seeds would resolve it" if p["seeds_needed"]
                            else "more than 1000 seeds would be needed")
                    notes.append(f"{rule.axis}={checks[position - 1]['value']} vs {chosen['value']}: drift difference "
                                 f"not resolved (paired p={p['p_value']:.2f}); {more}")
    return notes


def stage_table(lock: dict, members: list[Member], sweep_dir: Path, stage: str) -> list[dict]:
    """One entry per configuration: its members' results and its statistics over seeds."""
    half_sft = "judge" if lock.get("tune") and stage == "compare" else ("dev" if stage == "tune" else None)
    grouped: dict[str, list[Member]] = {}
    for m in members:
        grouped.setdefault(m.config_key, []).append(m)
    configs = []
    for index, (key, group) in enumerate(grouped.items()):
        results = [member_result(m, sweep_dir) for m in group]
        stats = {"drift": config_stats(results, "enRuler", None, index),
                 "sftHeld": config_stats(results, "sftHeld", half_sft, index)}
        from tatu.daemon.config import load_config

        effective = load_config(group[0].env)[0].to_json()
        configs.append({"key": key, "values": group[0].values, "results": results, "stats": stats,
                        "effective": effective, "half": half_sft})
    for config in configs:
        config["metrics"] = _metrics(config["stats"], config["results"])
    return configs


def add_paired(lock: dict, configs: list[dict]) -> None:
    """Each configuration vs the baseline, paired by seed; Holm over the comparisons, per metric."""
    base_key = _baseline_key(lock, configs)
    baseline = next((c for c in configs if c["key"] == base_key), None)
    if baseline is None:
        return
    others = [c for c in configs if c is not baseline]
    for metric, set_name in (("drift", "enRuler"), ("sftHeld", "sftHeld")):
        found = []
        for index, config in enumerate(others):
            paired = paired_stats(config["results"], baseline["results"], set_name, config["half"], index)
            config.setdefault("paired", {})[metric] = paired
            if paired:
                found.append(paired)
        for paired, adjusted in zip(found, st.holm([p["p_value"] for p in found]) if found else []):
            paired["p_holm"] = adjusted
            paired["n_compared"] = len(found)
    for config in configs:
        config["is_baseline"] = config is baseline


def _baseline_key(lock: dict, configs: list[dict]) -> str | None:
    for config in configs:
        if all(config["values"].get(k) == v for k, v in lock["baseline"].items()):
            return config["key"]
    return None


def select_tuned(sweep_dir: Path, lock: dict, members: list[Member]) -> tuple[str, dict]:
    """The tune value with the lowest mean sftHeld change on the dev half, over the tune seeds.

    Values with an aborted or diverged seed are passed over while another value has none."""
    var = lock["tune"]["var"]
    configs = stage_table(lock, members, sweep_dir, "tune")
    candidates = []
    for config in configs:
        stats = config["stats"]["sftHeld"]
        clean = all(r["state"] == "done" for r in config["results"])
        if stats is not None:
            candidates.append((not clean, stats["log_mean"], config["values"][var], stats))
    if not candidates:
        raise RuntimeError("tune stage: no tune member has a result to choose from")
    candidates.sort(key=lambda c: (c[0], c[1]))
    _, _, value, stats = candidates[0]
    scores = {c[2]: {"dev_change": c[3]["value"], "lo": c[3]["lo"], "hi": c[3]["hi"], "clean": not c[0]} for c in candidates}
    reason = f"mean dev-half sftHeld change {stats['value'] * 100:+.2f}% over {stats['n_seeds']} seeds"
    return value, {"selected_on": "sftHeld dev half (even line indices)", "reason": reason, "scores": scores}


def analyze(sweep_dir: Path) -> dict:
    """Every number of the report, as JSON-able data."""
    from tatu.sweep.lock import members as locked_members
    from tatu.sweep.lock import read_lock

    sweep_dir = Path(sweep_dir)
    lock = read_lock(sweep_dir)
    out = {"name": lock["name"], "question": lock["question"], "rule": lock["rule"], "plan_hash": lock["plan_hash"],
           "seeds": lock["seeds"], "tune": None, "tuned": lock.get("tuned"), "compare": None, "verdict": None}
    if lock.get("tune"):
        out["tune"] = {"var": lock["tune"]["var"], "configs": _strip(stage_table(lock, locked_members(lock, "tune"), sweep_dir, "tune"))}
    compare = locked_members(lock, "compare")
    if compare:
        configs = stage_table(lock, compare, sweep_dir, "compare")
        add_paired(lock, configs)
        complete = all(r["state"] in TERMINAL for c in configs for r in c["results"])
        out["compare"] = {"configs": _strip(configs), "complete": complete}
        out["verdict"] = {**decide(lock, configs), "complete": complete}
    return out


def _strip(configs: list[dict]) -> list[dict]:
    """Drop the per-line scores (they stay in the scores cache) from what the report keeps."""
    return [{**c, "results": [{k: v for k, v in r.items() if k not in ("base", "end")} for r in c["results"]]}
            for c in configs]
