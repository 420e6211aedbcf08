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

This module is the plan: what to build, whether it is up to date, and the manifest. Each part is
written by its own module: text_shards (text channels), sft_shards (SFT channels), eval_sets
(eval copies), tasks (multiple-choice tasks), out_dir (where and how the dir is replaced).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tatu.data import out_dir as dirs
from tatu.data import text_shards
from tatu.data.bad_lines import BadLines
from tatu.data.documents import is_jsonl
from tatu.data.eval_sets import copy_eval
from tatu.data.manifest import FORMAT, MANIFEST, TOKENIZER_FILE, DataError, token_dtype
from tatu.data.sft_shards import max_chars_per_token, write_sft_channel
from tatu.data.tags import tagger_versions
from tatu.data.tasks import copy_tasks
from tatu.formats import eval_name_problem
from tatu.model.encoders import ENCODERS, Encoder
from tatu.model.tokenizer import Tokenizer

ON_BAD_LINE = ("error", "skip")


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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


def _hash_inputs(paths: list[str]) -> dict[str, str]:
    try:
        return {p: file_sha256(p) for p in paths}
    except OSError as exc:
        raise DataError(f"{exc.filename}: cannot read ({exc.strerror})") from None


def _write_data_dir(spec: BuildSpec, tok: Tokenizer, work: Path, key: str, hashes: dict[str, str],
                    encoder: Encoder, progress: _Progress) -> dict:
    """Every part of the data dir, written under `work`; the manifest."""
    tok.save(work / TOKENIZER_FILE)
    dtype = token_dtype(tok.vocab_size)
    text_paths = [p for paths in spec.text.values() for p in paths]
    jobs = spec.jobs or text_shards.default_jobs(sum(os.path.getsize(p) for p in text_paths))
    local = text_shards.ChunkEncoder(tok, encoder, dtype, spec.one_per_line, skip_bad=spec.on_bad_line == "skip")
    channels: dict[str, dict] = {}
    for name, paths in spec.text.items():
        channels[name] = text_shards.write_text_channel(name, paths, local, jobs, work, hashes,
                                                        BadLines(spec.on_bad_line), progress.update)
    # what lets a pair or an eval line be refused by its length before it is tokenized (sft_shards.py)
    chars_per_token = max_chars_per_token(tok) if spec.sft or spec.evals else 0
    for name, paths in spec.sft.items():
        channels[name] = write_sft_channel(name, paths, tok, dtype, work, hashes, BadLines(spec.on_bad_line),
                                           spec.seq_len, progress.update, chars_per_token)
    (work / "evals").mkdir()
    evals = {name: copy_eval(name, path, tok, spec.seq_len, work, hashes, chars_per_token)
             for name, path in spec.evals.items()}
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
    return manifest


def build_data(spec: BuildSpec, tok: Tokenizer, progress: bool | None = None) -> BuildResult:
    """Build (or find up to date) the data dir described by `spec`, tokenized with `tok`."""
    spec.validate()
    out_dir = Path(spec.out_dir)
    all_paths = [p for paths in spec.text.values() for p in paths] + [p for paths in spec.sft.values() for p in paths]
    all_paths += list(spec.evals.values()) + list(spec.tasks.values())
    for path in all_paths:
        if not Path(path).is_file():
            raise DataError(f"{path}: no such file")
    dirs.check_out_dir(out_dir, all_paths + ([spec.tokenizer] if spec.tokenizer else []))
    hashes = _hash_inputs(all_paths)
    key = _build_key(spec, tok, hashes)
    existing = dirs.existing_manifest(out_dir)
    if existing is not None and existing.get("build_key") == key and dirs.all_files_present(out_dir, existing):
        return BuildResult(out_dir, existing, True, {})

    text_paths = [p for paths in spec.text.values() for p in paths]
    encoder = text_shards.encoder_for(tok, text_paths, spec.one_per_line, spec.encoder)
    created = dirs.make_parents(out_dir)
    work = dirs.work_dir(out_dir, created)
    total = sum(os.path.getsize(p) for paths in [*spec.text.values(), *spec.sft.values()] for p in paths)
    bar = _Progress(total, progress)
    try:
        manifest = _write_data_dir(spec, tok, work, key, hashes, encoder, bar)
        bar.close()
        dirs.replace_dir(work, out_dir)
    except BaseException:
        bar.close()
        shutil.rmtree(work, ignore_errors=True)
        dirs.remove_dirs(created)  # a failed build leaves no trace, not even the parents of --out
        raise
    skipped = {name: ch["skipped_lines"]["count"] for name, ch in manifest["channels"].items()
               if ch["skipped_lines"]["count"]}
    return BuildResult(out_dir, manifest, False, skipped)
