"""Any number of held-out eval sets: a 4th and 5th set are scored at every eval, compared with
step 0 (paired CI, p, MDE) in the events, the EVAL line (after its contract fields), the status
reply and the report; a malformed or metric-colliding name is refused at data build."""
from __future__ import annotations

import json
import re

import pytest

from strict import cannot_run
from tiny_world import HELD_OUT_EXTRA


from tatu.daemon.judge import change
from tatu.daemon.logs import read_events
from tatu.daemon.run.records import Best, EvalRecord
from tatu.daemon.run.state import RunState
from tatu.evals.scoring import compare_results
from tatu.ops import cli
from tatu.ops.report import page as report

pytestmark = pytest.mark.slow  # the module's fixture trains and evaluates a run with 5 sets and a task

EXTRA = HELD_OUT_EXTRA  # conftest.py's five_sets: its data has these after the three roles
CONTRACT = re.compile(r"^EVAL \d+: sftHeld \S+ ptVal \S+ enRuler \S+ drift \S+ drift_tronco \S+ trunk_ok=\S+ "
                      r"best=\S+ \(\d+\.\ds\)")


def test_every_extra_set_is_scored_and_compared_with_step_0_at_every_eval(five_sets):
    evals = [e for e in read_events(five_sets / "events.jsonl") if e["event"] == "eval"]
    assert [e["step"] for e in evals] == [0, 2, 4]
    for event in evals:
        assert list(event["sets"]) == ["sftHeld", "ptVal", "enRuler", *EXTRA]
        for name in EXTRA:
            assert event["sets"][name]["n_lines"] == event["sets"][name]["n_lines_total"] == 12 + EXTRA.index(name)
            assert set(event["changes"][name]) == {"value", "lo", "hi", "p_value", "mde"}
    assert evals[0]["changes"]["ptNews"]["value"] == 0.0
    # the change is the paired ratio of the same lines: recomputed from the stored per-line sums
    state = json.loads((five_sets / "state" / "resume.json").read_text())
    restored = RunState.from_json(state, 200, 7)
    final = evals[-1]
    assert final["changes"]["ptLit"]["value"] == pytest.approx(
        final["sets"]["ptLit"]["ppl"] / restored.baseline["ptLit"].ppl - 1, rel=1e-12)
    baseline = restored.baseline["ptLit"]
    assert compare_results(baseline, baseline).lo == pytest.approx(1.0)  # paired with itself: no width


def test_the_eval_line_keeps_its_contract_and_lists_the_extra_sets_last(five_sets):
    lines = [ln for ln in (five_sets / "run.log").read_text().splitlines() if re.search(r"EVAL [0-9]+: ", ln)]
    assert len(lines) == 3
    events = {e["step"]: e for e in read_events(five_sets / "events.jsonl") if e["event"] == "eval"}
    for line in lines:
        text = line[line.index("EVAL "):]
        assert CONTRACT.match(text), text
        step = int(re.match(r"EVAL (\d+):", text).group(1))
        tail = re.findall(r" (ptNews|ptLit) (\S+) (ptNews|ptLit)_change=(\S+)", text)
        # the held-out sets close what the line held before answers right were appended after them
        before_answers = re.sub(r"( \w+_exact=\S+ \w+_exact_ci=\S+)+$", "", text)
        assert [t[0] for t in tail] == list(EXTRA) and before_answers.endswith(tail[-1][-1])
        for name, ppl, _, pct in tail:
            assert ppl == f"{events[step]['sets'][name]['ppl']:.2f}"
            assert pct == f"{events[step]['changes'][name]['value'] * 100:+.1f}%"


def test_status_carries_every_change_and_the_report_plots_every_set(five_sets, tmp_path):
    from tatu.daemon.supervisor import Supervisor
    from tatu.daemon.config import load_config

    last = [e for e in read_events(five_sets / "events.jsonl") if e["event"] == "eval"][-1]
    config, origins = load_config({"TATU_RUN": "five-status", "TATU_DATA": str(tmp_path), "TATU_OUT": str(tmp_path),
                                   "TATU_MODE": "pretrain"})
    supervisor = Supervisor(config, origins)
    supervisor.publish_eval(EvalRecord.from_json(last), Best(4, "sftHeld", 1.0))
    assert supervisor.status["last_eval"]["changes"]["ptNews"] == last["changes"]["ptNews"]

    out = tmp_path / "report"
    assert cli.main(["report", str(five_sets), "--out", str(out)]) == 0
    for name in EXTRA:
        assert (out / f"{name}.png").stat().st_size > 1000
    page = (out / "index.html").read_text()
    assert f'data-path="eval/4/changes/ptLit/value" data-kind="pct" data-value="{json.dumps(last["changes"]["ptLit"]["value"])}"' in page
    assert 'data-path="eval/2/sets/ptNews/ppl"' in page
    acc = last["tasks"]["numbers"]["acc"]
    assert f'data-path="eval/4/tasks/numbers/acc/value" data-kind="rate" data-value="{json.dumps(acc["value"])}"' in page
    assert f'data-path="eval/4/tasks/numbers/acc/change/p_value" data-kind="p" data-value="{json.dumps(acc["change"]["p_value"])}"' in page



