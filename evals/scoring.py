"""Whole-set perplexity: per-line NLL sums, exact token counts, and the units built on them.

Per line the rig keeps the sum of target-token NLL (nats, accumulated in float64), the number
of target tokens, and the characters and UTF-8 bytes of the scored text. Everything else is a
ratio of sums over ALL scored lines, never a mean of per-batch or per-line means:

    ppl = exp(sum NLL / sum tokens)        nats/token = sum NLL / sum tokens
    bpc = sum NLL / ln 2 / sum chars       bpb = sum NLL / ln 2 / sum bytes

bpc and bpb divide by the scored text only (the line; for pairs the response — the EOS target
adds NLL and a token but no characters), so char-level and BPE models compare in one unit.

How a line is scored: position i predicts ids[i + 1] where is_target[i + 1]. A line longer than
the model's context is cut into non-overlapping windows of block_size inputs: window k feeds
ids[k*B : k*B+B] and predicts ids[k*B+1 : k*B+B+1], so every target is scored exactly once
(a window after the first starts without the earlier context: that is the price of exact
counts without overlap). Windows are sorted by length and packed into batches of at most
`token_budget` padded tokens; padding sits on the right, where causal attention keeps it from
influencing real positions, and its targets are IGNORE_INDEX, so it is never counted.
The NLL comes from the model's own forward (one code path from logits to a number).
"""
from __future__ import annotations

import hashlib
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from tatu.evals.sets import EvalLine, EvalSet
from tatu.evals.stats import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    CorpusCI,
    PairedCI,
    bootstrap_ppl,
    paired_ratio,
)
from tatu.model.gpt import IGNORE_INDEX

LN2 = math.log(2.0)
_LOG_MAX_FLOAT = math.log(sys.float_info.max)  # exp() of more overflows
# Tokens per scoring batch. On CPU small batches stay in cache and win (measured on the demo
# model: 512 tokens 0.44 s, 2048 0.48 s, 16384 0.88 s for 656 lines); a GPU wants big ones.
CPU_TOKEN_BUDGET = 2048
CUDA_TOKEN_BUDGET = 16384


def default_token_budget(device) -> int:
    return CUDA_TOKEN_BUDGET if torch.device(device).type == "cuda" else CPU_TOKEN_BUDGET


@dataclass
class LineScores:
    """Per-line sums, in the order of the lines given."""

    nll_sum: np.ndarray  # float64, nats
    n_tokens: np.ndarray  # int64, scored target tokens
    n_chars: np.ndarray  # int64, characters of the scored text
    n_bytes: np.ndarray  # int64, UTF-8 bytes of the scored text
    # per line, the NLL of each scored target token in order (score_lines(per_token=True)): what
    # per-category results are summed from (tatu.evals.categories); never stored
    token_nll: list[np.ndarray] | None = None

    def __len__(self) -> int:
        return int(self.nll_sum.size)

    def select(self, keep: np.ndarray) -> "LineScores":
        token_nll = None
        if self.token_nll is not None:
            keep_array = np.asarray(keep)
            positions = np.flatnonzero(keep_array) if keep_array.dtype == bool else keep_array
            token_nll = [self.token_nll[int(i)] for i in positions]
        return LineScores(self.nll_sum[keep], self.n_tokens[keep], self.n_chars[keep], self.n_bytes[keep], token_nll)


def _line_targets(line: EvalLine, where: str, mask: Sequence[bool] | None) -> tuple[list[int], list[int]]:
    """(inputs, targets) of one line, IGNORE_INDEX where nothing is scored."""
    ids, is_target = line.ids, line.is_target
    if len(ids) != len(is_target):
        raise ValueError(f"{where}: {len(ids)} ids but {len(is_target)} is_target flags")
    if len(ids) < 2:
        raise ValueError(f"{where}: needs at least 2 tokens (BOS and one to predict)")
    if is_target[0]:
        raise ValueError(f"{where}: the first token cannot be a target (nothing precedes it)")
    targets = [t if flag else IGNORE_INDEX for t, flag in zip(ids[1:], is_target[1:])]
    if mask is not None:
        positions = [i for i, t in enumerate(targets) if t != IGNORE_INDEX]
        if len(mask) != len(positions):
            raise ValueError(f"{where}: position_mask has {len(mask)} entries for {len(positions)} target tokens")
        for pos, keep in zip(positions, mask):
            if not keep:
                targets[pos] = IGNORE_INDEX
    return ids[:-1], targets


