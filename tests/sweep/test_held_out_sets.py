"""Every held-out set (a 4th and a 5th eval set) and every word category in the sweep report, at
the members' ends and at the common step, and a rule naming a held-out set judged at either.

A real sweep: two configurations ending at different steps (MIX_STEPS_LIMIT 4 and 6, a cosine
schedule so they differ before step 4 too), two seeds each, on the tiny world's data rebuilt with
ptNews and enNews and tagged by Apertium at data build. The report's per-configuration means are
recomputed here with plain loops: at the end from the members' re-scored lines (themselves
checked against the daemon's own per-line scores of the same weights), at the common step from
the daemon's per-line files (RUN_DIR/evals/step-N.json), categories included."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from run_records import rule_plan
from strict import cannot_run
from sweep_world import run_through, steps_plan_text
from tiny_world import EN_WORDS, PT_WORDS, sentences

from tatu.data.tags import tagger_problem
from tatu.ops import cli
from tatu.sweep.judge.analysis import analyze
from tatu.sweep.judge.verdict import decide
from tatu.sweep.plan.lock import read_lock
from tatu.sweep.judge.scores import score_checkpoint

pytestmark = pytest.mark.slow

EXTRA = ("ptNews", "enNews")
AXES = {"MIX_STEPS_LIMIT": ["4", "6"]}
RULE = "smallest MIX_STEPS_LIMIT such that ptNews_change_hi < 10 and enNews_change < 10 at the common step"


@pytest.fixture(scope="module")
def sweep(tiny_trunk, tmp_path_factory):
    for code in ("por", "eng"):
        if tagger_problem(code):
            cannot_run(f"no word categories without Apertium: {tagger_problem(code)}")
    root = tmp_path_factory.mktemp("held-out-sweep")
    src = tiny_trunk["root"] / "sources"
    (root / "ptNews.txt").write_text("\n".join(sentences(PT_WORDS, 10, seed=321)) + "\n", encoding="utf-8")
    (root / "enNews.txt").write_text("\n".join(sentences(EN_WORDS, 9, seed=654)) + "\n", encoding="utf-8")
    data = root / "data"
    assert cli.main(["data", "build", "--tokenizer", str(tiny_trunk["root"] / "tokenizer.json"), "--out", str(data),
                     "--text", f"replay={src / 'en_corpus.txt'}", "--sft", f"sft={src / 'sft_train.jsonl'}",
                     "--eval", f"sftHeld={src / 'sft_held.jsonl'}", "--eval", f"ptVal={src / 'pt_val.txt'}",
                     "--eval", f"enRuler={src / 'en_ruler.txt'}",
                     *[a for n in EXTRA for a in ("--eval", f"{n}={root / (n + '.txt')}")], "--seq-len", "192"]) == 0
    plan = root / "held.toml"
    plan.write_text(steps_plan_text("held", data, tiny_trunk["trunk"], RULE))
    run_through(plan, root / "sweeps")
    return root / "sweeps" / "held"


def _log_ratio(start: dict, end: dict) -> float:
    """log(ppl_end / ppl_start) by hand over the lines with a scored token, both scored on the same lines."""
    assert start["line_index"] == end["line_index"]
    nll_s = tok_s = nll_e = tok_e = 0.0
    for i in range(len(start["nll_sum"])):
        if start["line_tokens"][i] == 0:
            continue
        nll_s, tok_s = nll_s + start["nll_sum"][i], tok_s + start["line_tokens"][i]
        nll_e, tok_e = nll_e + end["nll_sum"][i], tok_e + end["line_tokens"][i]
    return nll_e / tok_e - nll_s / tok_s


def _daemon_lines(run: Path, step: int) -> dict:
    """{set or "set/category": lines} straight from the daemon's per-line file of that eval."""
    doc = json.loads((run / "evals" / f"step-{step:06d}.json").read_text())
    out = {}
    for name, s in doc["sets"].items():
        out[name] = {"nll_sum": s["lines"]["nll_sum"], "line_tokens": s["lines"]["n_tokens"], "line_index": s["lines"]["index"]}
    for name, per in doc["categories"].items():
        for category, s in per.items():
            out[f"{name}/{category}"] = {"nll_sum": s["lines"]["nll_sum"], "line_tokens": s["lines"]["n_tokens"],
                                         "line_index": s["lines"]["index"]}
    return out


def _nonzero(lines: dict) -> dict:
    keep = [i for i, n in enumerate(lines["line_tokens"]) if n]
    return {k: [lines[k][i] for i in keep] for k in ("nll_sum", "line_tokens", "line_index")}


