"""A plan's rule judges learning by answers and every protected language (`sftHeld_exact_change_lo > 0
and drift_hi < MIX_FORGET_LIMIT and ptVal_change_hi < MIX_FORGET_LIMIT`); a set the rule names that
the members' data lacks, or a replay source it lacks, is a plan error (78) naming the nearest name
before anything runs; an axis may vary REPLAY_SOURCES (fast: no member runs)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from run_records import config_result, rule_plan
from sweep_world import plan_text

from tatu.exitcodes import BAD_CONFIG
from tatu.records import RelativeChange
from tatu.sweep.errors import SweepError
from tatu.sweep.judge import analysis
from tatu.sweep.judge.records import ConfigStat
from tatu.sweep.judge.verdict import decide
from tatu.sweep.plan.load import load_plan
from tatu.sweep.plan.rule import held_out_set, named_sets, parse_rule

BOTH = "smallest REPLAY_N such that sftHeld_exact_change_lo > 0 and drift_hi < MIX_FORGET_LIMIT and ptVal_change_hi < MIX_FORGET_LIMIT"
AXES = {"REPLAY_N": ["0", "2"]}


def _data(directory: Path) -> Path:
    """A data dir as far as a plan reads it: its manifest (eval sets, channels)."""
    directory.mkdir(parents=True, exist_ok=True)
    text = {"kind": "text", "files": {}}
    manifest = {"format": "tatu-data-1", "channels": {"sft": {"kind": "sft"}, "replay": text, "ptReplay": text},
                "evals": {"sftHeld": {"kind": "pairs", "answers": 20}, "ptVal": {"kind": "text"},
                          "enRuler": {"kind": "text"}, "ptFaq": {"kind": "text"}}}
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory


def _plan(tmp_path: Path, rule: str = BOTH, axes: str | None = None, data: Path | None = None) -> Path:
    _data(tmp_path / "data")
    text = plan_text("both", data or Path("data"), Path("trunk"), rule=rule)
    if axes is not None:
        text = text.replace("[axes]\nREPLAY_N = [0, 2]", f"[axes]\n{axes}").replace("SFT_GE = 2,", "SFT_GE = 2, REPLAY_N = 2,")
    path = tmp_path / "plan.toml"
    path.write_text(text)
    return path


def test_the_rule_names_answers_and_both_languages(tmp_path):
    rule = load_plan(_plan(tmp_path)).rule
    assert [c.metric for c in rule.conditions] == ["sftHeld_exact_change_lo", "drift_hi", "ptVal_change_hi"]
    assert named_sets(rule) == ("sftHeld", "ptVal") and held_out_set("ptVal_change_hi") == "ptVal"


@pytest.mark.parametrize("rule,says", [
    ("smallest REPLAY_N such that drift_hi < 0.1 and ptVall_change_hi < 0.1",
     "names the eval set ptVall, which the data lacks (did you mean ptVal?)"),
    ("smallest REPLAY_N such that ptNews_change_hi < 0.1", "names the eval set ptNews, which the data lacks"),
    ("smallest REPLAY_N such that sftHeldd_exact_change_lo > 0", "(did you mean sftHeld?)"),
    ("smallest REPLAY_N such that ptFaq_exact_change_lo > 0", "ptFaq's answers right (ptFaq_exact_change), but its "
                                                               "pairs carry no answers; sets with answers: sftHeld"),
])
def test_a_set_the_data_lacks_is_a_plan_error_naming_the_nearest_set(tmp_path, rule, says):
    with pytest.raises(SweepError) as excinfo:
        load_plan(_plan(tmp_path, rule))
    assert excinfo.value.code == BAD_CONFIG and says in str(excinfo.value)
    assert "[decision] rule" in str(excinfo.value) and "manifest.json" in str(excinfo.value)


def test_a_plan_whose_data_is_not_built_yet_is_read(tmp_path):
    """Its members' runs refuse the data; the set is checked when the plan is read with it (sweep start)."""
    path = _plan(tmp_path, "smallest REPLAY_N such that ptNews_change_hi < 0.1", data=Path("unbuilt"))
    assert named_sets(load_plan(path).rule) == ("ptNews",)