def score_lines(
    model: torch.nn.Module,
    lines: Sequence[EvalLine],
    device: str | torch.device = "cpu",
    token_budget: int | None = None,
    position_mask: Sequence[Sequence[bool]] | None = None,
    map_batches: Callable[[Callable, list], list] | None = None,
    per_token: bool = False,
) -> LineScores:
    """Score every line (see the module docstring). The model must already be on `device`.

    per_token: also keep each scored token's NLL (LineScores.token_nll); the per-line sums are
    computed exactly as without it.

    position_mask: per line, one bool per target token; only True targets are scored (and
    counted), for per-category perplexity. Characters and bytes stay those of the whole text.
    map_batches(score, batches) -> [score(b) for b in batches], computed elsewhere if it likes
    (the daemon deals the batches to its ranks): every batch is the one built here, so each
    line's sum is the same whoever scores it.
    """
    if token_budget is None:
        token_budget = default_token_budget(device)
    if token_budget < 1:
        raise ValueError(f"token_budget must be >= 1, got {token_budget}")
    if position_mask is not None and len(position_mask) != len(lines):
        raise ValueError(f"position_mask has {len(position_mask)} entries for {len(lines)} lines")
    block = model.config.block_size
    n = len(lines)
    nll_sum = np.zeros(n, dtype=np.float64)
    n_tokens = np.zeros(n, dtype=np.int64)
    n_chars = np.array([len(line.text) for line in lines], dtype=np.int64)
    n_bytes = np.array([len(line.text.encode("utf-8")) for line in lines], dtype=np.int64)

    # rows: (line index, inputs, targets, window start), one per window
    rows: list[tuple[int, list[int], list[int], int]] = []
    for i, line in enumerate(lines):
        inputs, targets = _line_targets(line, f"line {i}", None if position_mask is None else position_mask[i])
        n_tokens[i] = sum(t != IGNORE_INDEX for t in targets)
        for start in range(0, len(inputs), block):
            window_targets = targets[start : start + block]
            if any(t != IGNORE_INDEX for t in window_targets):  # a window with no target costs nothing
                rows.append((i, inputs[start : start + block], window_targets, start))
    rows.sort(key=lambda row: len(row[1]), reverse=True)

    batches = []
    start = 0
    while start < len(rows):
        width = len(rows[start][1])  # the longest row of the batch: rows are sorted
        stop = min(len(rows), start + max(1, token_budget // width))
        batches.append(rows[start:stop])
        start = stop

    def score_batch(batch) -> np.ndarray:
        width = len(batch[0][1])
        # filled in numpy: one tensor copy per batch instead of two per row
        x = np.zeros((len(batch), width), dtype=np.int64)
        y = np.full((len(batch), width), IGNORE_INDEX, dtype=np.int64)
        for r, (_, inputs, targets, _) in enumerate(batch):
            x[r, : len(inputs)] = inputs
            y[r, : len(targets)] = targets
        _, nll = model(torch.from_numpy(x).to(device), torch.from_numpy(y).to(device))
        sums = nll.double().sum(dim=1).cpu().numpy()
        if not per_token:
            return sums
        tokens = nll.double().cpu().numpy()
        return sums, [tokens[r][y[r] != IGNORE_INDEX] for r in range(len(batch))]

    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            all_row_sums = map_batches(score_batch, batches) if map_batches else [score_batch(b) for b in batches]
    finally:
        model.train(was_training)
    token_nll = None
    if per_token:
        windows: dict[int, list[tuple[int, np.ndarray]]] = {i: [] for i in range(n)}
        for batch, (_, row_tokens) in zip(batches, all_row_sums):
            for row, tokens in zip(batch, row_tokens):
                windows[row[0]].append((row[3], tokens))
        token_nll = [np.concatenate([t for _, t in sorted(windows[i], key=lambda w: w[0])] or [np.zeros(0)])
                     for i in range(n)]
        all_row_sums = [sums for sums, _ in all_row_sums]
    for batch, row_sums in zip(batches, all_row_sums):  # in batch order, whoever scored them
        np.add.at(nll_sum, [row[0] for row in batch], row_sums)
    return LineScores(nll_sum=nll_sum, n_tokens=n_tokens, n_chars=n_chars, n_bytes=n_bytes, token_nll=token_nll)


def lines_digest(lines: Sequence[EvalLine]) -> str:
    """sha256 over the scored texts: two results with equal digests scored the same lines."""
    h = hashlib.sha256()
    for line in lines:
        h.update(line.text.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()


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
                       self.extra)

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
