"""Eval sets: raw files read and tokenized with the checkpoint's own tokenizer.

Two kinds:

- text (any file not ending in .jsonl/.json): one scored line per line that is not blank.
  ids = [BOS] + encode(line); every token after BOS is a target (so the first token of the
  line is scored, conditioned on BOS); the scored text is the line without its newline.
- pairs (.jsonl/.json, one JSON object per non-blank line): {"prompt", "response"} or
  {"messages": [...]}, parsed and validated by tatu.data.sft (the one pair parser, the one
  `tatu data build` uses) and encoded by tatu.model.chat. Targets are
  the response tokens and the EOS after each; the scored text is the response (for messages,
  the assistant turns concatenated). The EOS target has no characters: it counts in the NLL
  and the token count but adds 0 characters and 0 bytes to bpc/bpb.

A line that is blank after strip() (spaces, tabs, a lone no-break space) is not scored, but
counted (`EvalSet.n_blank`), so a 20-line file with 4 blank lines reports "16 scored, 4 blank".
A trailing "\r" is dropped (CRLF files score as LF ones). Characters are Unicode code points.

Line numbers in errors are 1-based physical lines of the file, so "FILE:LINE: reason" points
at what to fix.

Subsampling (EVAL_EN_ALL=0, `tatu eval --en-batches`) applies to the English ruler only
(SUBSAMPLED_SET) and scores n_batches * batch of its lines drawn uniformly at random without
replacement by `sample_lines(n, k, seed)`: the run's seed fixes them, so the same lines are
scored at every eval (scores stay paired) and the SE reported covers which lines were picked,
which the old evaluator's first-k lines did not.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from tatu.data.manifest import DataError
from tatu.data.sft import BadLine, parse_sft_line
from tatu.model.tokenizer import Tokenizer

KINDS = ("text", "pairs")


class EvalSetError(DataError):
    """An eval file that cannot be scored: "FILE:LINE: reason"."""

_PAIRS_SUFFIXES = (".jsonl", ".json")
SUBSAMPLED_SET = "enRuler"  # the one set EVAL_EN_ALL=0 / --en-batches subsamples
# mixed into the seed so the sample's draw is not the bootstrap's first draw (same seed)
_SAMPLE_STREAM = 0x5EED_11E5


@dataclass(frozen=True)
class EvalLine:
    """ids: the tokens fed to the model; is_target[i]: ids[i] is predicted and scored."""

    ids: list[int]
    is_target: list[bool]
    text: str


@dataclass
class EvalSet:
    """The scored lines of one file. `line_index[i]` is the position of lines[i] among the
    file's scored lines (0-based); `n_lines_total` counts all of them (before subsampling);
    `n_blank` the blank lines that were skipped; `sample_seed` the seed of a subsample."""

    name: str
    path: Path
    kind: str
    lines: list[EvalLine]
    line_index: list[int] = field(default_factory=list)
    n_lines_total: int = -1
    tokenizer_hash: str = ""
    n_blank: int = 0
    sample_seed: int | None = None

    def __post_init__(self) -> None:
        if not self.line_index:
            self.line_index = list(range(len(self.lines)))
        if self.n_lines_total < 0:
            self.n_lines_total = len(self.lines)
        if len(self.line_index) != len(self.lines):
            raise ValueError(f"eval set {self.name}: {len(self.lines)} lines but {len(self.line_index)} indices")


def _text_lines(path: Path) -> tuple[list[tuple[int, str]], int]:
    """(line number, line) for every non-blank line, and the number of blank lines; a decoding
    error names its line."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise EvalSetError(f"{path}: cannot read eval set ({exc.strerror})") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_no = data[: exc.start].count(b"\n") + 1
        raise EvalSetError(f"{path}:{line_no}: not valid UTF-8 (byte {exc.start})") from exc
    # split on "\n" only: str.splitlines would also split on U+2028, \x0c, ... inside a line
    physical = text.split("\n")
    if physical[-1] == "":
        physical.pop()  # a final newline ends the last line; it opens no blank one
    out, n_blank = [], 0
    for number, line in enumerate(physical, start=1):
        line = line.removesuffix("\r")
        if line.strip():
            out.append((number, line))
        else:
            n_blank += 1
    return out, n_blank


def _pair_line(tok: Tokenizer, raw: str, path: Path, number: int) -> EvalLine:
    """A pairs line through the one pair parser (tatu.data.sft): the text scored is the response
    (for messages, the assistant turns concatenated)."""
    example = parse_sft_line(raw.encode("utf-8"), str(path), number)
    if isinstance(example, BadLine):
        raise EvalSetError(str(example))
    ids, is_target = example.encode(tok)
    return EvalLine(ids, is_target, example.scored_text)


