"""Whole-set perplexity: per-line NLL sums, exact token counts, and the units built on them.

Per line the rig keeps the sum of target-token NLL (nats, accumulated in float64), the number
of target tokens, and the characters and UTF-8 bytes of the scored text. Everything else is a
ratio of sums over ALL scored lines, never a mean of per-batch or per-line means:

    ppl = exp(sum NLL / sum tokens)        nats/token = sum NLL / sum tokens
    bpc = sum NLL / ln 2 / sum chars       bpb = sum NLL / ln 2 / sum bytes

bpc and bpb divide by the scored text only (the line; for pairs the response — the EOS target
adds NLL and a token but no characters), so char-level and BPE models compare in one unit.

How a line is scored (windows, batches, padding): tatu.evals.line_scores.
"""
from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from tatu.evals.line_scores import LineScores, lines_digest, score_lines
from tatu.evals.sets import EvalSet
from tatu.evals.stats import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    CorpusCI,
    PairedCI,
    bootstrap_ppl,
    paired_ratio,
)

LN2 = math.log(2.0)
_LOG_MAX_FLOAT = math.log(sys.float_info.max)  # exp() of more overflows


@dataclass
class SetResult:
    """One eval set scored by one model. `n_lines` counts the lines with at least one scored
    token (all of them, unless a position mask leaves some empty); `line_index` says which of
    the file's `n_lines_total` lines each score belongs to. bpc/bpb are None for a per-category
    (masked) result: its NLL covers only some of the characters."""

    name: str
    kind: str
    ppl: float
    nats_per_token: float
    bpc: float | None
    bpb: float | None
    ci: CorpusCI
    n_lines: int
    n_lines_total: int
    n_tokens: int
    n_chars: int
    n_bytes: int
    scores: LineScores
    line_index: np.ndarray
    lines_sha256: str
    tokenizer_hash: str = ""
    category: str | None = None
    extra: dict = field(default_factory=dict)
    n_blank: int = 0  # blank lines of the file, not scored
    sample_seed: int | None = None  # the seed that picked a subsample's lines

    @property
    def subsampled(self) -> bool:
        return len(self.scores) < self.n_lines_total

    @property
    def note(self) -> str:
        return f"{len(self.scores)}/{self.n_lines_total} lines"

    @property
    def blank_note(self) -> str | None:
        """"16 scored, 4 blank" when the file had blank lines (they are skipped, never scored)."""
        return f"{len(self.scores)} scored, {self.n_blank} blank" if self.n_blank else None

    def warning(self) -> str | None:
        """A one-line warning when only part of the set was scored (EVAL_EN_ALL=0)."""
        if not self.subsampled:
            return None
        return (
            f"{self.name}: scored {self.note} (EVAL_EN_ALL=0); the SE of its ppl is "
            f"{self.ci.se / self.ppl:.1%} — set EVAL_EN_ALL=1 to score every line"
        )

    def restricted_to(self, line_index: Sequence[int], lines_sha256: str, n_resamples: int = DEFAULT_RESAMPLES,
                      seed: int = DEFAULT_SEED) -> "SetResult | None":
        """This result on the lines `line_index` of the same file, None if one of them was not scored.

        The caller vouches that they are the lines whose texts digest to `lines_sha256` (same
        file, same indices): a result scored on a whole file can then be paired with one
        scored on a subsample of it."""
        position = {int(line): i for i, line in enumerate(self.line_index)}
        if any(int(line) not in position for line in line_index):
            return None
        take = np.asarray([position[int(line)] for line in line_index], dtype=np.int64)
        return _result(self.name, self.kind, self.scores.select(take), np.asarray(line_index, dtype=np.int64),
                       self.n_lines_total, lines_sha256, self.tokenizer_hash, self.category, n_resamples, seed,
                       self.extra, self.bpc is not None)  # a category with its words' chars keeps its bpc

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "kind": self.kind,
            "category": self.category,
            "ppl": self.ppl,
            "nats_per_token": self.nats_per_token,
            "bpc": self.bpc,
            "bpb": self.bpb,
            "ci": {"lo": self.ci.lo, "hi": self.ci.hi, "se": self.ci.se, "level": 0.95},
            "n_lines": self.n_lines,
            "n_lines_total": self.n_lines_total,
            "n_blank": self.n_blank,
            "sample_seed": self.sample_seed,
            "n_tokens": self.n_tokens,
            "n_chars": self.n_chars,
            "n_bytes": self.n_bytes,
            "lines_sha256": self.lines_sha256,
            "tokenizer_hash": self.tokenizer_hash,
            "extra": self.extra,
            # per line, so CIs and paired comparisons can be recomputed from the file
            "lines": {
                "index": self.line_index.tolist(),
                "nll_sum": self.scores.nll_sum.tolist(),
                "n_tokens": self.scores.n_tokens.tolist(),
                "n_chars": self.scores.n_chars.tolist(),
                "n_bytes": self.scores.n_bytes.tolist(),
            },
        }

    @classmethod
    def from_json(cls, payload: dict, n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> "SetResult":
        per_line = payload["lines"]
        scores = LineScores(
            np.asarray(per_line["nll_sum"], dtype=np.float64),
            np.asarray(per_line["n_tokens"], dtype=np.int64),
            np.asarray(per_line["n_chars"], dtype=np.int64),
            np.asarray(per_line["n_bytes"], dtype=np.int64),
        )
        result = _result(
            payload["name"], payload["kind"], scores, np.asarray(per_line["index"], dtype=np.int64),
            payload["n_lines_total"], payload["lines_sha256"], payload.get("tokenizer_hash", ""),
            payload.get("category"), n_resamples, seed, payload.get("extra", {}),
            payload.get("bpc") is not None,  # a category scored with its words' chars had one
        )
        result.n_blank, result.sample_seed = payload.get("n_blank", 0), payload.get("sample_seed")
        return result


def build_result(name, kind, scores, line_index, n_lines_total, digest, tokenizer_hash, category, n_resamples, seed,
                 extra, per_char: bool = False):
    """A SetResult from per-line scores. per_char: a category's scores whose n_chars/n_bytes are
    those of its own words, so its bpc/bpb mean something (a plain position mask's do not)."""
    return _result(name, kind, scores, line_index, n_lines_total, digest, tokenizer_hash, category, n_resamples,
                   seed, extra, per_char)


def _result(name, kind, scores, line_index, n_lines_total, digest, tokenizer_hash, category, n_resamples, seed, extra,
            category_chars: bool = False):
    counted = scores.select(scores.n_tokens > 0)
    if len(counted) == 0:
        raise ValueError(f"eval set {name}: no target token was scored" + (f" in category {category!r}" if category else ""))
    total_nll = float(counted.nll_sum.sum())
    total_tokens = int(counted.n_tokens.sum())
    total_chars = int(scores.n_chars.sum())
    total_bytes = int(scores.n_bytes.sum())
    per_char = (category is None or category_chars) and total_chars > 0
    mean_nll = total_nll / total_tokens
    if mean_nll < _LOG_MAX_FLOAT:
        ppl, ci = math.exp(mean_nll), bootstrap_ppl(counted.nll_sum, counted.n_tokens, n_resamples=n_resamples, seed=seed)
    else:  # NaN or past exp's range: a broken model, whose perplexity is inf (and so is its CI)
        ppl, ci = math.inf, CorpusCI(math.inf, math.inf, math.inf, math.inf, len(counted), total_tokens)
    return SetResult(
        name=name,
        kind=kind,
        ppl=ppl,
        nats_per_token=mean_nll,
        bpc=total_nll / LN2 / total_chars if per_char else None,
        bpb=total_nll / LN2 / total_bytes if per_char else None,
        ci=ci,
        n_lines=len(counted),
        n_lines_total=n_lines_total,
        n_tokens=total_tokens,
        n_chars=total_chars,
        n_bytes=total_bytes,
        scores=scores,
        line_index=line_index,
        lines_sha256=digest,
        tokenizer_hash=tokenizer_hash,
        category=category,
        extra=dict(extra),
    )


def evaluate(
    model: torch.nn.Module,
    eval_set: EvalSet,
    device: str | torch.device = "cpu",
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    token_budget: int | None = None,
    position_mask: Sequence[Sequence[bool]] | None = None,
    category: str | None = None,
    map_batches: Callable[[Callable, list], list] | None = None,
    per_token: bool = False,
) -> SetResult:
    """Score a whole set and summarise it with a 95% bootstrap CI over lines.

    For per-category perplexity pass `position_mask` (e.g. from
    tatu.evals.sets.target_word_masks) and a `category` name for the report.
    """
    if (position_mask is None) != (category is None):
        raise ValueError("evaluate: give position_mask and category together (or neither)")
    scores = score_lines(model, eval_set.lines, device, token_budget, position_mask, map_batches, per_token)
    result = _result(
        eval_set.name, eval_set.kind, scores, np.asarray(eval_set.line_index, dtype=np.int64),
        eval_set.n_lines_total, lines_digest(eval_set.lines), eval_set.tokenizer_hash, category,
        n_resamples, seed, {},
    )
    result.n_blank, result.sample_seed = eval_set.n_blank, eval_set.sample_seed
    return result


def compare_results(
    a: SetResult, b: SetResult, n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED, per: str = "auto"
) -> PairedCI:
    """Paired ppl_b / ppl_a over the same lines (error if they are not the same lines).

    per="token": the perplexity ratio. per="char": the ratio of per-character perplexities,
    exp(sum NLL / sum chars), i.e. 2 ** (bpc_b - bpc_a) — the only fair unit when the two
    models use different tokenizers. "auto" picks "char" exactly when the tokenizers differ.
    """
    if per not in ("auto", "token", "char"):
        raise ValueError(f"compare_results: per must be 'auto', 'token' or 'char', not {per!r}")
    if a.lines_sha256 != b.lines_sha256 or not np.array_equal(a.line_index, b.line_index):
        raise ValueError(f"compare {a.name} vs {b.name}: the two results did not score the same lines")
    if a.category != b.category:
        raise ValueError(f"compare {a.name}: category {a.category!r} vs {b.category!r}")
    if per == "auto":
        per = "char" if a.tokenizer_hash != b.tokenizer_hash else "token"
    if per == "char":
        if a.category is not None:
            raise ValueError(f"compare {a.name}: a per-category result has no per-character unit")
        return paired_ratio(a.scores.nll_sum, a.scores.n_chars, b.scores.nll_sum, b.scores.n_chars,
                            n_resamples=n_resamples, seed=seed)
    # lines a mask left without tokens carry no information about either model
    keep = (a.scores.n_tokens > 0) & (b.scores.n_tokens > 0)
    return paired_ratio(a.scores.nll_sum[keep], a.scores.n_tokens[keep], b.scores.nll_sum[keep],
                        b.scores.n_tokens[keep], n_resamples=n_resamples, seed=seed)
