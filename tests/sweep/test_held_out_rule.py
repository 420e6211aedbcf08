"""A sweep's decision rule may name a held-out eval set (`ptNews_change_hi < 0.05`): the plan
accepts it (and refuses a malformed one), the member scores carry that set, the statistics over
seeds and the rule's metrics include it, and the verdict follows it."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from run_records import config_result, member_result, rule_plan
from tiny_world import PT_WORDS, sentences

from tatu.ops import cli
from tatu.sweep.judge import analysis
from tatu.sweep.judge.verdict import decide
from tatu.sweep.errors import SweepError
from tatu.sweep.judge.records import EvalDrifts
from tatu.sweep.plan.rule import held_out_set, parse_rule
from tatu.sweep.judge.scores import score_checkpoint
from tatu.sweep.judge.stats import config_stats

AXES = {"REPLAY_N": ["0", "2"]}
RULE = "smallest REPLAY_N such that drift_hi < MIX_FORGET_LIMIT and ptNews_change_hi < 0.05"


def test_the_rule_accepts_a_held_out_set_and_refuses_a_malformed_name():
    rule = parse_rule(RULE, AXES, Path("plan.toml"))
    assert [held_out_set(c.metric) for c in rule.conditions] == [None, "ptNews"]
    assert held_out_set("sftHeld_change_hi") is None and held_out_set("ptNews_change") == "ptNews"
    with pytest.raises(SweepError, match="unknown metric 'pt_news_change_hi'"):
        parse_rule("smallest REPLAY_N such that pt_news_change_hi < 0.05", AXES, Path("plan.toml"))
    # ptVal's change is judged like a held-out set's (the model's own language); enRuler's is drift and
    # sftHeld's sftHeld_change, their own names, which the refusal gives
    assert held_out_set("ptVal_change_hi") == "ptVal"
    for metric, own in (("enRuler_change", "drift"), ("sftHeld_change_top", None)):
        assert held_out_set(metric) is None
        with pytest.raises(SweepError, match=f"unknown metric '{metric}'" + (f": enRuler's change is {own}" if own else "")):
            parse_rule(f"smallest REPLAY_N such that {metric} < 0.05", AXES, Path("plan.toml"))


@pytest.mark.slow
def test_member_scores_statistics_and_the_verdict_follow_the_named_set(tiny_trunk, tmp_path):
    src = tiny_trunk["root"] / "sources"
    (tmp_path / "news.txt").write_text("\n".join(sentences(PT_WORDS, 10, seed=321)) + "\n", encoding="utf-8")
    data = tmp_path / "data"
    assert cli.main(["data", "build", "--tokenizer", str(tiny_trunk["root"] / "tokenizer.json"), "--out", str(data),
                     "--eval", f"sftHeld={src / 'sft_held.jsonl'}", "--eval", f"enRuler={src / 'en_ruler.txt'}",
                     "--eval", f"ptNews={tmp_path / 'news.txt'}", "--seq-len", "192"]) == 0
    env = {"TATU_DATA": str(data), "TATU_SEED_CKPT": str(tiny_trunk["trunk"]), "TATU_OUT": str(tmp_path),
           "TATU_RUN": "m"}
    scores = score_checkpoint(tiny_trunk["trunk"], env, tmp_path / "cache", ("ptNews",))
    # the sets, and (where Apertium tagged them at data build) their categories as "set/category"
    assert {k for k in scores if "/" not in k} == {"sftHeld", "enRuler", "ptNews"} and len(scores["ptNews"]["nll_sum"]) == 10
    assert {k.split("/")[0] for k in scores if "/" in k} <= {"sftHeld", "enRuler", "ptNews"}
    # two "seeds" whose end is the start with every line's NLL scaled: a known change of the set
    results = []
    for seed, factor in ((1, 1.10), (2, 1.12)):
        end = {name: {**s, "nll_sum": [x * (factor if name == "ptNews" else 1.0) for x in s["nll_sum"]]}
               for name, s in scores.items()}
        results.append(dataclasses.replace(member_result("m", seed, scores, end),
                                           evals=EvalDrifts(0.0, 0.0, 0.0, ((4, 0.0, 0.0),))))
    stats = {"drift": config_stats(results, "enRuler", None, 0),
             "sftHeld": config_stats(results, "sftHeld", None, 0),
             "ptNews": config_stats(results, "ptNews", None, 0)}
    assert stats["ptNews"].change.value > 0.05  # NLL up 10-12% on every line: ppl up by more than 5%
    metrics = analysis._metrics(stats, results)
    assert metrics["ptNews_change_hi"] == stats["ptNews"].change.hi and metrics["ptNews_change"] == stats["ptNews"].change.value
    flat = {**metrics, "ptNews_change": 0.0, "ptNews_change_lo": -0.01, "ptNews_change_hi": 0.01}
    configs = [config_result("REPLAY_N=0", {"REPLAY_N": "0"}, results, stats, metrics=metrics),
               config_result("REPLAY_N=2", {"REPLAY_N": "2"}, results, stats, metrics=flat)]
    verdict = decide(rule_plan(RULE, AXES), configs)
    assert verdict.chosen == "2"
    assert verdict.checks[0].failed[0].condition.startswith("ptNews_change_hi")
