"""The Trainer: model, optimizer, LR schedule and one optimizer step. Pure torch: no logging,
no systemd, no files.

One step is SFT_GE + REPLAY_N micro-batches (the mix) and ONE optimizer update. The loss is
token-weighted over the whole step: the sum of every target token's NLL divided by all the
step's target tokens, so "43% of the tokens are English" also means 43% of the gradient.
`_accumulate` holds that division. Under torchrun (daemon/distributed.py) each rank
backpropagates its share of the step's micro-batches, still divided by the WHOLE step's target
tokens (every rank drew the whole step, so it knows them), and the gradients are summed across
ranks: the same step as a single process's, up to float summation order.
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from dataclasses import dataclass

import torch

from tatu.daemon.config import ConfigError, RunConfig
from tatu.daemon.distributed import SINGLE, World
from tatu.daemon.retention.anchor import Anchor
from tatu.daemon.retention.distill import Distiller
from tatu.data.stream import StepBatch
from tatu.model.adapters import (apply_train_spec, is_adapter_key, merge_state, split_adapter_state, state_sha256,
                                 trainable_parameters, trainable_summary)
from tatu.model.checkpoint import TIED_KEYS, CheckpointError, load_model_state, model_state_for_saving
from tatu.model.gpt import GPT, GPTConfig
from tatu.model.precision import PrecisionError, resolve_precision


def lr_at(step: int, config: RunConfig, end: int | None = None) -> float:
    """Linear warmup, then constant or cosine down to TATU_MIN_LR at step `end` (default MIX_STEPS_LIMIT),
    and TATU_MIN_LR after it. A restarted run passes the end its state stored (RunState.lr_schedule_end)."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    if config.schedule == "constant":
        return config.lr
    span = max(1, (config.mix_steps_limit if end is None else end) - config.warmup_steps)
    progress = min(1.0, (step - config.warmup_steps) / span)
    return config.min_lr + 0.5 * (config.lr - config.min_lr) * (1 + math.cos(math.pi * progress))


@dataclass
class StepStats:
    step: int  # the step just taken (1-based)
    loss: float  # token-weighted mean NLL of the step (nan/inf: the update was not applied)
    lr: float
    target_tokens: dict[str, int]  # channel -> target tokens in this step
    replay_fraction: float  # share of the step's target tokens from replay (every source of it)
    grad_norm: float | None  # before clipping; None when no update was computed
    input_tokens: int  # tokens fed to the model (padding included): what tok/s counts
    seconds: float
    penalty: float | None = None  # TATU_ANCHOR's penalty at the step's starting weights (not in `loss`)
    distill: float | None = None  # TATU_DISTILL's term, token-weighted over the step (not in `loss`)
    # With TATU_ANCHOR on: the gradient norms side by side, the micro-batches' (the loss's, with
    # TATU_DISTILL's term when on) before the penalty's is added, and the penalty's own.
    grad_norm_data: float | None = None
    grad_norm_penalty: float | None = None
    replay_tokens: dict[str, int] | None = None  # with REPLAY_SOURCES: source -> its target tokens in this step
    replay_drawn: dict[str, int] | None = None  # with REPLAY_SOURCES: source -> micro-batches drawn since the start

    @property
    def retention(self) -> dict[str, float]:
        """The step event's retention-term entries, only those that ran (none when both are off)."""
        return {k: v for k, v in (("penalty", self.penalty), ("distill", self.distill),
                                  ("grad_norm_data", self.grad_norm_data),
                                  ("grad_norm_penalty", self.grad_norm_penalty)) if v is not None}

    @property
    def tokens_per_s(self) -> float:
        """Input tokens per second of the step (what `tatu status`, STATUS and the step event show)."""
        return round(self.input_tokens / max(self.seconds, 1e-9), 1)

    @property
    def finite(self) -> bool:
        """Loss and gradient norm finite: otherwise the update was not applied."""
        return math.isfinite(self.loss) and (self.grad_norm is None or math.isfinite(self.grad_norm))

    @property
    def skipped(self) -> bool:
        """No target token in the step: nothing to learn from, the optimizer did not step."""
        return sum(self.target_tokens.values()) == 0


def run_precision(config: RunConfig, device: torch.device):
    """TATU_PRECISION on the device (model/precision.py): bf16 autocast in the step only, the weights
    and the optimizer stay fp32. A precision the device lacks is a configuration error (78)."""
    try:
        return resolve_precision(config.precision, device)
    except PrecisionError as exc:
        raise ConfigError(str(exc)) from None


