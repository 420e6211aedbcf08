"""Per-line scores of an interpolated member's start and end, re-scored from its checkpoints: the
one number the sweep still scores itself, because no daemon ever evaluated an interpolated
checkpoint. Every daemon-run member is judged on the daemon's own per-line scores
(TATU_EVAL_LINES=1, sweep/judge/common_step.py lines_at), at step 0, the common step and its end;
on CPU fp32 this re-scorer gives the daemon's very numbers (tests/sweep/test_common_step.py,
test_held_out_sets.py; LoRA's merged final/ differs in the last bits, tests/sweep/test_configs_run.py).

It scores, with tatu.evals, the seed checkpoint (every member of a sweep starts from it) and the
interpolated checkpoint (`end_checkpoint` finds the parent's end it is made from: final/ when it
finished, state/ when it aborted, saved at the abort's eval). The same eval files, tokenizer and
subsampling the daemon used (the data manifest, EVAL_EN_ALL, TATU_SEED): sftHeld, enRuler,
ptVal where the data has it, every held-out set of the data (any set beyond the three roles), and the word categories of each
tagged set from the tags stored at data build (tatu.evals.categories). The results are
cached in sweeps/<name>/scores/ keyed by the checkpoint's weights hash and a digest of the
lines scored, so a report is cheap to redo and neither a changed checkpoint nor another
member's lines are ever matched with stale scores.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from tatu.atomic import write_json_atomic
from tatu.daemon.run.paths import RunDir
from tatu.data.tags import CATEGORIES
from tatu.exitcodes import BAD_CONFIG
from tatu.formats import SET_NAMES, ordered_sets
from tatu.sweep.errors import SweepError

SETS = ("sftHeld", "enRuler")
# scored where the data has it, so that every loss is said (Portuguese text is shown, never judged)
SHOWN = ("ptVal",)


def weights_hash(ckpt: Path) -> str:
    manifest = json.loads((Path(ckpt) / "manifest.json").read_text())
    return manifest["files"]["model.safetensors"][:16]


def end_checkpoint(run_dir: Path) -> Path | None:
    files = RunDir(run_dir)
    for ckpt in (files.final, files.state):
        if (ckpt / "manifest.json").is_file():
            return ckpt
    return None


def held_out_names(manifest: dict) -> tuple[str, ...]:
    """The manifest's held-out sets: every eval set beyond the three roles (tatu.formats.SET_NAMES)."""
    return tuple(name for name in ordered_sets(manifest.get("evals", {})) if name not in SET_NAMES)


def _lines_to_score(ckpt_tokenizer, env: dict, required: tuple[str, ...] = ()) -> tuple[dict, dict, Callable[[], dict]]:
    """(sets, tag hashes, categories): {set: EvalSet}, the lines the member's daemon scores (its data,
    its EVAL_EN_* and TATU_SEED), for SETS and every held-out set of its data (the ones a decision
    rule names, `required`, must be there); each tagged set's tags' sha256 (from the manifest: what
    the cache key needs); a call that reads the tags into each tagged set's per-token categories
    (only when the scores are not cached)."""
    from tatu.daemon.config import load_config
    from tatu.daemon.suite import load_eval_sets, set_categories
    from tatu.data.manifest import DataError, load_manifest

    config, _ = load_config(env)
    manifest = load_manifest(config.data)
    wanted = SETS + tuple(dict.fromkeys(n for n in (*SHOWN, *held_out_names(manifest), *required) if n not in SETS))
    sets, _, _ = load_eval_sets(config, manifest, ckpt_tokenizer, names=wanted)
    missing = [name for name in SETS if name not in sets]
    if missing:
        raise DataError(f"{config.data / 'manifest.json'}: eval sets {missing} are required and missing")
    for name in required:
        if name not in sets:
            raise SweepError(BAD_CONFIG, f"the decision rule names {name}_change, but {config.data / 'manifest.json'} "
                                       f"has no eval set {name}")
    tags = {name: manifest["evals"][name]["tags"]["sha256"] for name in sets
            if "file" in (manifest["evals"][name].get("tags") or {})}
    return sets, tags, lambda: set_categories(sets, manifest, config.data, ckpt_tokenizer)[0]


def category_key(set_name: str, category: str) -> str:
    """The key of a set's category lines among a member's scores ("sftHeld/noun")."""
    return f"{set_name}/{category}"


def category_entries(set_name: str, per_category: dict[str, tuple], line_index) -> dict:
    """{"set/category": {"nll_sum", "line_tokens", "line_index"}} of the lines that have a token of
    the category (a line without one says nothing about it, as in the daemon's category CIs)."""
    out = {}
    for category, (nll, n_tokens) in per_category.items():
        keep = [i for i, n in enumerate(n_tokens) if n > 0]
        if keep:
            out[category_key(set_name, category)] = {"nll_sum": [float(nll[i]) for i in keep],
                                                     "line_tokens": [int(n_tokens[i]) for i in keep],
                                                     "line_index": [int(line_index[i]) for i in keep]}
    return out


def _lines_identity(eval_set) -> str:
    """A digest of which lines these are: their indices, their tokens and which tokens are scored."""
    digest = hashlib.sha256(json.dumps(list(eval_set.line_index)).encode())
    for line in eval_set.lines:
        digest.update(json.dumps([line.ids, line.is_target]).encode())
    return digest.hexdigest()[:16]


def score_checkpoint(ckpt: Path, env: dict, cache_dir: Path, required: tuple[str, ...] = ()) -> dict:
    """{set: {"nll_sum": [...], "line_tokens": [...], "line_index": [...]}} for SETS, every held-out
    set of the member's data (`required`: the ones its rule names) and, for each tagged set, its
    categories ("sftHeld/noun": the same fields over the lines with a token of the category).

    The cache is keyed by the weights AND the lines (file, tokenizer, EVAL_EN_ALL, subsample size
    and TATU_SEED all show in them) and the tags: a trunk's scores on seed 1's ruler subsample are
    never handed to seed 2. Every read checks the cached line indices against the lines this member scores."""
    from tatu.evals.categories import category_lines
    from tatu.evals.line_scores import score_lines
    from tatu.model.hf import load_checkpoint_or_gpt2

    loaded = load_checkpoint_or_gpt2(ckpt)
    sets, tags, read_categories = _lines_to_score(loaded.tokenizer, env, required)
    key = {"weights": weights_hash(ckpt), "lines": {name: _lines_identity(s) for name, s in sets.items()}, "tags": tags}
    key_hash = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    cache = cache_dir / f"{Path(ckpt).parent.name}-{Path(ckpt).name}-{key_hash}.json"
    if cache.is_file():
        doc = json.loads(cache.read_text())
        if doc.get("key") == key and all(doc["scores"][n]["line_index"] == list(s.line_index) for n, s in sets.items()):
            return doc["scores"]
    categories = read_categories()
    model = loaded.build_model("cpu").eval()
    scores = {}
    for name, eval_set in sets.items():
        lines = score_lines(model, eval_set.lines, "cpu", per_token=name in categories)
        scores[name] = {"nll_sum": lines.nll_sum.tolist(), "line_tokens": lines.n_tokens.tolist(),
                        "line_index": list(eval_set.line_index)}
        if name in categories:
            per = {c: category_lines(lines.token_nll, categories[name], c) for c in CATEGORIES}
            scores.update(category_entries(name, per, eval_set.line_index))
    cache.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(cache, {"key": key, "scores": scores}, sort_keys=True)
    return scores
