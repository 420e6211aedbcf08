"""The same multiple-choice task scored by tatu (tatu.evals.choice) and by lm-evaluation-harness's
own multiple_choice scoring, through the shipped task evals/harness/tatu_choice.yaml on the
exported transformers model: every item's choice log-likelihoods, acc and acc_norm agree.
Real lm-eval and transformers, no network."""
from __future__ import annotations

import json

import pytest

from hf_models import make_world, require_hf

from tatu.data.task_gen import generate_task, language_task
from tatu.evals.choice import read_task, score_task
from tatu.model.checkpoint import load_checkpoint
from tatu.model.hf import export_hf


@pytest.mark.slow
def test_acc_and_acc_norm_agree_with_lm_eval_item_by_item(tmp_path):
    require_hf()
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    from tatu.ops.harness import offline, task_dir

    world = make_world(tmp_path)
    ckpt = load_checkpoint(world["ckpt"]["bpe"])
    hf = export_hf(ckpt, tmp_path / "bpe-hf")
    items = generate_task("arith", 10, 0) + generate_task("numbers", 6, 1) + generate_task("dates", 4, 2)
    items += language_task(world["lines"]["mixed"][:8], world["lines"]["mixed"][16:24], 6, 3)
    task = tmp_path / "task.jsonl"
    task.write_text("".join(json.dumps(i, ensure_ascii=False) + "\n" for i in items), encoding="utf-8")
    ours = score_task(ckpt.build_model(), read_task(task), ckpt.tokenizer)

    offline()
    # tatu conditions every context on BOS; lm-eval's HF model does so with add_bos_token
    lm = HFLM(pretrained=str(hf), dtype="float32", device="cpu", batch_size=8, add_bos_token=True)
    manager = TaskManager(include_path=str(task_dir()), include_defaults=False, metadata={"tatu_task": str(task)})
    out = simple_evaluate(model=lm, tasks=["tatu_choice"], task_manager=manager, log_samples=True)
    samples = sorted(out["samples"]["tatu_choice"], key=lambda s: s["doc_id"])
    assert len(samples) == len(items)
    for sample, loglik, acc, acc_norm in zip(samples, ours.loglik, ours.correct, ours.correct_norm):
        theirs = [float(resp[0]) for resp in sample["filtered_resps"]]
        assert theirs == pytest.approx(list(loglik), abs=1e-4)
        assert (sample["acc"], sample["acc_norm"]) == (float(acc), float(acc_norm))
    results = out["results"]["tatu_choice"]
    assert results["acc,none"] == pytest.approx(ours.correct.mean())
    assert results["acc_norm,none"] == pytest.approx(ours.correct_norm.mean())