def build_model(config: RunConfig, gpt_config: GPTConfig, device: torch.device, initial_state: dict | None = None,
                state_source: str = "") -> GPT:
    """The run's model: initialised from TATU_SEED, the seed's (or a resume state's) weights loaded,
    TATU_TRAIN applied, on the device. The run builds it first, so the retention terms are built on it
    before the Trainer that steps it."""
    torch.manual_seed(config.seed)
    model = GPT(gpt_config)
    base, adapters = split_adapter_state(initial_state or {})
    if initial_state is not None:
        load_model_state(model, base, state_source)
    apply_train_spec(model, config.train_spec)  # after the seed's weights: the frozen base is the seed
    if adapters:  # a resume state of a LoRA run: the adapters as trained so far
        _load_adapters(model, adapters, state_source)
    return model.to(device)


class Trainer:
    """The model's steps. `model`: the run's (build_model), else built here from `initial_state`;
    `anchor` / `distiller`: the retention terms (daemon/retention/), given when TATU_ANCHOR /
    TATU_DISTILL are on and never set afterwards."""

    def __init__(self, config: RunConfig, gpt_config: GPTConfig, device: torch.device,
                 initial_state: dict | None = None, state_source: str = "", world: World = SINGLE, *,
                 model: GPT | None = None, anchor: Anchor | None = None, distiller: Distiller | None = None):
        self.config = config
        # Where the LR curve ends: the run's first MIX_STEPS_LIMIT, which a restart restores from its
        # state (a changed limit moves when the run stops, not the curve: daemon/start.py).
        self.lr_schedule_end = config.mix_steps_limit
        self.device = device
        self.world = world
        self.gpt_config = gpt_config
        self.train_spec = config.train_spec
        self.precision = run_precision(config, device)
        if model is None:
            model = build_model(config, gpt_config, device, initial_state, state_source)
        self.model = model
        self.forward_model = world.data_parallel(self.model, device)  # the model itself when alone
        world.seed_rank(config.seed)
        # Only what trains is handed to the optimizer: frozen weights get no moments, in memory or in the state.
        trainable = [p for _, p in trainable_parameters(self.model)]
        self.trainable = trainable
        # The retention terms: the anchor's gradient is added once per step (step), the distillation
        # term joins each distilled micro-batch's loss (_accumulate).
        self.anchor = anchor
        self.distiller = distiller
        decay = [p for p in trainable if p.dim() >= 2]
        no_decay = [p for p in trainable if p.dim() < 2]
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=config.lr, betas=(config.beta1, config.beta2),
        )

    @property
    def summary(self) -> dict:
        """What trains: counts and the one line the log, meta.json and `tatu status` show."""
        return trainable_summary(self.model, self.train_spec)

    def saved_view(self) -> tuple[dict, dict, dict]:
        """What best/ and final/ hold: (plain GPT weights, extra tensor groups, meta additions).

        A LoRA run's weights are merged (every reader loads them as any GPT); the adapter goes beside
        them, with the base it applies to named by sha256 (what `tatu export --format peft` needs)."""
        if self.train_spec.lora is None:
            return model_state_for_saving(self.model), {}, {}
        state = {k: v.detach() for k, v in self.model.state_dict().items() if k not in TIED_KEYS}
        base, adapters = split_adapter_state(state)
        merged = {k: v.contiguous().cpu() for k, v in merge_state(state, self.train_spec.lora.scaling).items()}
        meta = self.adapter_meta()
        meta["adapter"].update(base_sha256=state_sha256(base), base=str(Path(self.config.seed_ckpt).absolute()))
        return merged, {"adapter": {k: v.contiguous().cpu() for k, v in adapters.items()}}, meta

    def adapter_meta(self) -> dict:
        """meta.json's "adapter" of a LoRA run (what a reader needs to merge or export it); {} otherwise."""
        lora = self.train_spec.lora
        if lora is None:
            return {}
        return {"adapter": {"peft_type": "LORA", "rank": lora.rank, "alpha": lora.alpha, "scaling": lora.scaling,
                            "dropout": lora.dropout, "targets": list(lora.targets),
                            "blocks": lora.blocks(self.gpt_config.n_layer), "embeddings_trained": self.train_spec.embeddings}}

    def step(self, batch: StepBatch, step: int) -> StepStats:
        """Optimizer step number `step` (1-based) on `batch`; a non-finite loss is not applied."""
        started = time.perf_counter()
        lr = lr_at(step - 1, self.config, self.lr_schedule_end)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        total_targets = sum(batch.target_tokens.values())  # the whole step's, on every rank
        loss, distill = self._accumulate(self.world.mine(batch.micro_batches), total_targets,
                                         poison=self.config.fault_nan_step == step)
        grad_norm = penalty = data_norm = penalty_norm = None
        if math.isfinite(loss) and total_targets > 0:
            if self.anchor is not None:  # once per step, after every micro-batch (and rank) is summed
                data_norm = self._total_norm()  # read only: the step's arithmetic is the same without it
                penalty = self.anchor.add_gradient()
                penalty_norm = self.anchor.gradient_norm
            grad_norm = self._grad_norm()
            # A finite loss can still give an inf gradient (a huge TATU_LR, TATU_GRAD_CLIP=0):
            # stepping on it would write NaN into every weight it touches.
            if math.isfinite(grad_norm):
                self.optimizer.step()
        return StepStats(step=step, loss=loss, lr=lr, target_tokens=dict(batch.target_tokens),
                         replay_fraction=batch.replay_fraction, grad_norm=grad_norm,
                         input_tokens=sum(m.x.size for m in batch.micro_batches),
                         seconds=time.perf_counter() - started, penalty=penalty, distill=distill,
                         grad_norm_data=data_norm, grad_norm_penalty=penalty_norm,
                         replay_tokens=dict(batch.replay_tokens) or None, replay_drawn=dict(batch.replay_drawn) or None)

    def _grad_norm(self) -> float:
        """The gradients' total L2 norm, clipped to TATU_GRAD_CLIP when that is set (not 0)."""
        if self.config.grad_clip > 0:
            return float(torch.nn.utils.clip_grad_norm_(self.trainable, self.config.grad_clip))
        return self._total_norm()

    @torch.no_grad()
    def _total_norm(self) -> float:
        """The gradients' total L2 norm as they are now (nothing changed)."""
        grads = [p.grad for p in self.trainable if p.grad is not None]
        return float(torch.nn.utils.get_total_norm(grads)) if grads else 0.0

    def _accumulate(self, micro_batches: list, total_targets: int, poison: bool = False) -> tuple[float, float | None]:
        """Backward over this rank's micro-batches, each scaled by 1 / the step's target tokens.

        Returns the step's loss (all ranks') and its distillation term (None when off).
        `poison` (TATU_FAULT_NAN_STEP) makes the loss NaN, for tests."""
        divisor = max(total_targets, 1)
        # Accumulated on the device: one host sync per step, not one per micro-batch.
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        distill_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        for i, micro in enumerate(micro_batches):
            x = torch.from_numpy(micro.x).to(self.device, non_blocking=True)
            y = torch.from_numpy(micro.y).to(self.device, non_blocking=True)
            with self.world.no_sync(self.forward_model, last=i == len(micro_batches) - 1):
                with self.precision.autocast(self.device):
                    logits, nll = self.forward_model(x, y)
                micro_loss = nll.sum()
                if poison:
                    micro_loss = micro_loss * float("nan")
                distilled = None if self.distiller is None else self.distiller.term(micro.channel, x, y, logits)
                if distilled is None:
                    (micro_loss / divisor).backward()
                else:
                    ((micro_loss + distilled) / divisor).backward()
                    distill_sum += distilled.detach().double()
            loss_sum += micro_loss.detach().double()
        if self.distiller is None:
            return self.world.sum(loss_sum).item() / divisor, None
        sums = self.world.sum(torch.stack([loss_sum, distill_sum]))
        return sums[0].item() / divisor, sums[1].item() / divisor


def _load_adapters(model: GPT, adapters: dict, source: str) -> None:
    expected = {k for k in model.state_dict() if is_adapter_key(k)}
    if set(adapters) != expected:
        raise CheckpointError(f"{source}: its LoRA adapters do not fit TATU_TRAIN / TATU_LORA_* "
                              f"(missing {sorted(expected - set(adapters))[:3]}, unexpected {sorted(set(adapters) - expected)[:3]})")
    try:
        model.load_state_dict(adapters, strict=False)
    except RuntimeError as exc:  # a rank that differs from the run's: torch says "size mismatch"
        raise CheckpointError(f"{source}: its LoRA adapters do not fit TATU_LORA_RANK ({str(exc).splitlines()[0]})") from None
