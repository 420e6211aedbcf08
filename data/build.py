"""`tatu data build`: corpora -> token shards, SFT pairs -> ids + loss masks, eval sets -> copies.

Layout of the data dir (the manifest is the contract, see docs/architecture.md):

    manifest.json, tokenizer.json
    <text channel>/tokens.bin       every document as BOS + tokens + EOS, concatenated (a JSONL
                                    pair in the chat layout, as an SFT channel has it)
    <sft channel>/ids.bin           every pair's ids, concatenated
    <sft channel>/mask.bin          uint8, 1 where the id is a target (response + EOS)
    <sft channel>/offsets.npy       int64, pair i is ids[offsets[i]:offsets[i+1]]
    evals/<name>.txt|.jsonl         verbatim copies (evals/ tokenizes them itself)

Token files are raw little-endian uint16 (vocab <= 65535) or uint32, read with np.memmap.
The whole dir is written in a temporary sibling and renamed into place, so a failed build
leaves no half-written data dir behind, and a build whose inputs (sha256 of every file,
tokenizer hash, options) are unchanged does nothing.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from tatu.data import text_shards
from tatu.data.documents import Document, is_jsonl, read_documents, read_text_documents
from tatu.data.manifest import FORMAT, MANIFEST, DataConfigError, DataError, load_manifest
from tatu.data.sft import BadLine, SFTExample, file_lines, parse_sft_line, read_sft_file
from tatu.data.tags import tagger_versions, write_tags
from tatu.data.tasks import copy_tasks
from tatu.formats import eval_name_problem
from tatu.model.encoders import ENCODERS, Encoder, EncoderMismatch, choose_encoder
from tatu.model.tokenizer import Tokenizer

TOKENIZER_FILE = "tokenizer.json"
ON_BAD_LINE = ("error", "skip")
SAMPLE_BYTES = 256 << 10  # per text source, the fast encoder's check against the tokenizer


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 65535 else np.dtype(np.uint32)


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verification_sample(paths: Iterable[str], one_per_line: bool, per_source: int = SAMPLE_BYTES) -> list[str]:
    """The first documents of every text source, about `per_source` bytes of each: what a fast
    encoder must encode as the tokenizer does before it encodes them all."""
    sample: list[str] = []
    for path in dict.fromkeys(paths):
        taken = 0
        for item in read_documents(path, one_per_line):
            if taken >= per_source:
                break
            if isinstance(item, Document):
                sample.append(item.text)
                taken += item.n_bytes
    return sample


@dataclass
class BuildSpec:
    tokenizer: str
    out_dir: str
    text: dict[str, list[str]] = field(default_factory=dict)  # channel -> sources
    sft: dict[str, list[str]] = field(default_factory=dict)  # channel -> JSONL files
    evals: dict[str, str] = field(default_factory=dict)  # eval set name -> file
    tasks: dict[str, str] = field(default_factory=dict)  # multiple-choice task name -> JSONL (tatu.evals.choice)
    one_per_line: bool = False
    on_bad_line: str = "error"
    seq_len: int | None = None  # longest pair accepted: seq_len + 1 ids (one row); required with pairs
    encoder: str = "auto"  # model/encoders.py: auto = tiktoken where it gives the tokenizer's ids
    jobs: int | None = None  # worker processes for text channels; None: every core for big inputs
    # (the shards are the same bytes whatever `jobs` is: it is not part of the build key)

    def validate(self) -> None:
        if self.on_bad_line not in ON_BAD_LINE:
            raise ValueError(f"on_bad_line={self.on_bad_line!r}: expected one of {', '.join(ON_BAD_LINE)}")
        if self.encoder not in ENCODERS:
            raise ValueError(f"encoder={self.encoder!r}: expected one of {', '.join(ENCODERS)}")
        if self.jobs is not None and self.jobs < 1:
            raise ValueError(f"jobs={self.jobs}: must be >= 1")
        if self.seq_len is not None and self.seq_len < 1:
            raise ValueError(f"seq_len={self.seq_len}: must be >= 1")
        pair_evals = sorted(name for name, path in self.evals.items() if is_jsonl(path))
        if self.seq_len is None and (self.sft or pair_evals):
            # without it a pair longer than the context would only be found at training time
            given = [f"--sft {name}" for name in self.sft] + [f"--eval {name} (pairs)" for name in pair_evals]
            raise ValueError(f"--seq-len is required with {', '.join(given)}: pairs longer than the context "
                             "are rejected at build time")
        names = list(self.text) + list(self.sft)
        if len(set(names)) != len(names):
            raise ValueError(f"a channel name is used twice: {sorted(names)}")
        if not names and not self.evals:
            raise ValueError("nothing to build: give at least one --text, --sft or --eval")
        for name in names + list(self.evals):
            if not name or "/" in name or name.startswith(".") or name == "evals":
                raise ValueError(f"bad channel or eval name {name!r}")
        for flag, names in (("--eval", self.evals), ("--task", self.tasks)):
            for name in names:
                problem = eval_name_problem(name)
                if problem:
                    raise ValueError(f"{flag} {name}: {problem}")
        if set(self.tasks) & set(self.evals):
            raise ValueError(f"--task and --eval share the names {sorted(set(self.tasks) & set(self.evals))}")


@dataclass
class BuildResult:
    out_dir: Path
    manifest: dict
    up_to_date: bool
    skipped: dict[str, int]  # channel -> bad lines skipped


class _Progress:
    """tqdm over source bytes, on stderr, only when someone is watching (a tty)."""

    def __init__(self, total_bytes: int, enabled: bool | None):
        from tqdm import tqdm

        enabled = sys.stderr.isatty() if enabled is None else enabled
        self._bar = tqdm(total=total_bytes, unit="B", unit_scale=True, desc="tatu data build",
                         file=sys.stderr, disable=not enabled, leave=False)

    def update(self, n: int) -> None:
        self._bar.update(n)

    def close(self) -> None:
        self._bar.close()


class _BadLines:
    """Stops at the first bad line (error) or records every one of them (skip)."""

    def __init__(self, mode: str):
        self.mode = mode
        self.lines: list[BadLine] = []

    def handle(self, bad: BadLine) -> None:
        if self.mode == "error":
            raise DataError(str(bad))
        self.lines.append(bad)

    def record(self) -> dict:
        return {"count": len(self.lines),
                "lines": [{"path": b.path, "line": b.line, "reason": b.reason} for b in self.lines]}


def _build_key(spec: BuildSpec, tok: Tokenizer, hashes: dict[str, str]) -> str:
    """What the output depends on; equal keys mean an equal data dir."""
    payload = {
        "format": FORMAT,
        "tokenizer_hash": tok.hash,
        "text": {name: [[str(Path(p).resolve()), hashes[p]] for p in paths] for name, paths in spec.text.items()},
        "sft": {name: [[str(Path(p).resolve()), hashes[p]] for p in paths] for name, paths in spec.sft.items()},
        "evals": {name: [str(Path(p).resolve()), hashes[p]] for name, p in spec.evals.items()},
        "one_per_line": spec.one_per_line,
        "on_bad_line": spec.on_bad_line,
        "seq_len": spec.seq_len,
        "encoder": spec.encoder,
        "tagger": tagger_versions() if spec.evals else None,
        "tasks": {name: [str(Path(p).resolve()), hashes[p]] for name, p in spec.tasks.items()},
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _existing_manifest(out_dir: Path) -> dict | None:
    """The manifest of a previous build in `out_dir`, None when there is none."""
    try:
        return load_manifest(out_dir)
    except DataError:
        return None


def _all_files_present(out_dir: Path, manifest: dict) -> bool:
    paths = [manifest.get("tokenizer", TOKENIZER_FILE)]
    for channel in manifest.get("channels", {}).values():
        paths += list(channel.get("files", {}).values())
    paths += [entry["file"] for entry in manifest.get("evals", {}).values()]
    paths += [entry["tags"]["file"] for entry in manifest.get("evals", {}).values() if "file" in entry.get("tags", {})]
    paths += [entry["file"] for entry in manifest.get("tasks", {}).values()]
    return all((out_dir / p).is_file() for p in paths)


def _ratio(chars: int, tokens: int) -> float | None:
    return round(chars / tokens, 6) if tokens else None


def _write_text_channel(name: str, paths: list[str], spec: BuildSpec, local: text_shards.ChunkEncoder, jobs: int,
                        work: Path, hashes: dict[str, str], progress: _Progress) -> dict:
    bad = _BadLines(spec.on_bad_line)
    (work / name).mkdir()
    rel = f"{name}/tokens.bin"
    sources, total_tokens, total_docs = [], 0, 0
    with open(work / rel, "wb") as shard:
        for path in paths:
            counts = text_shards.write_source(path, shard, local, jobs, bad.handle, progress.update)
            n_docs, n_tokens, n_chars = counts["documents"], counts["tokens"], counts["chars"]
            sources.append({"path": str(Path(path).resolve()), "sha256": hashes[path], "bytes": os.path.getsize(path),
                            "documents": n_docs, "tokens": n_tokens, "chars": n_chars,
                            "chars_per_token": _ratio(n_chars, n_tokens)})
            total_tokens += n_tokens + 2 * n_docs
            total_docs += n_docs
    if total_docs == 0:
        raise DataError(f"channel {name!r}: no documents in {', '.join(paths)}")
    return {"kind": "text", "sources": sources, "files": {"tokens": rel}, "dtype": local.dtype.name,
            "documents": total_docs, "tokens": total_tokens,
            # every token but a BOS is predicted (BOS starts a document; nothing predicts it)
            "targets": total_tokens - total_docs,
            "skipped_lines": bad.record()}


def max_chars_per_token(tok: Tokenizer) -> int:
    """The most characters one token decodes to (a partial UTF-8 byte counts as one)."""
    specials = tok.special_ids
    return max([1] + [len(tok.decode([i])) for i in range(tok.vocab_size) if i not in specials])


def _check_length(example: SFTExample, n_ids: int, seq_len: int | None) -> BadLine | None:
    if seq_len is not None and n_ids > seq_len + 1:
        return BadLine(example.path, example.line,
                       f"pair is {n_ids} tokens, longer than --seq-len {seq_len} allows ({seq_len + 1} per row)")
    return None


def _encode_within(example: SFTExample, tok: Tokenizer, seq_len: int | None,
                   chars_per_token: int) -> tuple[list[int], list[bool]] | BadLine:
    """(ids, is_target), or the BadLine of a pair longer than the context. A pair whose
    characters alone rule it out is refused without being tokenized, so one huge line costs
    a length check, not minutes and gigabytes."""
    if seq_len is not None:
        at_least = example.min_ids(chars_per_token)
        if at_least > seq_len + 1:
            return BadLine(example.path, example.line,
                           f"pair is at least {at_least} tokens ({example.n_chars} characters), longer than "
                           f"--seq-len {seq_len} allows ({seq_len + 1} per row)")
    ids, is_target = example.encode(tok)
    too_long = _check_length(example, len(ids), seq_len)
    return (ids, is_target) if too_long is None else too_long


def _write_sft_channel(name: str, paths: list[str], spec: BuildSpec, tok: Tokenizer, dtype: np.dtype,
                       work: Path, hashes: dict[str, str], progress: _Progress, chars_per_token: int) -> dict:
    bad = _BadLines(spec.on_bad_line)
    (work / name).mkdir()
    files = {"ids": f"{name}/ids.bin", "mask": f"{name}/mask.bin", "offsets": f"{name}/offsets.npy"}
    special = np.array(sorted(tok.special_ids))
    offsets, sources = [0], []
    total_targets = max_pair = 0
    with open(work / files["ids"], "wb") as ids_file, open(work / files["mask"], "wb") as mask_file:
        for path in paths:
            n_pairs = n_tokens = n_chars = n_targets = 0
            for number, raw in file_lines(path):
                progress.update(len(raw) + 1)
                item = parse_sft_line(raw, path, number)
                if isinstance(item, BadLine):
                    bad.handle(item)
                    continue
                encoded = _encode_within(item, tok, spec.seq_len, chars_per_token)
                if isinstance(encoded, BadLine):
                    bad.handle(encoded)
                    continue
                ids, is_target = encoded
                ids_array = np.asarray(ids, dtype=dtype)
                ids_array.tofile(ids_file)
                np.asarray(is_target, dtype=np.uint8).tofile(mask_file)
                offsets.append(offsets[-1] + len(ids))
                n_pairs += 1
                n_tokens += int((~np.isin(ids_array, special)).sum())
                n_chars += item.n_chars
                n_targets += sum(is_target)
                max_pair = max(max_pair, len(ids))
            sources.append({"path": str(Path(path).resolve()), "sha256": hashes[path], "bytes": os.path.getsize(path),
                            "pairs": n_pairs, "tokens": n_tokens, "chars": n_chars,
                            "chars_per_token": _ratio(n_chars, n_tokens), "targets": n_targets})
            total_targets += n_targets
    if len(offsets) == 1:
        raise DataError(f"channel {name!r}: no valid pairs in {', '.join(paths)}")
    np.save(work / files["offsets"], np.asarray(offsets, dtype=np.int64))
    return {"kind": "sft", "sources": sources, "files": files, "dtype": dtype.name,
            "pairs": len(offsets) - 1, "max_pair_tokens": max_pair, "tokens": offsets[-1],
            "targets": total_targets, "skipped_lines": bad.record()}


def _copy_eval(name: str, path: str, spec: BuildSpec, tok: Tokenizer, work: Path, hashes: dict[str, str],
               chars_per_token: int) -> dict:
    """Copy an eval set verbatim; any bad line is an error (skipping would change what is scored)."""
    pairs = is_jsonl(path)
    scored: list[tuple[int, str]] = []  # (line, the text an eval scores): what is tagged
    if pairs:
        for item in read_sft_file(path):
            if isinstance(item, BadLine):
                raise DataError(str(item))
            encoded = _encode_within(item, tok, spec.seq_len, chars_per_token)
            if isinstance(encoded, BadLine):
                raise DataError(str(encoded))
            scored.append((item.line, item.scored_text))
    else:
        for item in read_text_documents(path, one_per_line=True):
            if isinstance(item, BadLine):
                raise DataError(str(item))
            scored.append((item.line, item.text))
    if not scored:
        raise DataError(f"{path}: eval set {name!r} has no lines to score")
    rel = f"evals/{name}.{'jsonl' if pairs else 'txt'}"
    shutil.copyfile(path, work / rel)
    return {"file": rel, "kind": "pairs" if pairs else "text", "lines": len(scored), "sha256": hashes[path],
            "source": str(Path(path).resolve()), "tags": write_tags(name, scored, work)}


def _check_out_dir(out_dir: Path, inputs: list[str]) -> None:
    """Refuse an --out whose replacement would destroy anything but a previous build (exit 78)."""
    resolved = out_dir.resolve()
    for path in inputs:
        if resolved in Path(path).resolve().parents:
            raise DataConfigError(f"{out_dir}: holds the input {path}; refusing to replace it")
    if not out_dir.exists() and not out_dir.is_symlink():
        return
    if out_dir.is_dir():
        if _existing_manifest(out_dir) is not None or not any(out_dir.iterdir()):
            return
    raise DataConfigError(f"{out_dir}: exists and is not a tatu data dir; refusing to replace it")


def _replace_dir(work: Path, out_dir: Path) -> None:
    """Put the finished build in place; an old data dir is removed only after the rename."""
    old = None
    if out_dir.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
        os.rename(out_dir, old / "data")
    os.rename(work, out_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _make_parents(out_dir: Path) -> list[Path]:
    """Create the missing directories above `out_dir`; returns them deepest first, so a failed
    build can remove exactly what it created (and nothing that was there before)."""
    missing, ancestor = [], out_dir.parent
    while not ancestor.exists() and not ancestor.is_symlink():
        missing.append(ancestor)
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise DataConfigError(f"--out {out_dir}: {ancestor} is not a directory")
    try:
        for directory in reversed(missing):
            directory.mkdir()
    except OSError as exc:
        _remove_dirs(missing)
        raise DataConfigError(f"--out {out_dir}: cannot create {exc.filename}: {exc.strerror}") from None
    return missing


def _remove_dirs(created: list[Path]) -> None:
    for directory in created:  # deepest first; stops at one that is not empty
        try:
            directory.rmdir()
        except FileNotFoundError:
            continue
        except OSError:
            break


def _hash_inputs(paths: list[str]) -> dict[str, str]:
    try:
        return {p: file_sha256(p) for p in paths}
    except OSError as exc:
        raise DataError(f"{exc.filename}: cannot read ({exc.strerror})") from None


def _work_dir(out_dir: Path, created: list) -> Path:
    """The build's temporary dir beside --out (renamed into place at the end), usual mode."""
    try:
        work = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    except OSError as exc:
        _remove_dirs(created)
        raise DataConfigError(f"--out {out_dir}: cannot write in {out_dir.parent} ({exc.strerror})") from None
    # mkdtemp makes the dir private (0700); the data dir gets the usual mode
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(work, 0o777 & ~umask)
    return work


