"""A text channel's shard, streamed: sources -> chunks cut at document boundaries -> encoded in
order (in this process, or in worker processes over every core for big inputs) -> one file.

Each chunk is a byte range of one source that ends where a document ends (after an empty line;
after any line for one-per-line text and JSONL), with the line number it starts at, so a worker
reports FILE:LINE exactly as a reader of the whole file would, and the shard is the same bytes
whichever way and wherever the chunks were encoded. At most 2 chunks per worker are in flight:
memory stays flat in the corpus size. The encoder is chosen here too: tiktoken where it gives
the tokenizer's ids on adversarial strings and on a sample of these sources (model/encoders.py).
"""
from __future__ import annotations

import multiprocessing
import os
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator

import numpy as np

from tatu.data.bad_lines import BadLines
from tatu.data.documents import Document, documents_in, is_jsonl, plain_texts, read_documents
from tatu.data.manifest import DataConfigError, DataError, chars_per_token_ratio
from tatu.data.sft import BadLine
from tatu.model.encoders import Encoder, EncoderMismatch, choose_encoder, named_encoder
from tatu.model.tokenizer import Tokenizer
from tatu.model.tokenizer_json import tokenizer_from_dict

CHUNK_BYTES = 1 << 20
# below this many source bytes, starting worker processes costs more than it gains
PARALLEL_BYTES = 16 << 20
SAMPLE_BYTES = 256 << 10  # per text source, the fast encoder's check against the tokenizer


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


def encoder_for(tok: Tokenizer, text_paths: list[str], one_per_line: bool, wanted: str) -> Encoder:
    """The text channels' encoder (SFT pairs and eval sets are encoded by the tokenizer itself)."""
    sample = verification_sample(text_paths, one_per_line) if text_paths and wanted != "tokenizers" else []
    try:
        return choose_encoder(tok, sample, wanted)
    except EncoderMismatch as exc:
        raise DataConfigError(f"--encoder tiktoken: {exc}") from None


@dataclass(frozen=True)
class Chunk:
    path: str
    offset: int
    length: int
    first_line: int


def _boundaries(path: str, one_per_line: bool) -> tuple[bytes, ...]:
    # an empty line (LF or CRLF) ends a block; in one-line-per-document sources every line ends one
    return (b"\n",) if one_per_line or is_jsonl(path) else (b"\n\n", b"\n\r\n")


def chunks(path: str, one_per_line: bool, chunk_bytes: int = CHUNK_BYTES) -> Iterator[Chunk]:
    """Byte ranges of `path` of about `chunk_bytes`, each ending at a document boundary (a range
    grows past `chunk_bytes` until one comes: a document is never cut)."""
    markers = _boundaries(path, one_per_line)
    offset, line = 0, 1
    pending = b""
    with open(path, "rb") as handle:
        while True:
            block = handle.read(chunk_bytes)
            pending += block
            cut = 0
            for marker in markers:  # the last boundary; each later marker is looked for after it only
                at = pending.rfind(marker, max(cut - len(marker) + 1, 0))
                cut = at + len(marker) if at >= 0 else cut
            if not block:
                cut = len(pending)
            if cut:
                yield Chunk(path, offset, cut, line)
                line += pending.count(b"\n", 0, cut)
                offset += cut
                pending = pending[cut:]
            if not block:
                return


@dataclass
class ChunkResult:
    tokens: bytes  # BOS + ids + EOS of each document, in the shard's dtype
    documents: int = 0
    tokens_in_text: int = 0  # ids without BOS/EOS
    chars: int = 0
    bad: list[BadLine] = field(default_factory=list)
    n_bytes: int = 0


class ChunkEncoder:
    """Reads and encodes chunks; stops at a chunk's first bad line unless told to skip them."""

    def __init__(self, tok: Tokenizer, encoder: Encoder, dtype: np.dtype, one_per_line: bool, skip_bad: bool):
        self.tok, self.encoder, self.dtype = tok, encoder, np.dtype(dtype)
        self.one_per_line, self.skip_bad = one_per_line, skip_bad

    def __call__(self, chunk: Chunk) -> ChunkResult:
        with open(chunk.path, "rb") as handle:
            handle.seek(chunk.offset)
            data = handle.read(chunk.length)
        texts = None if is_jsonl(chunk.path) else plain_texts(data, self.one_per_line)
        if texts is None:  # JSONL, or a line that is not UTF-8: a line at a time
            return self._line_by_line(data, chunk)
        ids = self.encoder.encode_documents(texts)
        return ChunkResult(ids.astype(self.dtype).tobytes(), len(texts), len(ids) - 2 * len(texts),
                           sum(map(len, texts)), [], chunk.length)

    def _line_by_line(self, data: bytes, chunk: Chunk) -> ChunkResult:
        docs: list[Document] = []
        bad: list[BadLine] = []
        for item in documents_in(data, chunk.path, chunk.first_line, self.one_per_line):
            if isinstance(item, BadLine):
                bad.append(item)
                if not self.skip_bad:
                    return ChunkResult(b"", bad=bad, n_bytes=chunk.length)
                continue
            docs.append(item)
        parts, texts = [], []
        for doc in docs:
            if doc.pair is None:
                texts.append(doc.text)
                continue
            # A pair is the SFT layout (BOS <|user|> prompt <|assistant|> response EOS), every
            # token a target: a trunk pretrained on it knows the chat format before SFT.
            if texts:
                parts.append(self.encoder.encode_documents(texts))
            parts.append(np.asarray(doc.pair.encode(self.tok)[0], dtype=np.uint32))
            texts = []
        parts.append(self.encoder.encode_documents(texts))
        ids = np.concatenate(parts)
        return ChunkResult(ids.astype(self.dtype).tobytes(), len(docs), len(ids) - 2 * len(docs),
                           sum(len(d.text) for d in docs), bad, chunk.length)