def test_the_report_shows_the_categories_of_every_set(five_sets, tmp_path):
    from tatu.data.tags import tagger_problem

    if tagger_problem("por"):
        cannot_run(tagger_problem("por"))
    last = [e for e in read_events(five_sets / "events.jsonl") if e["event"] == "eval"][-1]
    assert cli.main(["report", str(five_sets), "--out", str(tmp_path / "report")]) == 0
    page = (tmp_path / "report" / "index.html").read_text()
    # the word categories of every set, the held-out ones too, with their paired change
    noun = last["categories"]["ptNews"]["noun"]
    assert f'data-path="eval/4/categories/ptNews/noun/change/value" data-kind="pct" data-value="{json.dumps(noun["change"]["value"])}"' in page
    assert f'data-path="eval/4/categories/ptNews/noun/bpc" data-kind="bpc" data-value="{json.dumps(noun["bpc"])}">{noun["bpc"]:.3f}<' in page


@pytest.mark.parametrize("name, why", [("pt_news", "malformed"), ("1news", "malformed"), ("pt-news", "malformed"),
                                       ("drift", "collides with a metric"), ("Best", "collides with a metric")])
def test_a_bad_eval_name_is_refused_naming_it(tiny_trunk, tmp_path, capsys, name, why):
    src = tiny_trunk["root"] / "sources"
    code = cli.main(["data", "build", "--tokenizer", str(tiny_trunk["root"] / "tokenizer.json"),
                     "--out", str(tmp_path / "data"), "--eval", f"{name}={src / 'pt_val.txt'}"])
    err = capsys.readouterr().err
    assert code == 2 and f"--eval {name}:" in err and why in err
    assert not (tmp_path / "data").exists()


def test_change_of_a_set_with_itself_is_zero_with_a_degenerate_interval(five_sets):
    state = RunState.from_json(json.loads((five_sets / "state" / "resume.json").read_text()), 200, 7)
    from tatu.daemon.config import load_config

    config, _ = load_config({"TATU_RUN": "x", "TATU_DATA": "/nonexistent", "TATU_OUT": "/nonexistent", "TATU_MODE": "pretrain",
                             "TATU_EVAL_RESAMPLES": "200"})
    same = change(state.baseline["ptNews"], state.baseline["ptNews"], config)
    assert same.value == 0.0 and same.lo == pytest.approx(0.0) and same.hi == pytest.approx(0.0)


def test_a_task_is_scored_at_every_eval_and_paired_with_step_0(five_sets):
    from tatu.evals.choice import mcnemar_exact

    evals = [e for e in read_events(five_sets / "events.jsonl") if e["event"] == "eval"]
    state = json.loads((five_sets / "state" / "resume.json").read_text())
    baseline = state["task_baseline"]["numbers"]
    assert len(baseline["correct"]) == 10
    for event in evals:
        task = event["tasks"]["numbers"]
        assert task["n"] == 10 and task["acc"]["lo"] <= task["acc"]["value"] <= task["acc"]["hi"]
        assert set(task["acc_norm"]["change"]) == {"only_a", "only_b", "p_value", "diff"}
    first = evals[0]["tasks"]["numbers"]["acc"]["change"]
    assert (first["only_a"], first["only_b"], first["p_value"]) == (0, 0, 1.0)
    assert evals[0]["tasks"]["numbers"]["acc"]["value"] == pytest.approx(sum(baseline["correct"]) / 10)
    # the change is the McNemar test of the stored step-0 items against the numbers logged since
    last = evals[-1]["tasks"]["numbers"]["acc"]
    assert last["change"]["diff"] == pytest.approx(last["value"] - evals[0]["tasks"]["numbers"]["acc"]["value"])
    assert mcnemar_exact(baseline["correct"], baseline["correct"])["p_value"] == 1.0


def test_tatu_eval_and_compare_score_the_data_dirs_task_as_the_daemon(five_sets, tmp_path, capsys):
    final = five_sets / "final"
    data = five_sets.parent.parent / "data"
    out = tmp_path / "eval.json"
    assert cli.main(["eval", str(final), "--data", str(data), "--json", str(out)]) == 0
    task = json.loads(out.read_text())["tasks"]["numbers"]
    last = [e for e in read_events(five_sets / "events.jsonl") if e["event"] == "eval"][-1]["tasks"]["numbers"]
    assert task["acc"]["value"] == last["acc"]["value"] and task["acc_norm"]["value"] == last["acc_norm"]["value"]
    assert cli.main(["compare", str(final), str(final), "--task", f"numbers={data / 'tasks' / 'numbers.jsonl'}",
                     "--set", f"ptNews={data / 'evals' / 'ptNews.txt'}", "--json", str(tmp_path / "c.json")]) == 0
    rows = json.loads((tmp_path / "c.json").read_text())["tasks"]["numbers"]
    assert rows["acc"]["p_value"] == 1.0 and rows["acc"]["only_a"] == rows["acc"]["only_b"] == 0
