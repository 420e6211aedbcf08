"""The retention terms (daemon/retention/) against naive float64 computations written here: the L2-SP and
EWC penalties and their gradients (a loop over every weight), counted once per step whatever the
micro-batches; the Fisher against a per-sequence loop with the same sampled labels; the distillation
KL and its gradient against a plain softmax; and the variables' 78s."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tatu.daemon.config import ConfigError, load_config
from tatu.daemon.retention import fisher as fisher_mod
from tatu.daemon.retention.anchor import Anchor
from tatu.daemon.retention.distill import distill_sum
from tatu.daemon.retention.setup import describe
from tatu.daemon.trainer import Trainer, build_model, run_precision
from tatu.data.stream import IGNORE_INDEX, MicroBatch, StepBatch
from tatu.model.adapters import trainable_parameters
from tatu.model.gpt import GPT, GPTConfig

VOCAB, SEQ = 30, 12
GPT_CONFIG = GPTConfig(vocab_size=VOCAB, block_size=SEQ, n_layer=2, n_head=2, n_embd=16)


def config(**env):
    base = {"TATU_DATA": "d", "TATU_SEED_CKPT": "s", "TATU_SEED": "3", "TATU_LR": "1e-2", "TATU_PRECISION": "fp32",
            "TATU_GRAD_CLIP": "0", "REPLAY_N": "1"}
    return load_config({**base, **{k: str(v) for k, v in env.items()}})[0]


def seed_state() -> dict[str, torch.Tensor]:
    torch.manual_seed(11)
    return {k: v.clone() for k, v in GPT(GPT_CONFIG).state_dict().items() if k != "lm_head.weight"}


def moved(state: dict, scale: float = 0.05) -> dict:
    g = torch.Generator().manual_seed(5)
    return {k: v + scale * torch.randn(v.shape, generator=g) for k, v in state.items()}


def micro_batches(n: int, seed: int = 0) -> list[MicroBatch]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        x = rng.integers(0, VOCAB, (2, SEQ))
        y = rng.integers(0, VOCAB, (2, SEQ))
        y[rng.random((2, SEQ)) > 0.5] = IGNORE_INDEX
        out.append(MicroBatch("sft" if i < n - 1 else "replay", x, y))
    return out


def step_batch(micro: list[MicroBatch]) -> StepBatch:
    targets = {"sft": sum(m.n_targets for m in micro if m.channel == "sft"),
               "replay": sum(m.n_targets for m in micro if m.channel == "replay")}
    return StepBatch(micro, targets, targets["replay"] / sum(targets.values()))


# --- the penalty -------------------------------------------------------------------------------

def naive_penalty(named: list[tuple[str, torch.nn.Parameter]], seed: dict, lam: float, fisher: dict | None):
    """lambda/2 sum F (theta - seed)^2 and its gradient, weight by weight in float64."""
    total, grads = 0.0, {}
    for name, p in named:
        theta, s = p.detach().double().flatten().tolist(), seed[name].double().flatten().tolist()
        f = fisher[name].double().flatten().tolist() if fisher else [1.0] * len(theta)
        total += sum(fi * (a - b) ** 2 for a, b, fi in zip(theta, s, f))
        grads[name] = torch.tensor([lam * fi * (a - b) for a, b, fi in zip(theta, s, f)],
                                   dtype=torch.float64).view(p.shape)
    return lam / 2 * total, grads


@pytest.mark.parametrize("kind,train", [("l2sp", "all"), ("ewc", "all"), ("l2sp", "top:1")])
def test_penalty_and_its_gradient_equal_a_loop_over_the_weights_that_train(kind, train):
    trainer = Trainer(config(TATU_ANCHOR=kind, TATU_ANCHOR_WEIGHT=3, TATU_TRAIN=train), GPT_CONFIG,
                      torch.device("cpu"), moved(seed_state()), "moved")
    named = trainable_parameters(trainer.model)
    g = torch.Generator().manual_seed(2)
    fisher = {n: torch.rand(p.shape, generator=g) for n, p in named} if kind == "ewc" else None
    anchor = Anchor(kind, 3.0, named, seed_state(), fisher)
    expected, grads = naive_penalty(named, seed_state(), 3.0, fisher)
    assert anchor.penalty() == pytest.approx(expected, rel=1e-7)
    value = anchor.add_gradient()
    assert value == pytest.approx(expected, rel=1e-7) and expected > 0  # theta - seed rounds once in float32
    for name, p in named:
        assert torch.allclose(p.grad.double(), grads[name], rtol=1e-6, atol=1e-9), name
    if train == "top:1":  # only the last block and ln_f are anchored: frozen weights get no gradient
        assert {n for n, _ in named} == {n for n in seed_state() if n.startswith(("transformer.h.1.", "transformer.ln_f."))}


def test_the_penalty_is_zero_at_the_seed():
    state = seed_state()
    trainer = Trainer(config(), GPT_CONFIG, torch.device("cpu"), state, "seed")
    assert Anchor("l2sp", 50.0, trainable_parameters(trainer.model), state).penalty() == 0.0


def _step_grads(n_micro: int, anchored: bool) -> dict[str, torch.Tensor]:
    """The gradient a step hands the optimizer (optimizer.step replaced by a copy of .grad)."""
    env = dict(SFT_GE=n_micro - 1, **({"TATU_ANCHOR": "l2sp", "TATU_ANCHOR_WEIGHT": 7} if anchored else {}))
    cfg, cpu = config(**env), torch.device("cpu")
    model = build_model(cfg, GPT_CONFIG, cpu, moved(seed_state()), "moved")
    anchor = Anchor("l2sp", 7.0, trainable_parameters(model), seed_state()) if anchored else None
    trainer = Trainer(cfg, GPT_CONFIG, cpu, model=model, anchor=anchor)
    seen = {}
    trainer.optimizer.step = lambda: seen.update({n: p.grad.clone() for n, p in trainable_parameters(trainer.model)})
    stats = trainer.step(step_batch(micro_batches(n_micro)), 1)
    assert (stats.penalty is not None) == anchored
    return seen


@pytest.mark.parametrize("n_micro", [2, 5])  # SFT_GE=1 and SFT_GE=4 (+ one replay micro-batch)
def test_the_penalty_counts_once_per_step_whatever_the_micro_batches(n_micro):
    plain, anchored = _step_grads(n_micro, False), _step_grads(n_micro, True)
    seed, current = seed_state(), moved(seed_state())
    for name, grad in anchored.items():
        contribution = (grad - plain[name]).double()
        assert torch.allclose(contribution, 7.0 * (current[name] - seed[name]).double(), atol=1e-6), name


# --- the Fisher --------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["true", "empirical"])
def test_fisher_equals_a_per_sequence_loop_with_the_same_labels(kind):
    model = GPT(GPT_CONFIG).double()
    model.load_state_dict({k: v.double() for k, v in seed_state().items()}, strict=False)
    names = [n for n, _ in model.named_parameters()]
    batches = micro_batches(3)
    found = fisher_mod.estimate_fisher(model, names, batches, kind, seed=9, device="cpu")
    generator = torch.Generator().manual_seed(9)  # the labels drawn in the same order
    totals = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
    rows = 0
    for micro in batches:
        x, y = torch.from_numpy(micro.x), torch.from_numpy(micro.y)
        labels = fisher_mod.fisher_labels(model, x, y, kind, generator)
        valid = y != IGNORE_INDEX
        if kind == "empirical":
            assert torch.equal(labels, y)
        else:  # drawn from the seed: nearly never the data's tokens, never where nothing is predicted
            assert (labels[valid] != y[valid]).any() and (labels[~valid] == IGNORE_INDEX).all()
        for row in range(x.size(0)):
            model.zero_grad()
            logits, _ = model(x[row:row + 1])
            logp = torch.log_softmax(logits[0], dim=-1)
            ll = sum(logp[t, labels[row, t]] for t in range(SEQ) if labels[row, t] != IGNORE_INDEX)
            ll.backward()
            for n, p in model.named_parameters():
                totals[n] += p.grad ** 2
            rows += 1
    for n in names:
        assert torch.allclose(found[n].double(), totals[n] / rows, rtol=1e-4, atol=1e-10), n
    assert fisher_mod.summary(found).startswith("Fisher mean ")


def test_fisher_file_round_trips_and_a_changed_file_is_refused(tmp_path):
    from tatu.model.checkpoint import CheckpointError

    fisher = {"a": torch.rand(3, 4), "b": torch.rand(5)}
    sha = fisher_mod.write_fisher(tmp_path, fisher)
    back = fisher_mod.read_fisher(tmp_path, sha).fisher
    assert all(torch.equal(back[k], fisher[k]) for k in fisher)
    fisher_mod.write_fisher(tmp_path, {"a": torch.zeros(3, 4), "b": torch.rand(5)})
    with pytest.raises(CheckpointError, match="fisher.safetensors.*start a new TATU_RUN"):
        fisher_mod.read_fisher(tmp_path, sha)


# --- distillation ------------------------------------------------------------------------------

def naive_kl_sum(student: torch.Tensor, teacher: torch.Tensor, y: torch.Tensor, t: float) -> float:
    total = 0.0
    for b in range(y.size(0)):
        for i in range(y.size(1)):
            if y[b, i] == IGNORE_INDEX:
                continue
            zs, zt = student[b, i].double() / t, teacher[b, i].double() / t
            p = torch.exp(zt) / torch.exp(zt).sum()
            q = torch.exp(zs) / torch.exp(zs).sum()
            total += float((p * (torch.log(p) - torch.log(q))).sum())
    return t * t * total


@pytest.mark.parametrize("t", [1.0, 2.0, 4.5])
def test_distillation_kl_and_its_gradient_equal_a_plain_softmax(t):
    g = torch.Generator().manual_seed(4)
    student = torch.randn(2, 6, VOCAB, generator=g, dtype=torch.float64).requires_grad_(True)
    teacher = torch.randn(2, 6, VOCAB, generator=g, dtype=torch.float64)
    y = torch.randint(0, VOCAB, (2, 6), generator=g)
    y[0, :4] = IGNORE_INDEX
    value = distill_sum(student.double(), teacher, y, t)
    assert float(value.detach()) == pytest.approx(naive_kl_sum(student.detach(), teacher, y, t), rel=1e-5)
    value.backward()
    # d/dz_student of T^2 KL(p || q) = T (q - p) on each target token, 0 elsewhere
    p, q = torch.softmax(teacher / t, -1), torch.softmax(student.detach() / t, -1)
    expected = t * (q - p) * (y != IGNORE_INDEX).unsqueeze(-1)
    assert torch.allclose(student.grad, expected, atol=1e-5)


def test_a_micro_batch_without_targets_adds_exactly_zero():
    logits = torch.randn(2, 5, VOCAB, requires_grad=True)
    y = torch.full((2, 5), IGNORE_INDEX)
    value = distill_sum(logits, torch.randn(2, 5, VOCAB), y, 2.0)
    assert value.item() == 0.0
    value.backward()
    assert torch.equal(logits.grad, torch.zeros_like(logits))


# --- the variables -----------------------------------------------------------------------------

@pytest.mark.parametrize("settings,named", [
    ({"TATU_ANCHOR": "l2sp"}, "TATU_ANCHOR_WEIGHT"),  # on without its weight
    ({"TATU_ANCHOR": "l2sp", "TATU_ANCHOR_WEIGHT": "0"}, "TATU_ANCHOR_WEIGHT"),
    ({"TATU_ANCHOR": "ewc", "TATU_ANCHOR_WEIGHT": "-1"}, "TATU_ANCHOR_WEIGHT"),
    ({"TATU_ANCHOR": "fisher"}, "TATU_ANCHOR"),
    ({"TATU_ANCHOR_WEIGHT": "5"}, "TATU_ANCHOR_WEIGHT"),  # a weight with the anchor off
    ({"TATU_ANCHOR": "l2sp", "TATU_ANCHOR_WEIGHT": "5", "TATU_EWC_BATCHES": "8"}, "TATU_EWC_BATCHES"),
    ({"TATU_ANCHOR": "ewc", "TATU_ANCHOR_WEIGHT": "5", "TATU_EWC_FISHER": "diag"}, "TATU_EWC_FISHER"),
    ({"TATU_ANCHOR": "l2sp", "TATU_ANCHOR_WEIGHT": "5", "TATU_TRAIN": "lora"}, "TATU_TRAIN=lora"),
    ({"TATU_DISTILL": "1"}, "TATU_DISTILL_WEIGHT"),
    ({"TATU_DISTILL": "1", "TATU_DISTILL_WEIGHT": "0.5", "TATU_DISTILL_T": "0"}, "TATU_DISTILL_T"),
    ({"TATU_DISTILL": "1", "TATU_DISTILL_WEIGHT": "0.5", "TATU_DISTILL_T": "-2"}, "TATU_DISTILL_T"),
    ({"TATU_DISTILL_T": "2"}, "TATU_DISTILL_T"),  # a distill variable with distill off
    ({"TATU_DISTILL_ON": "sft"}, "TATU_DISTILL_ON"),
    ({"TATU_DISTILL": "1", "TATU_DISTILL_WEIGHT": "0.5", "REPLAY_N": "0"}, "REPLAY_N=0"),
    ({"TATU_DISTILL": "1", "TATU_DISTILL_WEIGHT": "0.5", "TATU_DISTILL_ON": "sft", "SFT_GE": "0"}, "SFT_GE=0"),
])
def test_bad_seed_term_settings_are_78_naming_the_variable(settings, named):
    with pytest.raises(ConfigError, match=named):
        load_config({"TATU_DATA": "d", "TATU_SEED_CKPT": "s", "REPLAY_N": "1", **settings})


def test_the_lines_say_what_each_term_is():
    record = {"seed_sha256": "cd34" * 16,
              "anchor": {"kind": "ewc", "lambda": 50.0, "fisher": {"batches": 32, "labels": "true", "sha256": "ab12" * 16}},
              "distill": {"on": "replay", "alpha": 0.5, "t": 2.0}}
    assert describe(record) == ("anchor ewc lambda=50 (Fisher: 32 replay micro-batches, true labels, sha256 ab12..); "
                                "distill on replay alpha=0.5 T=2")
    assert describe({"seed_sha256": "cd34" * 16, "anchor": {"kind": "l2sp", "lambda": 0.1}}) == \
        "anchor l2sp lambda=0.1 (seed sha256 cd34..)"


# --- the retention terms inside a real step ---------------------------------------------------------
# The units above check each term alone; these check what Trainer.step hands the optimizer (every
# micro-batch backpropagated, so .grad exists when the penalty is added), against float64 autograd
# of naive formulas on a float64 copy of the model.

def _spied_step(trainer: Trainer, batch: StepBatch):
    """(the gradient the step hands the optimizer, its StepStats): optimizer.step replaced by a copy of .grad."""
    seen = {}
    trainer.optimizer.step = lambda: seen.update({n: p.grad.clone() for n, p in trainable_parameters(trainer.model)})
    stats = trainer.step(batch, 1)
    assert seen, "the step did not reach optimizer.step"
    return seen, stats


def _float64_gpt(state: dict) -> GPT:
    model = GPT(GPT_CONFIG).double()
    model.load_state_dict({k: v.double() for k, v in state.items()}, strict=False)  # the head is tied to wte
    return model


def naive_distill(batch: StepBatch, channels: tuple[str, ...], alpha: float, t: float):
    """alpha * T^2 * KL(softmax(seed / T) || softmax(model / T)), token by token in float64 over the
    micro-batches of `channels` only, divided by ALL the step's target tokens: (value, d value / d weights)."""
    student, teacher = _float64_gpt(moved(seed_state())), _float64_gpt(seed_state())
    total = torch.zeros((), dtype=torch.float64)
    for micro in batch.micro_batches:
        if micro.channel not in channels:
            continue
        x = torch.from_numpy(micro.x)
        zs, _ = student(x)
        with torch.no_grad():
            zt, _ = teacher(x)
        for b in range(x.size(0)):
            for i in range(x.size(1)):
                if micro.y[b, i] == IGNORE_INDEX:
                    continue
                p = torch.softmax(zt[b, i] / t, -1)
                log_q = torch.log_softmax(zs[b, i] / t, -1)
                total = total + (p * (torch.log(p) - log_q)).sum()
    value = alpha * t * t * total / sum(batch.target_tokens.values())
    value.backward()
    return float(value.detach()), {n: p.grad.clone() for n, p in student.named_parameters()}