_WORKER: ChunkEncoder | None = None


def _start_worker(tok_dict: dict, encoder_name: str, dtype: str, one_per_line: bool, skip_bad: bool) -> None:
    """A worker's own tokenizer and encoder."""
    global _WORKER
    tok = tokenizer_from_dict(tok_dict)
    _WORKER = ChunkEncoder(tok, named_encoder(tok, encoder_name), np.dtype(dtype), one_per_line, skip_bad)


def _work(chunk: Chunk) -> ChunkResult:
    return _WORKER(chunk)


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def default_jobs(total_bytes: int) -> int:
    """Worker processes for `total_bytes` of sources: every core this process may use, for big inputs."""
    cores = usable_cores()
    return cores if total_bytes >= PARALLEL_BYTES and cores > 1 else 1


def encoded_chunks(all_chunks: Iterator[Chunk], local: ChunkEncoder, jobs: int) -> Iterator[ChunkResult]:
    """The chunks' results in order: here (jobs=1) or from `jobs` worker processes."""
    if jobs <= 1:
        yield from map(local, all_chunks)
        return
    init = (local.tok.to_dict(), local.encoder.name, local.dtype.name, local.one_per_line, local.skip_bad)
    # spawn: the parent may hold threads (tokenizers' pool) that a fork would copy half-locked
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"), initializer=_start_worker,
                             initargs=init) as pool:
        in_flight: deque = deque()
        for chunk in all_chunks:
            in_flight.append(pool.submit(_work, chunk))
            if len(in_flight) >= 2 * jobs:
                yield in_flight.popleft().result()
        while in_flight:
            yield in_flight.popleft().result()


def write_source(path: str, shard: BinaryIO, local: ChunkEncoder, jobs: int, on_bad: Callable[[BadLine], None],
                 progress: Callable[[int], None]) -> dict:
    """Append `path`'s documents to `shard`; its counts for the manifest."""
    counts = {"documents": 0, "tokens": 0, "chars": 0}
    for result in encoded_chunks(chunks(path, local.one_per_line, CHUNK_BYTES), local, jobs):
        for bad in result.bad:
            on_bad(bad)  # raises DataError unless bad lines are skipped
        shard.write(result.tokens)
        counts["documents"] += result.documents
        counts["tokens"] += result.tokens_in_text
        counts["chars"] += result.chars
        progress(result.n_bytes)
    return counts


def write_text_channel(name: str, paths: list[str], local: ChunkEncoder, jobs: int, work: Path,
                       hashes: dict[str, str], bad: BadLines, progress: Callable[[int], None]) -> dict:
    """Write channel `name`'s shard under `work`; its manifest entry."""
    (work / name).mkdir()
    rel = f"{name}/tokens.bin"
    sources, total_tokens, total_docs = [], 0, 0
    with open(work / rel, "wb") as shard:
        for path in paths:
            counts = write_source(path, shard, local, jobs, bad.handle, progress)
            n_docs, n_tokens, n_chars = counts["documents"], counts["tokens"], counts["chars"]
            sources.append({"path": str(Path(path).resolve()), "sha256": hashes[path], "bytes": os.path.getsize(path),
                            "documents": n_docs, "tokens": n_tokens, "chars": n_chars,
                            "chars_per_token": chars_per_token_ratio(n_chars, n_tokens)})
            total_tokens += n_tokens + 2 * n_docs
            total_docs += n_docs
    if total_docs == 0:
        raise DataError(f"channel {name!r}: no documents in {', '.join(paths)}")
    return {"kind": "text", "sources": sources, "files": {"tokens": rel}, "dtype": local.dtype.name,
            "documents": total_docs, "tokens": total_tokens,
            # every token but a BOS is predicted (BOS starts a document; nothing predicts it)
            "targets": total_tokens - total_docs,
            "skipped_lines": bad.record()}
