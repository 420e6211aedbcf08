"""Per-line scores of a member's start and end, re-scored from the checkpoints its run wrote.

The daemon's events hold each eval's totals and CIs, not its per-line sums; the hierarchical
bootstrap needs those. So the sweep scores, with tatu.evals, the seed checkpoint (the run's
step 0: every member of a sweep starts from it) and the member's end: final/ when it finished,
state/ when it aborted (saved at the abort's eval). The same eval files, tokenizer and
subsampling the daemon used (the data manifest, EVAL_EN_ALL); the results are cached in
sweeps/<name>/scores/ keyed by the checkpoint's weights hash, so a report is cheap to redo
and a changed checkpoint is never matched with stale scores.
"""
from __future__ import annotations

import json
from pathlib import Path

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


def score_checkpoint(ckpt: Path, env: dict, cache_dir: Path) -> dict:
    """{set: {"nll_sum": [...], "line_tokens": [...], "line_index": [...]}} for SETS."""
    cache = cache_dir / f"{Path(ckpt).parent.name}-{Path(ckpt).name}-{weights_hash(ckpt)}.json"
    if cache.is_file():
        return json.loads(cache.read_text())
    from tatu.daemon.config import load_config
    from tatu.evals.scoring import score_lines
    from tatu.evals.sets import load_eval_set, subsample
    from tatu.model.checkpoint import load_checkpoint

    config, _ = load_config(env)
    loaded = load_checkpoint(ckpt)
    model = loaded.build_model("cpu").eval()
    data = Path(env["TATU_DATA"])
    manifest = json.loads((data / "manifest.json").read_text())
    scores = {}
    for name in SETS:
        eval_set = load_eval_set(data / manifest["evals"][name]["file"], loaded.tokenizer, name=name)
        if name == "enRuler":
            eval_set, _ = subsample(eval_set, config.eval_en_all, config.eval_en_batches, config.eval_en_lines_per_batch,
                                      seed=config.seed)
        lines = score_lines(model, eval_set.lines, "cpu")
        scores[name] = {"nll_sum": lines.nll_sum.tolist(), "line_tokens": lines.n_tokens.tolist(),
                        "line_index": list(eval_set.line_index)}
    write_json_atomic(cache, scores)
    return scores
