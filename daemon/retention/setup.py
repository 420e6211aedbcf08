"""The run's retention terms from their section of the config: built at the start on the run's model
and given to the Trainer as it is built (daemon/loop.py), checked on a restart, described.

A new run takes the seed's weights from its start (TATU_SEED_CKPT, already loaded) and, for EWC,
estimates the Fisher before the run dir is written (the file follows once the run dir exists:
`write_pending`). A restart reads TATU_SEED_CKPT again (the resume state holds the trained weights,
not the seed's) and refuses a seed whose sha256 is not the one recorded (65); EWC loads the Fisher
file its state names. What the run records (`record`) goes into the resume state and meta.json;
`line` is what the start lines, `tatu status` and the report say.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from tatu.daemon.retention import fisher as fisher_mod
from tatu.daemon.retention.anchor import Anchor
from tatu.daemon.retention.distill import Distiller
from tatu.daemon.retention.spec import RetentionConfig, RunFacts
from tatu.data.stream import MixedStream
from tatu.model.adapters import state_sha256, trainable_parameters
from tatu.model.checkpoint import CheckpointError
from tatu.model.hf import load_checkpoint_or_gpt2

DISTILL_CHANNELS = {"replay": ("replay",), "sft": ("sft",), "both": ("sft", "replay")}


@dataclass
class RetentionTerms:
    record: dict  # {"seed_sha256", "anchor"?: {...}, "distill"?: {...}}: the resume state's and meta.json's
    notes: list[str] = field(default_factory=list)  # the start lines beyond `line` (Fisher summary, costs)
    pending_fisher: dict[str, torch.Tensor] | None = None  # a new run's Fisher, written once the run dir exists
    anchor: Anchor | None = None  # given to the Trainer (daemon/trainer.py) when it is built
    distiller: Distiller | None = None

    @property
    def line(self) -> str:
        return describe(self.record)

    def write_pending(self, run_dir) -> None:
        """A new EWC run's Fisher file, and its sha256 into the record (before the first resume state)."""
        if self.pending_fisher is not None:
            self.record["anchor"]["fisher"]["sha256"] = fisher_mod.write_fisher(run_dir, self.pending_fisher)
            self.pending_fisher = None


def describe(record: dict) -> str:
    """`anchor ewc lambda=50 (Fisher: 32 replay micro-batches, true labels, sha256 ab12..)`; `distill on replay alpha=0.5 T=2`."""
    parts = []
    anchor = record.get("anchor")
    if anchor:
        fisher = anchor.get("fisher")
        source = (f"Fisher: {fisher['batches']} replay micro-batches, {fisher['labels']} labels, "
                  f"sha256 {(fisher.get('sha256') or 'pending')[:4]}.." if fisher else
                  f"seed sha256 {record['seed_sha256'][:4]}..")
        parts.append(f"anchor {anchor['kind']} lambda={anchor['lambda']:g} ({source})")
    distill = record.get("distill")
    if distill:
        parts.append(f"distill on {distill['on']} alpha={distill['alpha']:g} T={distill['t']:g}")
    return "; ".join(parts)


def build(section: RetentionConfig, run: RunFacts, model, gpt_config, precision, start_weights: dict | None,
          saved: dict | None, device) -> RetentionTerms | None:
    """The run's terms from their section, built on its model before the Trainer is (which is given `anchor` and `distiller`);
    None when neither is on. `model`: the run's, TATU_TRAIN applied; `saved`: a restart's record."""
    if not section.on:
        return None
    seed_state = start_weights if saved is None else _seed_again(run, saved["seed_sha256"])
    built = RetentionTerms(record={"seed_sha256": saved["seed_sha256"] if saved else state_sha256(seed_state)})
    if section.anchor != "none":
        fisher = _fisher(section, run, model, saved, built, device) if section.anchor == "ewc" else None
        built.anchor = Anchor(section.anchor, section.anchor_weight, trainable_parameters(model), seed_state, fisher)
        built.record["anchor"] = {"kind": section.anchor, "lambda": section.anchor_weight}
        if fisher is not None:  # sha256: the saved one, or set when a new run writes the file
            built.record["anchor"]["fisher"] = (saved["anchor"]["fisher"] if saved else
                                                {"batches": section.ewc_batches, "labels": section.ewc_fisher,
                                                 "file": fisher_mod.FISHER_FILE, "sha256": None})
    if section.distill:
        distiller = built.distiller = Distiller(gpt_config, seed_state, DISTILL_CHANNELS[section.distill_on],
                                                section.distill_weight, section.distill_t, precision, device)
        built.record["distill"] = {"on": section.distill_on, "alpha": section.distill_weight, "t": section.distill_t}
        seconds = distiller.time_one_forward(run.micro_batch, run.seq_len)
        per_step = sum(n for ch, n in run.mix.items() if ch in distiller.channels)
        built.notes.append(f"distill: a frozen copy of the seed, {distiller.memory_bytes / 2**20:.1f} MiB in "
                           f"{precision.name}; {seconds * 1e3:.1f} ms per seed forward x {per_step} distilled "
                           f"micro-batches per step")
    return built


def _seed_again(run: RunFacts, sha256: str) -> dict:
    """The seed's weights on a restart, refused (65) when TATU_SEED_CKPT no longer holds the run's seed."""
    state = load_checkpoint_or_gpt2(run.seed_ckpt).plain_state()
    found = state_sha256(state)
    if found != sha256:
        raise CheckpointError(f"TATU_SEED_CKPT {run.seed_ckpt}: weights sha256 {found[:12]} are not the seed "
                              f"this run started from ({sha256[:12]}), which TATU_ANCHOR / TATU_DISTILL need; "
                              f"restore it, or start a new TATU_RUN")
    return state


def _fisher(section: RetentionConfig, run: RunFacts, model, saved: dict | None, built: RetentionTerms,
            device) -> dict[str, torch.Tensor]:
    if saved is not None:  # never recomputed: the file the resume state names, verified
        found = fisher_mod.read_fisher(run.run_dir, saved["anchor"]["fisher"]["sha256"]).fisher
    else:
        stream = MixedStream(run.data, mix={"replay": 1}, micro_batch=run.micro_batch, seq_len=run.seq_len,
                             seed=run.seed, replay_sources=run.replay_sources)
        batches = [stream.next_step().micro_batches[0] for _ in range(section.ewc_batches)]
        names = [n for n, _ in trainable_parameters(model)]
        found = fisher_mod.estimate_fisher(model, names, batches, section.ewc_fisher, run.seed, device)
        model.train()
        built.pending_fisher = found
    built.notes.append(fisher_mod.summary(found))
    return found
