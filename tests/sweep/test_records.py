"""sweep/judge/records.py: the statistics' records write today's JSON keys in today's order, read back
equal, and report.json's reader takes a report written before it had a format_version."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from run_records import config_result, member_result
from tatu.records import FORMAT_KEY
from tatu.sweep.judge.analysis import add_paired
from tatu.sweep.judge.records import ConfigResult, ConfigStat, EvalDrifts, MemberResult, PairedDiff
from tatu.sweep.judge.sweep_report import REPORT_VERSION, read_report_json, write_report_json
from tatu.sweep.judge.sets import set_stats

# report.json of `python -m tatu.ops.demo --scale tiny --foreground`, written by tatu before
# sweep/judge/records.py existed (no format_version): version 1
V1_REPORT = Path(__file__).resolve().parents[1] / "fixtures" / "sweep" / "report-v1.json"
# the keys, in their order, of the dicts sweep/judge/stats.py built before the records
CONFIG_STAT_KEYS = ["value", "lo", "hi", "log_mean", "se", "seed_sd", "seed_effect_sd", "within_se", "shared_line_se",
                    "interaction_se", "df", "n_seeds", "mde", "parts", "per_seed", "outliers"]
PAIRED_KEYS = ["diff", "lo", "hi", "p_value", "t", "df", "n_seeds", "seed_sd", "mde", "parts", "p_holm", "n_compared",
               "step"]  # the step both sides were compared at (issue 43); "unequal" in its place at unequal ends


def _scores(nll: np.ndarray) -> dict:
    return {"nll_sum": list(nll * 10), "line_tokens": [10] * len(nll), "line_index": list(range(len(nll)))}


def _configs() -> list[ConfigResult]:
    """Two configurations x 4 seeds on 30 shared lines, one seed far from the others (an outlier)."""
    rng = np.random.default_rng(5)
    start = {name: rng.gamma(3.0, 1.0, 30) for name in ("enRuler", "sftHeld")}
    configs = []
    for replay, shift in (("0", 0.08), ("2", 0.03)):
        results = []
        for seed in (1, 2, 3, 4):
            far = 0.5 if seed == 4 else 0.0
            end = {n: start[n] + shift + far + 0.01 * rng.standard_normal() + 0.02 * rng.standard_normal(30)
                   for n in start}
            member = member_result(f"replay-n{replay}", seed, {n: _scores(v) for n, v in start.items()},
                                   {n: _scores(v) for n, v in end.items()}, values={"REPLAY_N": replay})
            results.append(dataclasses.replace(member, verdict="clean", trainable="all", evals=EvalDrifts(
                shift, shift + 0.01, shift, ((4, shift / 2, shift), (8, shift, shift + 0.01)))))
        stats, _ = set_stats(results, None, len(configs))
        configs.append(config_result(f"replay-n{replay}", {"REPLAY_N": replay}, results, stats, categories={},
                                     trainable="all"))
    return add_paired({"REPLAY_N": "0"}, configs)


def test_the_records_round_trip_with_todays_keys_in_todays_order():
    configs = _configs()
    stat = configs[0].stats["drift"]
    assert isinstance(stat, ConfigStat) and stat.outliers and stat.parts is not None
    assert list(stat.to_json()) == CONFIG_STAT_KEYS
    assert ConfigStat.from_json(json.loads(json.dumps(stat.to_json()))) == stat
    paired = configs[1].paired["drift"]
    assert isinstance(paired, PairedDiff) and paired.p_holm is not None
    assert list(paired.to_json()) == PAIRED_KEYS
    assert PairedDiff.from_json(json.loads(json.dumps(paired.to_json()))) == paired
    # before Holm's adjustment there were no such keys, and there are none
    bare = PairedDiff.from_json({k: v for k, v in paired.to_json().items() if k not in ("p_holm", "n_compared", "step")})
    assert list(bare.to_json()) == PAIRED_KEYS[:-3]
    # a paired difference is a log ratio; shown, it is the relative change like every other CI
    assert paired.change.relative().value == pytest.approx(np.expm1(paired.change.value))


def test_the_results_write_the_keys_a_report_held_and_read_back_equal_without_their_lines():
    configs = _configs()
    baseline, other = configs
    assert baseline.is_baseline and baseline.paired is None and other.paired is not None
    member = other.results[0]
    # a member's per-line scores are not in report.json (they stay in the scores cache)
    assert sorted(member.to_json()) == ["config", "daemon_drift", "eval_drifts", "every_eval_drift",
                                        "every_eval_drift_hi", "member", "seed", "state", "steps", "trainable",
                                        "values", "verdict"]
    assert member.has("end") and not MemberResult.from_json(member.to_json()).has("end")
    assert MemberResult.from_json(json.loads(json.dumps(member.to_json()))) == member  # lines do not compare
    # an unfinished member and an interpolated one carry only the keys they had
    waiting = MemberResult(member="m", config="c", seed=1, values={}, state="running", verdict=None)
    assert sorted(waiting.to_json()) == ["config", "member", "seed", "state", "values", "verdict"]
    walked = MemberResult(member="w", config="c-a0.5", seed=1, values={}, state="done", verdict=None,
                          interpolated=True, alpha=0.5, parent="c-s1", steps=8, trainable="none")
    assert sorted(walked.to_json()) == ["alpha", "config", "interpolated", "member", "parent", "seed", "state",
                                        "steps", "trainable", "values", "verdict"]
    assert MemberResult.from_json(walked.to_json()) == walked
    # the baseline has no "paired" key, the other has, and both say whether they are the baseline
    assert "paired" not in baseline.to_json() and baseline.to_json()["is_baseline"] is True
    for config in configs:
        assert ConfigResult.from_json(json.loads(json.dumps(config.to_json()))) == config.without_lines()


def test_a_version_1_report_reads_and_writes_back_the_same_bytes_but_its_version(tmp_path):
    report = read_report_json(V1_REPORT)
    configs = report.compare.configs
    assert all(isinstance(c, ConfigResult) and all(isinstance(r, MemberResult) for r in c.results) for c in configs)
    assert all(isinstance(s, ConfigStat) for c in configs for s in c.stats.values() if s)
    assert any(isinstance(p, PairedDiff) for c in configs for p in (c.paired or {}).values())
    assert [c.is_baseline for c in configs] == [True, False] and configs[0].paired is None
    written = write_report_json(tmp_path, report).read_text()
    assert json.loads(written)[FORMAT_KEY] == REPORT_VERSION
    assert written.replace(f' "{FORMAT_KEY}": {REPORT_VERSION},\n', "") == V1_REPORT.read_text()


def test_a_report_from_a_newer_tatu_is_refused_naming_its_file(tmp_path):
    newer = tmp_path / "report.json"
    newer.write_text(json.dumps({**json.loads(V1_REPORT.read_text()), FORMAT_KEY: REPORT_VERSION + 1}))
    with pytest.raises(ValueError) as refused:
        read_report_json(tmp_path)
    assert str(newer) in str(refused.value) and "\n" not in str(refused.value)