def _distilling_trainer(on: str | None) -> Trainer:
    from tatu.daemon.retention.setup import build

    env = ({"TATU_DISTILL": 1, "TATU_DISTILL_WEIGHT": 0.7, "TATU_DISTILL_T": 2.5, "TATU_DISTILL_ON": on}
           if on else {})
    cfg, cpu = config(SFT_GE=2, TATU_MICRO_BATCH=2, TATU_SEQ_LEN=SEQ, **env), torch.device("cpu")
    model = build_model(cfg, GPT_CONFIG, cpu, moved(seed_state()), "moved")
    terms = build(cfg.retention, cfg.retention_facts, model, GPT_CONFIG, run_precision(cfg, cpu), seed_state(),
                  None, cpu)  # as the run builds them
    trainer = Trainer(cfg, GPT_CONFIG, cpu, model=model, distiller=terms.distiller if terms is not None else None)
    assert (terms is not None) == (on is not None) and (trainer.distiller is not None) == (on is not None)
    return trainer


@pytest.mark.parametrize("on,channels", [("replay", ("replay",)), ("sft", ("sft",)), ("both", ("sft", "replay"))])
def test_distillation_adds_alpha_t2_kl_of_its_channel_over_all_the_steps_targets(on, channels):
    batch = step_batch(micro_batches(3))  # 2 sft micro-batches, 1 replay
    plain, plain_stats = _spied_step(_distilling_trainer(None), batch)
    distilled, stats = _spied_step(_distilling_trainer(on), batch)
    value, expected = naive_distill(batch, channels, 0.7, 2.5)
    assert stats.loss == pytest.approx(plain_stats.loss, rel=1e-6)  # the step's loss stays the NLL
    largest = max(float(g.abs().max()) for g in expected.values())
    assert largest > 1e-4  # a contribution the float32 step resolves
    for name, grad in distilled.items():
        contribution = grad.double() - plain[name].double()
        assert torch.allclose(contribution, expected[name], rtol=1e-3, atol=1e-4 * largest), name
    # the step event's `distill`: a float32 KL (a difference of p log p and p log q per token) against
    # float64; 1.1e-5 apart under ATEN_CPU_CAPABILITY=avx2, so 1e-4 (alpha or a divisor off is far more)
    assert stats.distill == pytest.approx(value, rel=1e-4) and value > 1e-4