def test_enrulers_change_is_drift_and_the_refusal_says_so():
    with pytest.raises(SweepError, match="enRuler's change is drift_hi"):
        parse_rule("smallest REPLAY_N such that enRuler_change_hi < 0.1", AXES, Path("plan.toml"))


def test_an_axis_varies_the_replay_sources(tmp_path):
    path = _plan(tmp_path, "smallest REPLAY_N such that drift_hi < 0.1".replace("REPLAY_N", "REPLAY_SOURCES"),
                 axes='REPLAY_SOURCES = ["replay", "replay:0.5,ptReplay:0.5"]')
    plan = load_plan(path)
    members = plan.compare_members(tmp_path / "runs", None)
    assert [m.name for m in members] == ["sources-replay-s1", "sources-replay-s2", "sources-replay0.5-ptReplay0.5-s1",
                                         "sources-replay0.5-ptReplay0.5-s2"]
    assert [m.env["REPLAY_SOURCES"] for m in members[::2]] == ["replay", "replay:0.5,ptReplay:0.5"]


def test_a_replay_source_the_data_lacks_is_a_plan_error_naming_the_nearest_channel(tmp_path):
    path = _plan(tmp_path, "smallest REPLAY_SOURCES such that drift_hi < 0.1",
                 axes='REPLAY_SOURCES = ["replay", "replay:0.5,ptReplai:0.5"]')
    with pytest.raises(SweepError) as excinfo:
        load_plan(path)
    assert excinfo.value.code == BAD_CONFIG
    assert "REPLAY_SOURCES: replay source 'ptReplai' is not a channel of the data (did you mean ptReplay?)" in str(excinfo.value)


def _stat(value: float, lo: float, hi: float) -> ConfigStat:
    return ConfigStat(RelativeChange(value, lo, hi), log_mean=math.log1p(value), se=0.0, seed_sd=0.0, seed_effect_sd=0.0,
                      within_se=0.0, shared_line_se=0.0, interaction_se=0.0, df=None, n_seeds=3, mde=None, parts=None,
                      per_seed={}, outliers=())


def test_the_verdict_refuses_a_configuration_that_loses_portuguese(tmp_path):
    """ptVal's change is measured (sweep/judge/sets.py) and now judged: the configuration whose drift
    holds but whose ptVal rises past the limit fails on ptVal_change_hi, and the next one is chosen."""
    rule = "smallest REPLAY_N such that drift_hi < MIX_FORGET_LIMIT and ptVal_change_hi < MIX_FORGET_LIMIT"
    axes = {"REPLAY_N": ["0", "2", "6"]}
    configs = []
    for n, pt in (("0", (0.30, 0.25, 0.35)), ("2", (0.08, 0.06, 0.12)), ("6", (0.02, 0.0, 0.04))):
        stats = {"drift": _stat(0.0, -0.01, 0.01), "sftHeld": _stat(-0.1, -0.2, -0.05), "ptVal": _stat(*pt)}
        configs.append(config_result(f"replay-n{n}", {"REPLAY_N": n}, (), stats,
                                     metrics=analysis._metrics(stats, ())))
    assert configs[0].metrics["ptVal_change_hi"] == 0.35
    verdict = decide(rule_plan(rule, axes), configs)
    assert verdict.chosen == "6"
    assert [c.failed[0].condition.split()[0] for c in verdict.checks[:2]] == ["ptVal_change_hi", "ptVal_change_hi"]


def test_a_sequential_plan_tests_an_axis_of_sources_in_the_plan_order():
    """`smallest REPLAY_SOURCES` is the first the plan lists that passes (as the fixed verdict orders it):
    the fixed sequence tests them from the last listed (a float() of a word would crash the coordinator)."""
    from tatu.sweep.judge.order import testing_order

    listed = ["replay", "replay:0.5,ptReplay:0.5", "ptReplay"]
    assert testing_order("smallest", listed) == ("ptReplay", "replay:0.5,ptReplay:0.5", "replay")
    assert testing_order("largest", listed) == tuple(listed)
    assert testing_order("smallest", ["0", "10", "2"]) == ("10", "2", "0")  # numbers as before
