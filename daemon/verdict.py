"""The verdict, against criteria fixed in the config before the run (seed 000: "o critério
foi escrito antes do resultado").

  forgets      aborted by MIX_FORGET_LIMIT, or drift above the limit at any eval
  holds        sftHeld fell by more than its paired CI (and by more than TATU_VERDICT_MIN_GAIN)
               while drift stayed under the limit at every eval
  flat         both the sftHeld change and the final drift are within resolution (CIs include 0)
  inconclusive anything else (e.g. sftHeld improved but not beyond its CI while drift moved)

A trunk (TATU_MODE=pretrain) is judged on ptVal the same way; it cannot "forget".
"""
from __future__ import annotations

from tatu.daemon.config import RunConfig
from tatu.daemon.evaluation import best_set
from tatu.formats import fmt_pct


def criteria(config: RunConfig) -> dict:
    key = best_set(config.mode)
    return {
        "improve": f"{key} paired CI upper bound < "
                   + (f"-{config.verdict_min_gain * 100:.1f}%" if config.verdict_min_gain else "0")
                   + " vs step 0",
        "forget_limit": f"drift <= {config.mix_forget_limit * 100:.1f}% at every eval"
        + (" (CI lower bound)" if config.mix_forget_ci else ""),
        "flat": f"{key} change CI and final drift CI both include 0",
    }


def judge(history: list[dict], abort_reason: str | None, config: RunConfig) -> dict:
    key = best_set(config.mode)
    if not history:
        return {"verdict": "inconclusive", "reason": "no evaluation ran", "criteria": criteria(config)}
    last = history[-1]
    change = last["changes"].get(key)
    drift = last["drift"]
    trained = [h for h in history if h["step"] > 0] or history  # step 0 is the baseline: drift 0 by definition
    worst = max(trained, key=lambda h: h["drift"]["value"])
    worst_drift = worst["drift"]["value"]
    over_limit = config.mode == "sft" and any(
        (h["drift"]["lo"] if config.mix_forget_ci else h["drift"]["value"]) > config.mix_forget_limit for h in history
    )
    improved = change is not None and change["hi"] < -config.verdict_min_gain
    change_flat = change is not None and change["lo"] <= 0 <= change["hi"]
    drift_flat = drift["lo"] <= 0 <= drift["hi"]
    if abort_reason or over_limit:
        verdict = "forgets"
    elif improved:
        verdict = "holds"
    elif change_flat and drift_flat:
        verdict = "flat"
    else:
        verdict = "inconclusive"
    numbers = {
        "step": last["step"],
        f"{key}_change": change,
        "drift": drift,
        "drift_tronco": last.get("drift_tronco"),
        "worst_drift": worst_drift,
        "worst_drift_step": worst["step"],
        "aborted": abort_reason,
    }
    summary = (
        f"VERDICT {verdict}: {key} {fmt_pct(change['value'] if change else None)} "
        f"[{fmt_pct(change['lo'] if change else None)},{fmt_pct(change['hi'] if change else None)}] "
        f"drift {fmt_pct(drift['value'])} [{fmt_pct(drift['lo'])},{fmt_pct(drift['hi'])}] "
        f"at step {last['step']}; worst drift {fmt_pct(worst_drift)} at step {worst['step']}"
        + (f" (aborted: {abort_reason})" if abort_reason else "")
    )
    return {"verdict": verdict, "line": summary, "numbers": numbers, "criteria": criteria(config)}
