"""The LR schedule (daemon/trainer.py lr_at) against values written by hand from its spec, and a
restart that changes MIX_STEPS_LIMIT: the cosine keeps the end its state stored (never jumps up),
the steps past it get TATU_MIN_LR, and the restart says so in one line.

The spec: warmup step s (0-based, s < W) gets LR * (s + 1) / W; after it, constant LR, or
MIN + (LR - MIN) / 2 * (1 + cos(pi * p)) with p = (s - W) / (END - W), capped at 1.
"""
from __future__ import annotations

import math

import pytest

from tiny_world import sft_env

from tatu import exitcodes
from tatu.daemon.config import ConfigError, load_config
from tatu.daemon.logs import read_events
from tatu.daemon.main import exit_code_for
from tatu.daemon.main import main as daemon_main
from tatu.daemon.start import lr_schedule_end, lr_schedule_note
from tatu.daemon.trainer import lr_at

LR, MIN_LR = 1e-3, 1e-4


def config(**env):
    base = {"TATU_DATA": "d", "TATU_MODE": "pretrain", "TATU_LR": "1e-3", "TATU_MIN_LR": "1e-4",
            "TATU_WARMUP_STEPS": "4", "MIX_STEPS_LIMIT": "14"}
    return load_config({**base, **{k: str(v) for k, v in env.items()}})[0]


# By hand, warmup 4, end 14 (a cosine span of 10 steps): cos(0.2 pi) = 0.80901699437494745,
# so step 6 (p = 0.2) is 1e-4 + 4.5e-4 * 1.80901699437494745 = 9.1405764746872635e-4; step 9 is
# p = 0.5, the middle: 1e-4 + 4.5e-4 = 5.5e-4; step 11 (p = 0.7, cos = -0.58778525229247314) is
# 1e-4 + 4.5e-4 * 0.41221474770752686 = 2.8549663646838709e-4.
WARMUP = {0: 2.5e-4, 1: 5e-4, 2: 7.5e-4, 3: 1e-3}
COSINE = {4: 1e-3, 6: 9.1405764746872635e-4, 9: 5.5e-4, 11: 2.8549663646838709e-4, 14: 1e-4, 15: 1e-4, 100: 1e-4}


@pytest.mark.parametrize("schedule", ["constant", "cosine"])
def test_warmup_rises_linearly_to_the_lr(schedule):
    cfg = config(TATU_SCHEDULE=schedule)
    assert [lr_at(s, cfg) for s in WARMUP] == pytest.approx(list(WARMUP.values()), rel=1e-12)


def test_constant_holds_the_lr_after_warmup_whatever_the_end():
    cfg = config(TATU_SCHEDULE="constant")
    for step in (4, 9, 13, 14, 100):
        assert lr_at(step, cfg) == LR
        assert lr_at(step, cfg, end=5) == LR


def test_cosine_from_the_lr_to_min_lr_at_the_end_then_min_lr():
    cfg = config(TATU_SCHEDULE="cosine")
    assert [lr_at(s, cfg) for s in COSINE] == pytest.approx(list(COSINE.values()), rel=1e-12)
    # the curve falls step by step, never rises, and ends exactly at TATU_MIN_LR
    curve = [lr_at(s, cfg) for s in range(4, 20)]
    assert all(a >= b for a, b in zip(curve, curve[1:]))
    assert lr_at(14, cfg) == MIN_LR


def test_a_stored_end_decides_the_cosine_not_mix_steps_limit():
    """The run extended to 28 steps keeps its 14-step curve: the same values, then TATU_MIN_LR."""
    extended = config(TATU_SCHEDULE="cosine", MIX_STEPS_LIMIT=28)
    assert [lr_at(s, extended, end=14) for s in COSINE] == pytest.approx(list(COSINE.values()), rel=1e-12)
    assert [lr_at(s, extended, end=14) for s in range(14, 28)] == [MIN_LR] * 14
    # the re-spanned curve (what a restart did before the end was stored) jumps back up: at step 14,
    # p = 10/24, cos = 0.25881904510252074, 1e-4 + 4.5e-4 * 1.25881904510252074 = 6.6646857029613433e-4
    assert lr_at(14, extended) == pytest.approx(6.6646857029613433e-4, rel=1e-12)


def test_an_old_state_continues_the_curve_of_the_limit_it_was_saved_with():
    cfg = config(TATU_SCHEDULE="cosine", MIX_STEPS_LIMIT=28)
    assert lr_schedule_end(20, {"MIX_STEPS_LIMIT": 14}, cfg) == 20  # a stored end wins
    assert lr_schedule_end(None, {"MIX_STEPS_LIMIT": 14}, cfg) == 14
    assert lr_schedule_end(None, {}, config(TATU_SCHEDULE="constant", MIX_STEPS_LIMIT=28)) == 28
    with pytest.raises(ConfigError, match="TATU_SCHEDULE=cosine cannot continue its curve; start a new TATU_RUN") as caught:
        lr_schedule_end(None, {}, cfg)
    assert exit_code_for(caught.value) == exitcodes.BAD_CONFIG