def _encoder_for(spec: BuildSpec, tok: Tokenizer, text_paths: list[str]) -> Encoder:
    """The text channels' encoder (SFT pairs and eval sets are encoded by the tokenizer itself)."""
    sample = verification_sample(text_paths, spec.one_per_line) if text_paths and spec.encoder != "tokenizers" else []
    try:
        return choose_encoder(tok, sample, spec.encoder)
    except EncoderMismatch as exc:
        raise DataConfigError(f"--encoder tiktoken: {exc}") from None


def build_data(spec: BuildSpec, tok: Tokenizer, progress: bool | None = None) -> BuildResult:
    """Build (or find up to date) the data dir described by `spec`, tokenized with `tok`."""
    spec.validate()
    out_dir = Path(spec.out_dir)
    all_paths = [p for paths in spec.text.values() for p in paths] + [p for paths in spec.sft.values() for p in paths]
    all_paths += list(spec.evals.values()) + list(spec.tasks.values())
    for path in all_paths:
        if not Path(path).is_file():
            raise DataError(f"{path}: no such file")
    _check_out_dir(out_dir, all_paths + ([spec.tokenizer] if spec.tokenizer else []))
    hashes = _hash_inputs(all_paths)
    key = _build_key(spec, tok, hashes)
    existing = _existing_manifest(out_dir)
    if existing is not None and existing.get("build_key") == key and _all_files_present(out_dir, existing):
        return BuildResult(out_dir, existing, True, {})

    dtype = token_dtype(tok.vocab_size)
    text_paths = [p for paths in spec.text.values() for p in paths]
    jobs = spec.jobs or text_shards.default_jobs(sum(os.path.getsize(p) for p in text_paths))
    encoder = _encoder_for(spec, tok, text_paths)
    local = text_shards.ChunkEncoder(tok, encoder, dtype, spec.one_per_line, skip_bad=spec.on_bad_line == "skip")
    created = _make_parents(out_dir)
    work = _work_dir(out_dir, created)
    total = sum(os.path.getsize(p) for paths in [*spec.text.values(), *spec.sft.values()] for p in paths)
    bar = _Progress(total, progress)
    try:
        tok.save(work / TOKENIZER_FILE)
        channels: dict[str, dict] = {}
        chars_per_token = max_chars_per_token(tok)
        for name, paths in spec.text.items():
            channels[name] = _write_text_channel(name, paths, spec, local, jobs, work, hashes, bar)
        for name, paths in spec.sft.items():
            channels[name] = _write_sft_channel(name, paths, spec, tok, dtype, work, hashes, bar, chars_per_token)
        (work / "evals").mkdir()
        evals = {name: _copy_eval(name, path, spec, tok, work, hashes, chars_per_token) for name, path in spec.evals.items()}
        tasks = copy_tasks(spec.tasks, work, hashes)
        manifest = {
            "format": FORMAT,
            "tokenizer_hash": tok.hash,
            "tokenizer": TOKENIZER_FILE,
            "tokenizer_kind": tok.kind,
            "vocab_size": tok.vocab_size,
            "build_key": key,
            "options": {"one_per_line": spec.one_per_line, "on_bad_line": spec.on_bad_line, "seq_len": spec.seq_len,
                        "encoder": spec.encoder},
            "encoder": encoder.describe(),  # what encoded the text channels, and why
            "channels": channels,
            "evals": evals,
            **({"tasks": tasks} if tasks else {}),
        }
        (work / MANIFEST).write_text(json.dumps(manifest, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        bar.close()
        _replace_dir(work, out_dir)
    except BaseException:
        bar.close()
        shutil.rmtree(work, ignore_errors=True)
        _remove_dirs(created)  # a failed build leaves no trace, not even the parents of --out
        raise
    skipped = {name: ch["skipped_lines"]["count"] for name, ch in channels.items() if ch["skipped_lines"]["count"]}
    return BuildResult(out_dir, manifest, False, skipped)