# --- EWC inside the step -----------------------------------------------------------------------

def _anchored_trainer(lam: float | None, fisher: dict | None, clip: float = 0.0) -> Trainer:
    env = {"TATU_GRAD_CLIP": clip, **({"TATU_ANCHOR": "ewc", "TATU_ANCHOR_WEIGHT": lam} if lam else {})}
    cfg, cpu = config(SFT_GE=2, **env), torch.device("cpu")
    model = build_model(cfg, GPT_CONFIG, cpu, moved(seed_state()), "moved")
    anchor = Anchor("ewc", lam, trainable_parameters(model), seed_state(), fisher) if lam else None
    return Trainer(cfg, GPT_CONFIG, cpu, model=model, anchor=anchor)


def _random_fisher() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(8)
    named = trainable_parameters(GPT(GPT_CONFIG))
    return {n: torch.rand(p.shape, generator=g) * 3 for n, p in named}


def test_ewc_in_a_step_adds_lambda_fisher_times_the_distance_to_the_existing_gradient():
    """In a step .grad already holds the micro-batches' gradient (the addcmul_ branch): the sum must
    be that gradient + lambda * F * (theta - seed), not sqrt(lambda F) * (theta - seed)."""
    batch, fisher, lam = step_batch(micro_batches(3)), _random_fisher(), 4.0
    plain, _ = _spied_step(_anchored_trainer(None, None), batch)
    anchored, stats = _spied_step(_anchored_trainer(lam, fisher), batch)
    trainer = _anchored_trainer(lam, fisher)
    value, grads = naive_penalty(trainable_parameters(trainer.model), seed_state(), lam, fisher)
    assert stats.penalty == pytest.approx(value, rel=1e-6) and value > 0
    for name, grad in anchored.items():
        assert torch.allclose(grad.double() - plain[name].double(), grads[name], rtol=1e-5, atol=1e-6), name
        assert not torch.allclose(grads[name], torch.zeros_like(grads[name]))  # lambda F is not 1: the check sees it


def test_ewc_is_added_before_clipping():
    """docs/forgetting.md: the penalty's gradient is part of the step's gradient, so the clip scales
    (NLL gradient + penalty gradient) by clip / its norm, and grad_norm is that sum's norm before clipping."""
    batch, fisher, lam = step_batch(micro_batches(3)), _random_fisher(), 4.0
    plain, _ = _spied_step(_anchored_trainer(None, None), batch)  # unclipped, no penalty
    _, penalty = naive_penalty(trainable_parameters(_anchored_trainer(lam, fisher).model), seed_state(), lam, fisher)
    whole = {n: plain[n].double() + penalty[n] for n in plain}
    norm = math.sqrt(sum(float((g * g).sum()) for g in whole.values()))
    plain_norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in plain.values()))
    clip = norm / 3  # active, and far from the norm of either part alone
    assert abs(norm - plain_norm) > 0.1 * norm
    clipped, stats = _spied_step(_anchored_trainer(lam, fisher, clip=clip), batch)
    for name, grad in clipped.items():
        assert torch.allclose(grad.double(), whole[name] * (clip / norm), rtol=1e-4, atol=1e-7), name
    assert stats.grad_norm == pytest.approx(norm, rel=1e-5)  # the step event's grad_norm: before clipping