def test_the_restart_line_says_what_the_new_steps_get():
    extended = lr_schedule_note(14, 10, config(TATU_SCHEDULE="cosine", MIX_STEPS_LIMIT=28))
    assert "steps 15-28 get TATU_MIN_LR=0.0001" in extended and "(step 14" in extended
    past = lr_schedule_note(14, 20, config(TATU_SCHEDULE="cosine", MIX_STEPS_LIMIT=28))
    assert "steps 21-28 get TATU_MIN_LR=0.0001" in past
    # shortened from 14 to 9: the last step (0-based 8, p = 0.4, cos = 0.30901699437494742) gets
    # 1e-4 + 4.5e-4 * 1.30901699437494742 = 6.8905764746872634e-4, printed to 3 digits
    shortened = lr_schedule_note(14, 5, config(TATU_SCHEDULE="cosine", MIX_STEPS_LIMIT=9))
    assert "its last step gets LR 0.000689, not TATU_MIN_LR=0.0001" in shortened
    assert lr_schedule_note(14, 5, config(TATU_SCHEDULE="cosine")) is None  # the limit it started with
    assert lr_schedule_note(14, 5, config(TATU_SCHEDULE="constant", MIX_STEPS_LIMIT=28)) is None
    assert lr_schedule_note(14, 9, config(TATU_SCHEDULE="cosine", MIX_STEPS_LIMIT=9)) is None  # nothing left


def step_lrs(run_dir) -> list[tuple[int, float]]:
    return [(e["step"], e["lr"]) for e in read_events(run_dir / "events.jsonl") if e["event"] == "step"]


def test_a_cosine_run_killed_then_extended_keeps_its_curve_and_says_so(tiny_trunk, tmp_path):
    """Killed partway (TATU_FAULT_NAN_STEP: exit 11 at step 5, the state saved at step 4), then
    restarted with MIX_STEPS_LIMIT 6 -> 10: steps 5-6 follow the 6-step cosine as if nothing had
    happened, steps 7-10 get TATU_MIN_LR, and the restart prints the line that says so."""
    settings = dict(TATU_SCHEDULE="cosine", TATU_LR="1e-3", TATU_MIN_LR="1e-4", TATU_WARMUP_STEPS=2,
                    EVAL_EVERY=100, TATU_CKPT_EVERY=2, TATU_GEN_PROMPTS=0)
    run_dir = tmp_path / "run"
    killed = sft_env(tiny_trunk, tmp_path, MIX_STEPS_LIMIT=6, TATU_FAULT_NAN_STEP=5, **settings)
    assert daemon_main(killed) == exitcodes.NONFINITE_LOSS
    assert [s for s, _ in step_lrs(run_dir)] == [1, 2, 3, 4]

    assert daemon_main(sft_env(tiny_trunk, tmp_path, MIX_STEPS_LIMIT=10, **settings)) == 0
    log = (run_dir / "run.log").read_text()
    assert "resumed from step 4" in log
    line = ("MIX_STEPS_LIMIT=10 is past the end of this run's cosine (step 6, its first MIX_STEPS_LIMIT): "
            "the curve is kept, so steps 7-10 get TATU_MIN_LR=0.0001")
    assert log.count(line) == 1

    # A naive formula, independent of lr_at: warmup 2 steps, then a cosine over 6 - 2 = 4 steps.
    def spec(step: int) -> float:  # step is 1-based, as events count them
        s = step - 1
        if s < 2:
            return 1e-3 * (s + 1) / 2
        return 1e-4 + 0.5 * (1e-3 - 1e-4) * (1 + math.cos(math.pi * min(1.0, (s - 2) / 4)))

    # by hand: 5e-4, 1e-3, 1e-3 (p=0), 8.6819805153394640e-4 (p=1/4), 5.5e-4 (p=1/2), 2.3180194846605360e-4 (p=3/4)
    expected = [5e-4, 1e-3, 1e-3, 8.6819805153394640e-4, 5.5e-4, 2.3180194846605360e-4] + [1e-4] * 4
    assert [spec(s) for s in range(1, 11)] == pytest.approx(expected, rel=1e-12)
    lrs = step_lrs(run_dir)
    assert [s for s, _ in lrs] == [1, 2, 3, 4] + list(range(5, 11))
    assert [lr for _, lr in lrs] == pytest.approx(expected, rel=1e-12)
    after = [lr for _, lr in lrs[3:]]  # from the last step before the restart on
    assert all(a >= b for a, b in zip(after, after[1:]))  # never jumps up at or after the restart


# --- the LR the optimizer used ----------------------------------------------------------------
# The step events' `lr` is lr_at's value, not the optimizer's: these read the optimizer itself (its
# param_groups at each optimizer.step) and what it applied (the weights after each step against a
# naive float64 AdamW with the hand-computed LRs and the gradients the step handed it).

