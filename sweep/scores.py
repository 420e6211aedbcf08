"""Per-line scores of a member's start and end, re-scored from the checkpoints its run wrote.

The daemon's events hold each eval's totals and CIs, not its per-line sums; the crossed
bootstrap needs those. So the sweep scores, with tatu.evals, the seed checkpoint (the run's
step 0: every member of a sweep starts from it) and the member's end: final/ when it finished,
state/ when it aborted (saved at the abort's eval). The same eval files, tokenizer and
subsampling the daemon used (the data manifest, EVAL_EN_ALL, TATU_SEED); the results are
cached in sweeps/<name>/scores/ keyed by the checkpoint's weights hash and a digest of the
lines scored, so a report is cheap to redo and neither a changed checkpoint nor another
member's lines are ever matched with stale scores.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tatu.exitcodes import BAD_CONFIG, TatuExit
from tatu.sweep.lock import write_json_atomic

SETS = ("sftHeld", "enRuler")


def weights_hash(ckpt: Path) -> str:
    manifest = json.loads((Path(ckpt) / "manifest.json").read_text())
    return manifest["files"]["model.safetensors"][:16]


def end_checkpoint(run_dir: Path) -> Path | None:
    for name in ("final", "state"):
        if (run_dir / name / "manifest.json").is_file():
            return run_dir / name
    return None


def _lines_to_score(ckpt_tokenizer, env: dict, extra_sets: tuple[str, ...] = ()) -> dict:
    """{set: EvalSet}: the lines the member's daemon scores (its data, its EVAL_EN_* and TATU_SEED),
    for SETS and the held-out sets a decision rule names (`extra_sets`)."""
    from tatu.daemon.config import load_config
    from tatu.evals.sets import load_eval_set, subsample

    config, _ = load_config(env)
    data = Path(env["TATU_DATA"])
    manifest = json.loads((data / "manifest.json").read_text())
    sets = {}
    for name in SETS + tuple(n for n in extra_sets if n not in SETS):
        if name not in manifest["evals"]:
            raise TatuExit(BAD_CONFIG, f"the decision rule names {name}_change, but {data / 'manifest.json'} "
                                       f"has no eval set {name}")
        eval_set = load_eval_set(data / manifest["evals"][name]["file"], ckpt_tokenizer, name=name)
        if name == "enRuler":
            eval_set, _ = subsample(eval_set, config.eval_en_all, config.eval_en_batches, config.eval_en_lines_per_batch,
                                      seed=config.seed)
        sets[name] = eval_set
    return sets


def _lines_identity(eval_set) -> str:
    """A digest of which lines these are: their indices, their tokens and which tokens are scored."""
    digest = hashlib.sha256(json.dumps(list(eval_set.line_index)).encode())
    for line in eval_set.lines:
        digest.update(json.dumps([line.ids, line.is_target]).encode())
    return digest.hexdigest()[:16]


def score_checkpoint(ckpt: Path, env: dict, cache_dir: Path, extra_sets: tuple[str, ...] = ()) -> dict:
    """{set: {"nll_sum": [...], "line_tokens": [...], "line_index": [...]}} for SETS and `extra_sets`.

    The cache is keyed by the weights AND the lines (file, tokenizer, EVAL_EN_ALL, subsample size
    and TATU_SEED all show in them): a trunk's scores on seed 1's ruler subsample are never handed
    to seed 2. Every read checks the cached line indices against the lines this member scores."""
    from tatu.evals.scoring import score_lines
    from tatu.model.checkpoint import load_checkpoint

    loaded = load_checkpoint(ckpt)
    sets = _lines_to_score(loaded.tokenizer, env, extra_sets)
    key = {"weights": weights_hash(ckpt), "lines": {name: _lines_identity(s) for name, s in sets.items()}}
    key_hash = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    cache = cache_dir / f"{Path(ckpt).parent.name}-{Path(ckpt).name}-{key_hash}.json"
    if cache.is_file():
        doc = json.loads(cache.read_text())
        if doc.get("key") == key and all(doc["scores"][n]["line_index"] == list(s.line_index) for n, s in sets.items()):
            return doc["scores"]
    model = loaded.build_model("cpu").eval()
    scores = {}
    for name, eval_set in sets.items():
        lines = score_lines(model, eval_set.lines, "cpu")
        scores[name] = {"nll_sum": lines.nll_sum.tolist(), "line_tokens": lines.n_tokens.tolist(),
                        "line_index": list(eval_set.line_index)}
    write_json_atomic(cache, {"key": key, "scores": scores})
    return scores
