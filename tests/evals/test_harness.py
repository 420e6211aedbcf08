"""lm-evaluation-harness on an exported tatu model, with the task tatu ships (tatu_rolling):
its bits_per_byte equals tatu's where the rules match, and differs exactly as documented where
they do not (a line longer than the context). Real lm-eval and transformers, no network."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch

from hf_models import BLOCK, make_world, require_hf

from tatu.evals.scoring import evaluate
from tatu.evals.sets import load_eval_set
from tatu.model.checkpoint import load_checkpoint
from tatu.model.hf import export_hf
from tatu.ops.harness import MATCH_TOL


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    require_hf()
    from tatu.ops.harness import make_lm

    root = tmp_path_factory.mktemp("harness")
    w = make_world(root)
    w["hf"] = export_hf(load_checkpoint(w["ckpt"]["bpe"]), root / "bpe-hf")
    w["lm"] = make_lm(w["hf"], "cpu", batch_size=4)
    w["tatu"] = load_checkpoint(w["ckpt"]["bpe"])
    return w


def tatu_result(world, name):
    ckpt = world["tatu"]
    return evaluate(ckpt.build_model(), load_eval_set(world["files"][name], ckpt.tokenizer, name=name), n_resamples=100)


def lm_eval_rule_nll(model, bos: int, tokens: list[int], block: int) -> float:
    """A naive float64 reference of lm-eval's rolling windows (its documented rule): the first window
    is BOS + tokens[:block-1] predicting tokens[:block]; each later window predicts the next up-to-block
    tokens, fed the `block` tokens before each prediction as context."""
    total = 0.0
    with torch.inference_mode():
        def score(inputs, n_predicted, targets):
            logits, _ = model(torch.tensor([inputs]))
            logp = torch.log_softmax(logits[0, -n_predicted:].double(), dim=-1)
            return -float(logp[torch.arange(n_predicted), torch.tensor(targets)].sum())

        first = min(block, len(tokens))
        total += score([bos] + tokens[: first - 1], first, tokens[:first])
        done = first
        while done < len(tokens):
            n = min(block, len(tokens) - done)
            end = done + n
            total += score(tokens[max(0, end - block - 1) : end - 1], n, tokens[end - n : end])
            done = end
    return total


def test_matched_rule_lm_eval_bits_per_byte_equals_tatu_bpb_to_1e6(world):
    from tatu.ops.harness import score_with_lm_eval, word_count

    ours = tatu_result(world, "short")
    theirs = score_with_lm_eval(world["lm"], world["files"]["short"])
    assert theirs["bits_per_byte"] == pytest.approx(ours.bpb, abs=1e-6)
    assert theirs["byte_perplexity"] == pytest.approx(2.0 ** ours.bpb, rel=1e-6)
    words = sum(word_count(line) for line in world["lines"]["short"])
    assert theirs["word_perplexity"] == pytest.approx(math.exp(ours.scores.nll_sum.sum() / words), rel=1e-5)
    assert len(theirs["line_loglikelihood"]) == len(ours.scores)
    for nll, ll in zip(ours.scores.nll_sum, theirs["line_loglikelihood"]):
        assert -ll == pytest.approx(nll, abs=1e-4)


def test_long_lines_follow_lm_evals_own_rule_and_differ_from_tatus(world):
    """The documented difference, measured: on lines longer than the context lm-eval's numbers
    equal a naive reference of ITS windowing, and tatu's do not equal lm-eval's."""
    from tatu.ops.harness import score_with_lm_eval

    ckpt = world["tatu"]
    model = ckpt.build_model().eval()
    ours = tatu_result(world, "long")
    theirs = score_with_lm_eval(world["lm"], world["files"]["long"])
    n_bytes = sum(len(line.encode("utf-8")) for line in world["lines"]["long"])
    reference = [lm_eval_rule_nll(model, ckpt.tokenizer.bos_id, ckpt.tokenizer.encode(line), BLOCK)
                 for line in world["lines"]["long"]]
    for ll, ref in zip(theirs["line_loglikelihood"], reference):
        assert -ll == pytest.approx(ref, abs=1e-4)
    assert theirs["bits_per_byte"] == pytest.approx(sum(reference) / math.log(2) / n_bytes, abs=1e-6)
    # lm-eval's last windows see more context: beyond the matched tolerance, line by line and in total
    assert max(abs(nll + ll) for nll, ll in zip(ours.scores.nll_sum, theirs["line_loglikelihood"])) > 1e-2
    assert abs(theirs["bits_per_byte"] - ours.bpb) > 10 * MATCH_TOL


def test_the_task_reads_lines_by_tatus_rule(world, tmp_path):
    from tatu.evals.harness.tatu_task import load_set

    messy = tmp_path / "messy.txt"
    messy.write_bytes("first\r\n\n   \nsecond\u2028still second\nthird".encode("utf-8"))
    rows = load_set(tatu_set=str(messy), pretrained="ignored")["test"]
    assert rows["text"] == ["first", "second\u2028still second", "third"]
    assert rows["text"] == [line.text for line in load_eval_set(messy, world["tatu"].tokenizer).lines]
    with pytest.raises(ValueError, match="only text eval sets"):
        load_set(tatu_set=str(tmp_path / "pairs.jsonl"))
    with pytest.raises(ValueError, match="tatu_set"):
        load_set()


def run_cli(args, **env):
    return subprocess.run([sys.executable, "-m", "tatu.ops.cli", *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **env})


@pytest.mark.slow
def test_tatu_eval_harness_shows_both_and_flags_where_rules_differ(world, tmp_path):
    pairs = tmp_path / "held.jsonl"
    pairs.write_text(json.dumps({"prompt": "Quanto é 2 + 2?", "response": "4"}) + "\n", encoding="utf-8")
    out = tmp_path / "h.json"
    proc = run_cli(["eval", str(world["ckpt"]["bpe"]), "--harness", "--set", f"short={world['files']['short']}",
                    "--set", f"long={world['files']['long']}", "--set", f"held={pairs}", "--json", str(out)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "held: skipped" in proc.stderr
    assert "no confidence interval" in proc.stdout
    rows = {r["name"]: r for r in json.loads(out.read_text())["sets"]}
    assert set(rows) == {"short", "long"}
    assert rows["short"]["matched"] and rows["short"]["agrees"]
    assert abs(rows["short"]["tatu_bpb"] - rows["short"]["lm_eval_bpb"]) <= 1e-6
    assert not rows["long"]["matched"] and rows["long"]["n_long"] == len(world["lines"]["long"])
    assert "differs: 4 lines exceed the 48-token context" in proc.stdout


@pytest.mark.slow
def test_the_documented_lm_eval_command_runs_the_shipped_task_offline(world, tmp_path):
    from tatu.ops.harness import task_dir

    proc = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "lm_eval"), "--model", "hf",
         "--model_args", f"pretrained={world['hf']},dtype=float32", "--tasks", "tatu_rolling",
         "--include_path", str(task_dir()), "--metadata", json.dumps({"tatu_set": str(world["files"]["short"])}),
         "--device", "cpu", "--output_path", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(next((tmp_path / "out").rglob("results_*.json")).read_text())["results"]["tatu_rolling"]
    assert results["bits_per_byte,none"] == pytest.approx(tatu_result(world, "short").bpb, abs=1e-6)


def test_reconcile_flags_a_disagreement_where_the_rules_match(world, tmp_path):
    """The other direction: lm-eval run on a subtly broken export (one layer's Conv1D weight in the
    wrong layout) must not pass as agreeing with tatu."""
    from safetensors.torch import load_file, save_file

    from tatu.ops.harness import make_lm, reconcile, score_with_lm_eval

    broken = export_hf(world["tatu"], tmp_path / "broken")
    state = load_file(broken / "model.safetensors")
    w = state["transformer.h.1.attn.c_proj.weight"]
    state["transformer.h.1.attn.c_proj.weight"] = w.t().contiguous()  # square: same shape, wrong layout
    save_file(state, broken / "model.safetensors", metadata={"format": "pt"})
    ckpt = world["tatu"]
    eval_set = load_eval_set(world["files"]["short"], ckpt.tokenizer, name="short")
    good = reconcile("short", eval_set, tatu_result(world, "short"), score_with_lm_eval(world["lm"], world["files"]["short"]), BLOCK)
    bad = reconcile("short", eval_set, tatu_result(world, "short"),
                    score_with_lm_eval(make_lm(broken, "cpu", 4), world["files"]["short"]), BLOCK)
    assert good.matched and good.agrees
    assert bad.matched and not bad.agrees and bad.max_line_nll_diff > 1e-3