def load_eval_set(path: str | Path, tokenizer: Tokenizer, name: str | None = None, kind: str = "auto") -> EvalSet:
    """Read and tokenize an eval file (see the module docstring); bad input -> ValueError "FILE:LINE: reason"."""
    path = Path(path)
    if kind == "auto":
        kind = "pairs" if path.suffix.lower() in _PAIRS_SUFFIXES else "text"
    if kind not in KINDS:
        raise ValueError(f"{path}: eval set kind must be one of {KINDS} or 'auto', not {kind!r}")
    lines: list[EvalLine] = []
    numbered, n_blank = _text_lines(path)
    for number, raw in numbered:
        if kind == "pairs":
            lines.append(_pair_line(tokenizer, raw, path, number))
            continue
        ids = [tokenizer.bos_id, *tokenizer.encode(raw)]
        lines.append(EvalLine(ids, [False] + [True] * (len(ids) - 1), raw))
    if not lines:
        raise EvalSetError(f"{path}: no lines to score (the file is empty or blank)")
    return EvalSet(name=name or path.stem, path=path, kind=kind, lines=lines, tokenizer_hash=tokenizer.hash,
                   n_blank=n_blank)


def sample_lines(n_lines: int, k: int, seed: int) -> list[int]:
    """The positions (sorted) of the k of n_lines lines a subsample scores: uniform without
    replacement, a pure function of (n_lines, k, seed). k >= n_lines keeps every line."""
    if k >= n_lines:
        return list(range(n_lines))
    rng = np.random.default_rng([_SAMPLE_STREAM, seed])
    return sorted(int(i) for i in rng.choice(n_lines, size=k, replace=False))


def subsample(eval_set: EvalSet, all_lines: bool, n_batches: int, batch: int, seed: int = 0) -> tuple[EvalSet, str]:
    """EVAL_EN_ALL semantics: all lines, or n_batches * batch lines picked by sample_lines(seed).
    Returns the set to score and a note "k/n lines" ("k/n lines, seed S" for a subsample)."""
    total = eval_set.n_lines_total
    if all_lines:
        return eval_set, f"{len(eval_set.lines)}/{total} lines"
    for label, value in (("n_batches (EVAL_EN_BATCHES)", n_batches), ("batch (EVAL_BATCH)", batch)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{label} must be a positive integer, got {value!r}")
    keep = sample_lines(len(eval_set.lines), n_batches * batch, seed)
    chosen = replace(eval_set, lines=[eval_set.lines[i] for i in keep],
                     line_index=[eval_set.line_index[i] for i in keep], n_lines_total=total, sample_seed=seed)
    if len(keep) == len(eval_set.lines):
        return chosen, f"{len(keep)}/{total} lines"
    return chosen, f"{len(keep)}/{total} lines, seed {seed}"


def target_word_masks(eval_set: EvalSet, tokenizer: Tokenizer, predicate: Callable[[str], bool]) -> list[list[bool]]:
    """Per line, one bool per target token: does it belong to a word satisfying `predicate`?
    (the words of target_word_spans; special targets and tokens of no word are False)"""
    from tatu.evals.words import normalize_word

    return [[span is not None and bool(predicate(normalize_word(line.text[span[0]:span[1]]))) for span in spans]
            for line, spans in zip(eval_set.lines, target_word_spans(eval_set, tokenizer))]


def target_word_spans(eval_set: EvalSet, tokenizer: Tokenizer) -> list[list[tuple[int, int] | None]]:
    """Per line, one entry per target token: the (start, end) character span, in the line's
    scored text, of the word the token belongs to; None for a special target (EOS) or a token
    of no word.

    Each maximal run of non-special target tokens is the encoding of one piece of scored text
    (the line, a response, an assistant turn), and the pieces make up the scored text in order,
    so decoding a run gives its piece exactly and tatu.evals.masks.token_words maps its tokens
    to words (the one token-to-word rule).
    """
    from tatu.evals.masks import token_words

    token_bytes = tokenizer.token_bytes
    specials = tokenizer.special_ids
    out: list[list[tuple[int, int] | None]] = []
    for line in eval_set.lines:
        n_targets = sum(line.is_target)
        spans: list[tuple[int, int] | None] = []
        run: list[int] = []
        offset = 0

        def flush() -> None:
            nonlocal offset
            if run:
                piece = tokenizer.decode(run)
                words, owners = token_words(piece, [int(token_bytes[t]) for t in run])
                spans.extend(None if k is None else (offset + words[k].start(), offset + words[k].end()) for k in owners)
                offset += len(piece)
                run.clear()

        # a run also ends where targets stop being contiguous in ids (e.g. between turns)
        previous_target_pos = None
        for pos, (t, is_t) in enumerate(zip(line.ids, line.is_target)):
            if not is_t:
                continue
            if t in specials or (previous_target_pos is not None and pos != previous_target_pos + 1):
                flush()
            if t in specials:
                spans.append(None)
            else:
                run.append(t)
            previous_target_pos = pos
        flush()
        assert len(spans) == n_targets
        out.append(spans)
    return out