def _tiny_trainer(**env):
    import torch

    from tatu.daemon.trainer import Trainer
    from tatu.model.gpt import GPTConfig

    cfg = load_config({"TATU_DATA": "d", "TATU_SEED_CKPT": "s", "TATU_SEED": "3", "TATU_PRECISION": "fp32",
                       "TATU_GRAD_CLIP": "0", "REPLAY_N": "1", **{k: str(v) for k, v in env.items()}})[0]
    return Trainer(cfg, GPTConfig(vocab_size=20, block_size=8, n_layer=1, n_head=2, n_embd=8), torch.device("cpu"))


def _step_batch():
    import numpy as np

    from tatu.data.stream import MicroBatch, StepBatch

    rng = np.random.default_rng(1)
    micro = [MicroBatch(ch, rng.integers(0, 20, (2, 8)), rng.integers(0, 20, (2, 8))) for ch in ("sft", "replay")]
    return StepBatch(micro, {"sft": 16, "replay": 16}, 0.5)


def _naive_adamw(befores, grads, lrs, decays, beta1=0.9, beta2=0.95, eps=1e-8):
    """AdamW (decoupled decay) in float64: each step's weights from the weights it started from
    (the optimizer's own, so float32 rounding does not accumulate), per name."""
    import torch

    m = {n: torch.zeros_like(t, dtype=torch.float64) for n, t in befores[0].items()}
    v = {n: torch.zeros_like(t, dtype=torch.float64) for n, t in befores[0].items()}
    after = []
    for t, (before, g_step, lr) in enumerate(zip(befores, grads, lrs), start=1):
        step = {}
        for n, theta in before.items():
            g = g_step[n].double()
            m[n] = beta1 * m[n] + (1 - beta1) * g
            v[n] = beta2 * v[n] + (1 - beta2) * g * g
            m_hat, v_hat = m[n] / (1 - beta1 ** t), v[n] / (1 - beta2 ** t)
            step[n] = theta.double() * (1 - lr * decays[n]) - lr * m_hat / (v_hat.sqrt() + eps)
        after.append(step)
    return after


# By hand (as in the killed-then-extended test): warmup 2, a cosine ending at step 6 although
# MIX_STEPS_LIMIT is 10 (the end a restart's state stored), TATU_MIN_LR after it.
EXTENDED_COSINE = [5e-4, 1e-3, 1e-3, 8.6819805153394640e-4, 5.5e-4, 2.3180194846605360e-4, 1e-4, 1e-4]
WARMUP_3_CONSTANT = [1e-3 / 3, 2e-3 / 3, 1e-3, 1e-3, 1e-3]


@pytest.mark.parametrize("settings,end,expected", [
    ({"TATU_SCHEDULE": "cosine", "TATU_WARMUP_STEPS": 2, "MIX_STEPS_LIMIT": 10}, 6, EXTENDED_COSINE),
    ({"TATU_SCHEDULE": "constant", "TATU_WARMUP_STEPS": 3, "MIX_STEPS_LIMIT": 5}, None, WARMUP_3_CONSTANT),
])
def test_the_optimizer_applies_the_scheduled_lr_at_each_step(settings, end, expected):
    import torch

    trainer = _tiny_trainer(TATU_LR="1e-3", TATU_MIN_LR="1e-4", **settings)
    if end is not None:
        trainer.lr_schedule_end = end  # what daemon/start.py sets on a restart that changed the limit
    named = list(trainer.model.named_parameters())
    start = {n: p.detach().clone() for n, p in named}
    decays = {n: group["weight_decay"] for group in trainer.optimizer.param_groups
              for p in group["params"] for n, q in named if q is p}
    assert set(decays) == set(start) and set(decays.values()) == {0.1, 0.0}
    used, grads, befores, weights = [], [], [], []
    applied = trainer.optimizer.step

    def spy():
        used.append([group["lr"] for group in trainer.optimizer.param_groups])
        grads.append({n: p.grad.detach().clone() for n, p in named})
        befores.append({n: p.detach().clone() for n, p in named})
        applied()
        weights.append({n: p.detach().clone() for n, p in named})

    trainer.optimizer.step = spy
    batch = _step_batch()
    for step in range(1, len(expected) + 1):
        assert trainer.step(batch, step).lr == pytest.approx(expected[step - 1], rel=1e-12)
    assert len(used) == len(expected)
    for step, lrs in enumerate(used):
        assert lrs == pytest.approx([expected[step]] * 2, rel=1e-12), f"step {step + 1}: the optimizer held {lrs}"
    for step, (found, naive) in enumerate(zip(weights, _naive_adamw(befores, grads, expected, decays)), start=1):
        for n in found:  # float32 rounding of one update: a few parts in 1e7
            assert torch.allclose(found[n].double(), naive[n], rtol=1e-6, atol=1e-9), f"step {step}: {n}"
    # the updates are far larger than the tolerance: another LR at any step would show
    assert max(float((weights[0][n] - start[n]).abs().max()) for n in start) > 1e-4
