"""The interpolation path measured: both parents loaded verified and checked against each other,
then every eval set of the data dir scored whole at every alpha (tatu.evals.scoring.evaluate, as
`tatu eval` and the daemon's suite score), each paired against alpha 0 on the same lines
(tatu.evals.scoring.compare_results, the statistics of `tatu compare`)."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from tatu.evals.scoring import SetResult, compare_results, evaluate
from tatu.exitcodes import BAD_CONFIG, BAD_DATA, TatuExit
from tatu.formats import SET_NAMES
from tatu.model.checkpoint import Checkpoint, load_model_state
from tatu.model.interpolation import ParentMismatch, check_parents, interpolate_state, plain_weights

RULER, SFT_HELD = "enRuler", "sftHeld"


@dataclass(frozen=True)
class Change:
    """ppl at an alpha / ppl at alpha 0 - 1 over the same lines, with its paired 95% CI."""
    value: float
    lo: float
    hi: float
    p_value: float
    mde: float

    def to_json(self) -> dict:
        return {"value": self.value, "lo": self.lo, "hi": self.hi, "p_value": self.p_value, "mde": self.mde}


@dataclass
class AlphaPoint:
    alpha: float
    results: dict[str, SetResult]  # every eval set, scored whole
    changes: dict[str, Change]     # each set vs alpha 0

    def metrics(self) -> dict[str, float]:
        """What a --pick condition names: drift (the ruler's change), sftHeld_change and each
        held-out set's SET_change, each with _lo and _hi (the sweep's metric names)."""
        out = {}
        for name, change in self.changes.items():
            if name == "ptVal":
                continue  # shown, never judged (as in the sweep's rule)
            metric = "drift" if name == RULER else f"{name}_change"
            out.update({metric: change.value, f"{metric}_lo": change.lo, f"{metric}_hi": change.hi})
        return out


@dataclass(frozen=True)
class Parent:
    """A parent checkpoint as loaded, with the sha256 of its weights file (what the output records)."""
    path: Path
    ckpt: Checkpoint
    sha256: str


def weights_sha256(path: Path, ckpt: Checkpoint) -> str:
    """tatu's directory: its manifest's sha256 of model.safetensors (the bytes load verified);
    another format: the sha256 of its weights file."""
    manifest = ckpt.path / "manifest.json" if ckpt.path.is_dir() else None
    if manifest is not None and manifest.is_file():
        return json.loads(manifest.read_text(encoding="utf-8"))["files"]["model.safetensors"]
    weights = ckpt.path / "model.safetensors" if ckpt.path.is_dir() else ckpt.path
    return hashlib.sha256(weights.read_bytes()).hexdigest()


def load_parent(path: Path) -> Parent:
    """A parent, verified on load (any load error: one line, exit 65)."""
    from tatu.model.hf import load_checkpoint_or_gpt2

    try:
        ckpt = load_checkpoint_or_gpt2(path)
    except ValueError as exc:  # CheckpointError, TokenizerError, a bad config
        raise TatuExit(BAD_DATA, str(exc).splitlines()[0] if str(exc) else f"{path}: cannot load checkpoint")
    return Parent(path, ckpt, weights_sha256(path, ckpt))


def check_pair(seed: Parent, finetuned: Parent) -> None:
    """Another architecture is bad data (65); another tokenizer is 78, as everywhere in tatu."""
    try:
        check_parents(seed.ckpt, finetuned.ckpt)
    except ParentMismatch as exc:
        raise TatuExit(BAD_CONFIG if exc.what == "tokenizer" else BAD_DATA, str(exc))


def load_sets(specs, tokenizer) -> dict:
    """name -> EvalSet of every set of the data dir, tokenized once for every alpha."""
    from tatu.evals.sets import load_eval_set

    sets = {}
    for name, file, kind in specs:
        try:
            sets[name] = load_eval_set(file, tokenizer, name=name, kind=kind)
        except ValueError as exc:
            raise TatuExit(BAD_DATA, f"{file}: {exc}")
    missing = [n for n in (SFT_HELD, RULER) if n not in sets]
    if missing:
        raise TatuExit(BAD_DATA, f"the data dir has no {' and no '.join(missing)} set: the path is sftHeld against drift")
    return sets


def _change(base: SetResult, result: SetResult, n_resamples: int, seed: int) -> Change:
    paired = compare_results(base, result, n_resamples=n_resamples, seed=seed, per="token")
    return Change(paired.ratio - 1.0, paired.lo - 1.0, paired.hi - 1.0, paired.p_value, paired.mde)


def score_path(seed: Parent, finetuned: Parent, sets: dict, alphas: list[float], options: dict) -> list[AlphaPoint]:
    """One point per alpha (alphas[0] is 0: the seed itself, every change's reference).
    `options`: device, n_resamples, seed, token_budget, as `tatu eval` passes them to evaluate."""
    seed_state, ft_state = plain_weights(seed.ckpt), plain_weights(finetuned.ckpt)
    model = seed.ckpt.build_model(options["device"])
    model.eval()
    points: list[AlphaPoint] = []
    for alpha in alphas:
        load_model_state(model, interpolate_state(seed_state, ft_state, alpha), f"alpha {alpha:g}")
        results = {name: evaluate(model, eval_set, **options) for name, eval_set in sets.items()}
        base = points[0].results if points else results
        changes = {name: _change(base[name], r, options["n_resamples"], options["seed"]) for name, r in results.items()}
        points.append(AlphaPoint(alpha, results, changes))
        print(f"alpha {alpha:g}: scored {len(results)} sets", flush=True)
    return points


def held_out_names(sets) -> tuple[str, ...]:
    """The held-out sets among `sets` (names, or a dict by name): every set beyond the three roles, in order."""
    return tuple(name for name in sets if name not in SET_NAMES)
