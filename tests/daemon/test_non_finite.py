"""Non-finite numbers end a run cleanly (exit 11) and are never saved: a save refuses a NaN
tensor, an eval of a broken model reports inf, an inf gradient is never stepped on, and a huge
learning rate without clipping exits 11 with the last saved state finite."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch

from tiny_world import all_finite, daemon, sft_env

from tatu.daemon.config import load_config
from tatu.model.checkpoint import NonFiniteTensorError, load_checkpoint, save_checkpoint


def test_save_refuses_a_non_finite_tensor_and_writes_nothing(tiny_trunk, tmp_path):
    seed = load_checkpoint(tiny_trunk["trunk"])
    state = {k: v.clone() for k, v in seed.model_state.items()}
    next(iter(state.values())).view(-1)[0] = float("nan")
    with pytest.raises(NonFiniteTensorError, match="1 tensors are not finite"):
        save_checkpoint(tmp_path / "ckpt", model_state=state, model_config=seed.model_config, tokenizer=seed.tokenizer)
    assert not list(tmp_path.iterdir())


def test_eval_of_a_broken_model_reports_inf_not_an_exception(tiny_trunk):
    from tatu.evals.scoring import evaluate
    from tatu.evals.sets import load_eval_set

    seed = load_checkpoint(tiny_trunk["trunk"])
    manifest = json.loads((tiny_trunk["data"] / "manifest.json").read_text())
    ruler = load_eval_set(tiny_trunk["data"] / manifest["evals"]["enRuler"]["file"], seed.tokenizer, name="enRuler")
    for poison in ("nan", "huge"):
        model = seed.build_model().eval()
        with torch.no_grad():
            for p in model.parameters():
                if poison == "nan":
                    p.fill_(float("nan"))
                else:  # finite weights whose logits are so far apart that exp(mean NLL) overflows
                    p.mul_(1e4)
        result = evaluate(model, ruler, n_resamples=100)
        assert result.ppl == float("inf") and result.ci.hi == float("inf"), poison


@pytest.mark.parametrize("grad_clip", ["0", "1.0"])
def test_an_inf_gradient_is_never_stepped_on(tiny_trunk, grad_clip):
    """A finite loss with an inf gradient (planted by a hook on one weight's gradient)."""
    from tatu.daemon.trainer import Trainer
    from tatu.data.stream import MixedStream

    config, _ = load_config(sft_env(tiny_trunk, Path("unused"), TATU_GRAD_CLIP=grad_clip))
    seed = load_checkpoint(tiny_trunk["trunk"])
    trainer = Trainer(config, seed.model_config, torch.device("cpu"), seed.model_state, "seed")
    stream = MixedStream(config.data, mix=config.mix, micro_batch=config.micro_batch, seq_len=config.seq_len, seed=config.seed)
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    first = next(trainer.model.parameters())
    hook = first.register_hook(lambda grad: grad * float("inf"))
    stats = trainer.step(stream.next_step(), 1)
    hook.remove()
    assert math.isfinite(stats.loss) and not math.isfinite(stats.grad_norm) and not stats.finite
    assert all(torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())  # not stepped
    assert not trainer.optimizer.state  # no moment was touched either
    healthy = trainer.step(stream.next_step(), 1)
    assert healthy.finite and math.isfinite(healthy.grad_norm)
    assert not all(torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())


@pytest.mark.slow
def test_a_huge_lr_without_clipping_exits_11_and_the_saved_state_is_finite(tiny_trunk, tmp_path):
    env = sft_env(tiny_trunk, tmp_path, TATU_LR="10", TATU_GRAD_CLIP=0, MIX_STEPS_LIMIT=60, EVAL_EVERY=2,
                  TATU_CKPT_EVERY=1, TATU_GEN_PROMPTS=0, MIX_FORGET_LIMIT=1)
    proc = daemon(env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 11, out[-3000:]
    assert "Traceback" not in out
    intact = re.search(r"the last saved state \(step (\d+)\) is intact", out)
    assert intact, out[-2000:]
    state = load_checkpoint(tmp_path / "run" / "state")
    assert state.extra_json["resume"]["step"] == int(intact.group(1))
    assert all_finite(state) == []
    # the abort is logged with its exit code, which the run's one view decides by (never by its words)
    from tatu.daemon.run.view import read_run

    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    aborts = [event for event in events if event["event"] == "abort"]
    assert [a["code"] for a in aborts] == [11] and aborts[0]["reason"].startswith("non-finite ")
    view = read_run(tmp_path / "run")
    assert (view.state, view.code, view.ended_by.reason) == ("diverged", 11, aborts[0]["reason"])
    # a restart resumes from it and stops the same way, cleanly (not a crash to restart)
    again = daemon(env)
    assert again.returncode == 11 and "Traceback" not in again.stdout + again.stderr
    view = read_run(tmp_path / "run")
    assert view.state == "diverged" and [e.resumed for e in view.ends] == [True, False]
