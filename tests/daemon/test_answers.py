"""Answers right in a run: a set whose pairs carry answers (the tiny world's sftHeld, generated
pairs) is asked every pair at every eval; its rate, Wilson interval, per-item verdicts and change vs
step 0 are in the events, the EVAL line (appended last), the status reply and TensorBoard's tags; a
set without answers has none of it (absent, never 0). The logged responses are those a naive greedy
loop gives with the final weights."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest
import scipy.stats
import torch

from tatu.daemon.logs import read_events
from tatu.daemon.run.records import Best, EvalRecord
from tatu.daemon.suite import load_answers
from tatu.data.answers import normalize_answer
from tatu.evals.answers import answer_budget
from tatu.evals.choice import mcnemar_exact
from tatu.evals.sets import load_eval_set
from tatu.model.chat import encode_prompt
from tatu.model.checkpoint import load_checkpoint
from tatu.model.tokenizer import CharTokenizer
from tatu.ops.status import format_status
from tatu.tensorboard.tags import scalars

pytestmark = pytest.mark.slow  # five_sets trains and evaluates a run with 5 sets and a task

CONTRACT = re.compile(r"^EVAL \d+: sftHeld \S+ ptVal \S+ enRuler \S+ drift \S+ drift_tronco \S+ trunk_ok=\S+ "
                      r"best=\S+ \(\d+\.\ds\)")


def evals_of(run_dir):
    return [e for e in read_events(run_dir / "events.jsonl") if e["event"] == "eval"]


def held_items(run_dir):
    data = run_dir.parent.parent / "data"
    return [json.loads(line) for line in (data / "evals" / "sftHeld.jsonl").read_text(encoding="utf-8").splitlines()]


def test_every_held_out_pair_is_answered_at_every_eval_and_only_sets_with_answers_have_a_rate(five_sets):
    pairs = held_items(five_sets)
    evals = evals_of(five_sets)
    assert [e["step"] for e in evals] == [0, 2, 4]
    state = json.loads((five_sets / "state" / "resume.json").read_text())
    baseline = state["answer_baseline"]["sftHeld"]
    assert list(state["answer_baseline"]) == ["sftHeld"]
    for event in evals:
        assert list(event["answers"]) == ["sftHeld"]  # ptVal, enRuler, ptNews, ptLit: text, no answers
        answer = event["answers"]["sftHeld"]
        n, k = len(pairs), answer["correct"].count("1")
        assert answer["n"] == n == len(answer["correct"]) == len(answer["outputs"]) == 20
        assert answer["n_correct"] == k and answer["rate"] == k / n
        ref = scipy.stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
        assert (answer["lo"], answer["hi"]) == pytest.approx((ref.low, ref.high), abs=1e-12)
        # each verdict is the logged response against the file's answer (a response still going is wrong)
        for bit, output, pair in zip(answer["correct"], answer["outputs"], pairs):
            if bit == "1":
                assert normalize_answer(output) == normalize_answer(pair["answer"])
        then, now = np.array([c == "1" for c in baseline]), np.array([c == "1" for c in answer["correct"]])
        test = mcnemar_exact(then, now)
        assert answer["change"] == {"diff": test["diff"], "only_then": test["only_a"], "only_now": test["only_b"],
                                    "p_value": test["p_value"]}
    assert evals[0]["answers"]["sftHeld"]["correct"] == baseline
    assert evals[0]["answers"]["sftHeld"]["change"] == {"diff": 0.0, "only_then": 0, "only_now": 0, "p_value": 1.0}


def test_the_logged_responses_are_a_naive_greedy_loops_with_the_final_weights(five_sets):
    ckpt = load_checkpoint(five_sets / "final")
    model, tok = ckpt.build_model().eval(), ckpt.tokenizer
    pairs = held_items(five_sets)
    last = evals_of(five_sets)[-1]["answers"]["sftHeld"]
    assert evals_of(five_sets)[-1]["step"] == 4 and ckpt.meta["step"] == 4
    from tatu.data.answers import AnswerItem

    budget = answer_budget(tok, [AnswerItem(i, p["prompt"], p["answer"]) for i, p in enumerate(pairs)])
    for pair, output, bit in zip(pairs, last["outputs"], last["correct"]):
        seq, out, ended = encode_prompt(tok, pair["prompt"]), [], False
        with torch.no_grad():
            while len(out) < min(budget, model.config.block_size - len(seq)):
                token = int(model(torch.tensor([seq + out]))[0][0, -1].argmax())
                if token == tok.eos_id:
                    ended = True
                    break
                out.append(token)
        assert tok.decode(out) == output
        assert bit == ("1" if ended and normalize_answer(output) == normalize_answer(pair["answer"]) else "0")


def test_the_eval_line_ends_with_the_rate_and_keeps_its_contract(five_sets):
    lines = [ln[ln.index("EVAL "):] for ln in (five_sets / "run.log").read_text().splitlines()
             if re.search(r"EVAL [0-9]+: ", ln)]
    events = {e["step"]: e for e in evals_of(five_sets)}
    assert len(lines) == 3
    for text in lines:
        assert CONTRACT.match(text), text
        answer = events[int(re.match(r"EVAL (\d+):", text).group(1))]["answers"]["sftHeld"]
        # appended after every field the line had before (the held-out sets' last among them)
        assert text.endswith(f" ptLit_change={text.split('ptLit_change=')[1].split()[0]}"
                             f" sftHeld_exact={answer['rate'] * 100:.1f}%"
                             f" sftHeld_exact_ci=[{answer['lo'] * 100:.1f}%,{answer['hi'] * 100:.1f}%]")
        assert "ptNews_exact" not in text and "ptVal_exact" not in text


def test_status_and_tensorboard_show_the_rate(five_sets, tmp_path):
    from tatu.daemon.config import load_config
    from tatu.daemon.supervisor import Supervisor

    last = evals_of(five_sets)[-1]
    config, origins = load_config({"TATU_RUN": "answers-status", "TATU_DATA": str(tmp_path), "TATU_OUT": str(tmp_path),
                                   "TATU_MODE": "pretrain"})
    supervisor = Supervisor(config, origins)
    supervisor.publish_eval(EvalRecord.from_json(last), Best(4, "sftHeld", 1.0))
    shown = supervisor.status["last_eval"]["answers"]
    answer = last["answers"]["sftHeld"]
    assert shown == {"sftHeld": {k: v for k, v in answer.items() if k not in ("correct", "outputs")}}
    text = format_status(supervisor.status)
    change = answer["change"]
    assert (f"answers sftHeld {answer['n_correct']}/20 right {answer['rate'] * 100:.1f}% "
            f"[{answer['lo'] * 100:.1f}%,{answer['hi'] * 100:.1f}%]") in text
    assert f"vs step 0 {change['diff'] * 100:+.1f}% ({change['only_now']} gained, {change['only_then']} lost" in text
    assert "answers ptNews" not in text

    points = {p.tag: p.value for p in scalars(last)}
    assert (points["exact/sftHeld/value"], points["exact/sftHeld/lo"], points["exact/sftHeld/hi"]) == (
        answer["rate"], answer["lo"], answer["hi"])
    assert not [tag for tag in points if tag.startswith("exact/") and "sftHeld" not in tag]


def test_a_pairs_set_without_answers_has_none(tmp_path):
    tok = CharTokenizer.train(["abc quatro dois"])
    plain, marked = tmp_path / "plain.jsonl", tmp_path / "marked.jsonl"
    plain.write_text('{"prompt": "dois", "response": "quatro"}\n', encoding="utf-8")
    marked.write_text('{"prompt": "dois", "response": "quatro", "answer": "quatro"}\n', encoding="utf-8")
    sets = {name: load_eval_set(path, tok, name=name) for name, path in (("plainHeld", plain), ("sftHeld", marked))}
    assert list(load_answers(sets)) == ["sftHeld"]
    assert EvalRecord.from_json({**evals_record(), "answers": {}}).answers == {}


def evals_record():
    """The smallest eval event a reader takes (an eval record of an older tatu: no `answers`)."""
    change = {"value": 0.0, "lo": 0.0, "hi": 0.0, "p_value": 1.0, "mde": None}
    return {"step": 0, "sets": {}, "drift": change}


def test_an_older_record_without_answers_reads_as_none():
    assert EvalRecord.from_json(evals_record()).answers == {}


@pytest.mark.parametrize("name", ["exact", "Answers"])
def test_the_answer_metrics_words_cannot_name_an_eval_set(name):
    from tatu.formats import eval_name_problem

    assert "collides with a metric name" in eval_name_problem(name)
    assert eval_name_problem("sftHeld") is None
