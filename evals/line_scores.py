"""Per-line NLL sums and exact token counts: how a line is scored (SetResult and the units
built on these sums: tatu.evals.scoring).

Per line: the sum of target-token NLL (nats, accumulated in float64), the number of target
tokens, and the characters and UTF-8 bytes of the scored text.

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from tatu.evals.sets import EvalLine
from tatu.model.cpu_sums import warm_vml
from tatu.model.gpt import IGNORE_INDEX

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


def _windows(lines: Sequence[EvalLine], block: int, position_mask, n_tokens: np.ndarray,
             ) -> list[tuple[int, list[int], list[int], int]]:
    """(line index, inputs, targets, window start), one per window with a target, longest first;
    fills n_tokens."""
    rows: list[tuple[int, list[int], list[int], int]] = []
    for i, line in enumerate(lines):
        inputs, targets = _line_targets(line, f"line {i}", None if position_mask is None else position_mask[i])
        n_tokens[i] = sum(t != IGNORE_INDEX for t in targets)
        for start in range(0, len(inputs), block):
            window_targets = targets[start : start + block]
            if any(t != IGNORE_INDEX for t in window_targets):  # a window with no target costs nothing
                rows.append((i, inputs[start : start + block], window_targets, start))
    rows.sort(key=lambda row: len(row[1]), reverse=True)
    return rows


def _batches(rows: list, token_budget: int) -> list[list]:
    """Consecutive rows (sorted longest first) of at most token_budget padded tokens each."""
    batches = []
    start = 0
    while start < len(rows):
        width = len(rows[start][1])  # the longest row of the batch: rows are sorted
        stop = min(len(rows), start + max(1, token_budget // width))
        batches.append(rows[start:stop])
        start = stop
    return batches


def _batch_arrays(batch: list) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, targets) of a batch, right-padded to its longest row (the first: rows are sorted)."""
    width = len(batch[0][1])
    # filled in numpy: one tensor copy per batch instead of two per row
    x = np.zeros((len(batch), width), dtype=np.int64)
    y = np.full((len(batch), width), IGNORE_INDEX, dtype=np.int64)
    for r, (_, inputs, targets, _) in enumerate(batch):
        x[r, : len(inputs)] = inputs
        y[r, : len(targets)] = targets
    return x, y


def _token_nll(batches: list[list], row_tokens: list[list[np.ndarray]], n: int) -> list[np.ndarray]:
    """Per line, its scored tokens' NLLs in order: each line's windows put back by their start."""
    windows: dict[int, list[tuple[int, np.ndarray]]] = {i: [] for i in range(n)}
    for batch, tokens_of_batch in zip(batches, row_tokens):
        for row, tokens in zip(batch, tokens_of_batch):
            windows[row[0]].append((row[3], tokens))
    return [np.concatenate([t for _, t in sorted(windows[i], key=lambda w: w[0])] or [np.zeros(0)]) for i in range(n)]


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
    warm_vml()  # `tatu eval`, compare, interpolate and the sweeps score in processes of their own
    if token_budget is None:
        token_budget = default_token_budget(device)
    if token_budget < 1:
        raise ValueError(f"token_budget must be >= 1, got {token_budget}")
    if position_mask is not None and len(position_mask) != len(lines):
        raise ValueError(f"position_mask has {len(position_mask)} entries for {len(lines)} lines")
    n = len(lines)
    nll_sum = np.zeros(n, dtype=np.float64)
    n_tokens = np.zeros(n, dtype=np.int64)
    n_chars = np.array([len(line.text) for line in lines], dtype=np.int64)
    n_bytes = np.array([len(line.text.encode("utf-8")) for line in lines], dtype=np.int64)

    rows = _windows(lines, model.config.block_size, position_mask, n_tokens)
    batches = _batches(rows, token_budget)

    def score_batch(batch) -> np.ndarray:
        x, y = _batch_arrays(batch)
        _, nll = model(torch.from_numpy(x).to(device), torch.from_numpy(y).to(device))
        nll = nll.double()
        sums = nll.sum(dim=1).cpu().numpy()
        if not per_token:
            return sums
        tokens = nll.cpu().numpy()
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
        token_nll = _token_nll(batches, [tokens for _, tokens in all_row_sums], n)
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