@pytest.fixture(scope="module")
def report(sweep):
    data = analyze(sweep)
    lock = read_lock(sweep)
    naive, few = {"end": {}, "common": {}}, set()
    for m in lock.members_of("compare"):
        run = Path(m.env["TATU_OUT"]) / m.run
        base = score_checkpoint(Path(m.env["TATU_SEED_CKPT"]), m.env, sweep / "scores")  # re-scored: equal to the daemon's lines the report reads (CPU fp32)
        end = score_checkpoint(run / "final", m.env, sweep / "scores")
        last = int(m.values["MIX_STEPS_LIMIT"])
        start, at_last, at_4 = _daemon_lines(run, 0), _daemon_lines(run, last), _daemon_lines(run, 4)
        # every held-out set and every category of the sets the sweep compares (ptVal is a role it does not)
        for key in [k for k in at_last if k in EXTRA or ("/" in k and not k.startswith("ptVal/"))]:
            # the re-scored lines are the daemon's of the same weights (step 0: the seed; the last eval: final/)
            for rescored, daemon in ((base, start), (end, at_last)):
                daemon_lines = _nonzero(daemon[key]) if "/" in key else daemon[key]
                assert rescored[key]["line_index"] == daemon_lines["line_index"]
                assert rescored[key]["line_tokens"] == daemon_lines["line_tokens"]
                assert rescored[key]["nll_sum"] == pytest.approx(daemon_lines["nll_sum"], rel=1e-6, abs=1e-6)
            if "/" in key and sum(n > 0 for n in start[key]["line_tokens"]) < 2:
                few.add(key)  # one line of a category holds no CI over lines: the report leaves it out
                continue
            naive["end"][m.config_key, key, m.seed] = _log_ratio(base[key], end[key])
            naive["common"][m.config_key, key, m.seed] = _log_ratio(start[key], at_4[key])
    return data, naive, few


def test_every_held_out_set_and_category_matches_the_naive_means_at_the_end_and_the_common_step(report):
    data, naive, few = report
    configs = {c.key: c for c in data.compare.configs}
    assert set(configs) == {"mix-steps-limit4", "mix-steps-limit6"} and {c.common_step for c in configs.values()} == {4}
    n_categories = 0
    for where in ("end", "common"):
        for (key, name, _), _ in naive[where].items():
            config = configs[key]
            if "/" in name:
                set_name, category = name.split("/")
                got = config.categories_at(where == "common")[set_name][category]
                n_categories += 1
            else:
                got = config.stats_at(where == "common")[name]
            mean = (naive[where][key, name, 1] + naive[where][key, name, 2]) / 2
            assert got.log_mean == pytest.approx(mean, abs=1e-9), (where, key, name)
            assert got.n_seeds == 2 and got.change.lo <= got.change.value <= got.change.hi
            assert got.per_seed["1"] == pytest.approx(math.expm1(naive[where][key, name, 1]), abs=1e-9)
    assert n_categories >= 2 * 2 * 4  # both ends, both configurations, several categories of the five sets
    for config in configs.values():
        assert set(EXTRA) <= set(config.stats) and set(EXTRA) <= set(config.stats_common)
        assert {"ptNews", "enNews", "sftHeld", "enRuler"} <= set(config.categories)
        for key in few:
            set_name, category = key.split("/")
            assert category not in config.categories.get(set_name, {})
            assert category not in config.categories_common.get(set_name, {})


def test_a_rule_naming_a_held_out_set_judges_it_at_the_common_step_and_at_the_end(report):
    data, naive, _ = report
    verdict = data.verdict
    assert verdict.at == "common" and verdict.at_step == 4 and str(verdict.chosen) == "4"
    assert all(not c.missing for c in verdict.checks)
    configs = data.compare.configs
    for where, suffix in (("common", " at the common step"), ("end", "")):
        value = {c.key: math.expm1((naive[where][c.key, "ptNews", 1] + naive[where][c.key, "ptNews", 2]) / 2)
                 for c in configs}
        for c in configs:
            metrics = c.metrics_common if where == "common" else c.metrics
            assert metrics["ptNews_change"] == pytest.approx(value[c.key], abs=1e-9)
            assert metrics["ptNews_change_hi"] == c.stats_at(where == "common")["ptNews"].change.hi
        low, high = sorted(value.values())
        assert low < high, "the two configurations must differ on ptNews for the rule to choose"
        between = (low + high) / 2
        best = min(value, key=value.get)  # the one configuration under the midpoint
        chosen = decide(rule_plan(f"smallest MIX_STEPS_LIMIT such that ptNews_change < {between!r}{suffix}", AXES), configs)
        assert str(chosen.chosen) == best.removeprefix("mix-steps-limit") and chosen.at == where
        failed = [c for c in chosen.checks if c.failed]
        assert failed and failed[0].failed[0].measured == pytest.approx(high, abs=1e-9)


def test_the_report_shows_the_held_out_sets_and_categories_in_text_and_page(sweep, tmp_path):
    from tatu.sweep.report.write import write_report

    _, text, index = write_report(sweep, tmp_path)
    assert "held-out sets (every eval set beyond the three roles)" in text and "word categories (Apertium" in text
    at_common = text.split("at step 4, the last eval step every member reached", 1)[1]
    assert any(line.startswith("mix-steps-limit6  enNews  4 ") for line in at_common.splitlines())
    page = index.read_text(encoding="utf-8")
    for table_id in ("held-out", "categories", "held-out-common", "categories-common"):
        assert f'<table id="{table_id}">' in page
