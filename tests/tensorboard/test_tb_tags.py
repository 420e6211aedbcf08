"""Which numbers of an events.jsonl record become which TensorBoard tags (tatu/tensorboard/tags.py),
against the record's fields picked out by hand."""
from __future__ import annotations

from tatu.tensorboard.tags import Scalar, Text, scalars, texts


def _change(value, lo, hi):
    return {"value": value, "lo": lo, "hi": hi, "p_value": 0.01, "mde": 0.02}


def _set(ppl, bpc):
    return {"ppl": ppl, "lo": ppl * 0.9, "hi": ppl * 1.1, "se": 0.1, "bpc": bpc, "bpb": bpc * 0.9, "n_lines": 20,
            "n_lines_total": 20, "n_tokens": 300}


EVAL = {
    "event": "eval", "time": 1.5e9, "step": 8,
    "sets": {"sftHeld": _set(9.07, 3.1), "ptVal": _set(31.2, 4.9), "enRuler": _set(52.1, 5.7), "ptFaq": _set(40.1, 5.2)},
    "changes": {"sftHeld": _change(-0.12, -0.2, -0.05), "ptVal": _change(0.01, -0.01, 0.03),
                "enRuler": _change(0.04, 0.02, 0.06), "ptFaq": _change(0.02, 0.0, 0.04)},
    "drift": _change(0.04, 0.02, 0.06), "drift_tronco": _change(0.15, 0.12, 0.18),
    "tasks": {"numbers": {"n": 10, "acc": {"value": 0.6, "lo": 0.3, "hi": 0.8, "change": None},
                          "acc_norm": {"value": 0.7, "lo": 0.4, "hi": 0.9, "change": None}}},
    "trunk_ok": True, "best": True, "seconds": 1.2, "line": "EVAL 8: ...", "generations": None,
    "categories": {"ptVal": {"NOUN": {"ppl": 12.0, "bpc": 4.0}}},
}


def test_a_step_record_gives_loss_lr_grad_norm_tokens_per_s_and_the_replay_share():
    record = {"event": "step", "time": 1.5e9, "step": 37, "loss": 2.25, "lr": 3e-4, "grad_norm": 0.8,
              "tokens": {"sft": 100, "replay": 50}, "tokens_per_s": 1830.4, "replay_fraction": 1 / 3, "seconds": 0.5,
              "memory": {"rss_mb": 300.0}}
    assert sorted(scalars(record), key=lambda s: s.tag) == [
        Scalar("train/grad_norm", 37, 0.8), Scalar("train/loss", 37, 2.25), Scalar("train/lr", 37, 3e-4),
        Scalar("train/replay_fraction", 37, 1 / 3), Scalar("train/tokens_per_s", 37, 1830.4)]
    skipped = {**record, "grad_norm": None}  # an optimizer step skipped for want of targets has no norm
    assert "train/grad_norm" not in {s.tag for s in scalars(skipped)}


def test_an_eval_record_gives_every_set_every_change_with_its_bounds_drift_both_ways_and_the_tasks():
    expected = {}
    for name, numbers in EVAL["sets"].items():
        expected[f"eval/{name}/ppl"] = numbers["ppl"]
        expected[f"eval/{name}/bpc"] = numbers["bpc"]
    for prefix, change in [("drift", EVAL["drift"]), ("drift_tronco", EVAL["drift_tronco"]),
                           *[(f"change/{n}", c) for n, c in EVAL["changes"].items()]]:
        expected.update({f"{prefix}/value": change["value"], f"{prefix}/lo": change["lo"], f"{prefix}/hi": change["hi"]})
    expected.update({"task/numbers/acc": 0.6, "task/numbers/acc_norm": 0.7})
    got = scalars(EVAL)
    assert {s.step for s in got} == {8}
    assert len(got) == len({s.tag for s in got})  # each tag once
    assert {s.tag: s.value for s in got} == expected


def test_what_is_not_a_finite_number_has_no_point():
    record = {**EVAL, "drift_tronco": None,  # no trunk reference
              "sets": {**EVAL["sets"], "ptVal": {**EVAL["sets"]["ptVal"], "ppl": "inf"}},  # JSON's inf
              "changes": {**EVAL["changes"], "ptFaq": None}}
    tags = {s.tag for s in scalars(record)}
    assert not any(t.startswith("drift_tronco/") or t.startswith("change/ptFaq/") for t in tags)
    assert "eval/ptVal/ppl" not in tags and "eval/ptVal/bpc" in tags
    assert scalars({"event": "step", "step": 1, "loss": True}) == []  # a bool is not a number here


def test_texts_are_the_configuration_the_verdict_and_an_abort_and_nothing_else_is_a_point():
    config = {"event": "config", "time": 1.5e9, "step": 0, "config": {"SFT_GE": 8, "TATU_RUN": "run5"},
              "origins": {"SFT_GE": "env-file", "TATU_RUN": "instance"}}
    (text,) = texts(config)
    assert text.tag == "config" and text.step == 0
    assert text.text.splitlines() == ["    SFT_GE   = 8 [env-file]", "    TATU_RUN = run5 [instance]"]
    verdict = {"event": "verdict", "step": 48, "verdict": "holds", "line": "VERDICT holds: sftHeld -24.9% ..."}
    assert texts(verdict) == [Text("verdict", 48, "VERDICT holds: sftHeld -24.9% ...")]
    assert texts({"event": "abort", "step": 8, "reason": "drift +14.1% > MIX_FORGET_LIMIT 10.0%"}) == [
        Text("abort", 8, "drift +14.1% > MIX_FORGET_LIMIT 10.0%")]
    for record in (config, verdict, {"event": "checkpoint", "step": 3, "reason": "scheduled"}):
        assert scalars(record) == []
    assert texts(EVAL) == []


def test_an_eval_with_a_forecast_gives_its_value_interval_and_crossing_step():
    forecast = {"step": 8, "end": 200, "value": 0.061, "lo": 0.032, "hi": 0.098, "level": 0.9, "limit": 0.08,
                "crossing": {"step": 140, "lo": 110, "hi": None}, "band": [], "n_evals": 3, "lines": True}
    got = {s.tag: s.value for s in scalars({**EVAL, "forecast": forecast})}
    assert {tag: value for tag, value in got.items() if tag.startswith("forecast/")} == {
        "forecast/drift_at_end/value": 0.061, "forecast/drift_at_end/lo": 0.032, "forecast/drift_at_end/hi": 0.098,
        "forecast/crossing_step": 140}
    never = {**forecast, "crossing": {"step": None, "lo": None, "hi": None}}  # not before the end: no point
    assert "forecast/crossing_step" not in {s.tag for s in scalars({**EVAL, "forecast": never})}
    assert not any(s.tag.startswith("forecast/") for s in scalars(EVAL))  # an eval before the third has none
