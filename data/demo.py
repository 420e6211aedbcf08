"""Offline demo data: raw text files for the trunk, replay, SFT and the eval sets.

All third-party text comes from Debian packages (and the documentation that ships inside
Python) installed on the machine, never from the repository. The SFT pairs are generated
by tatu.data.sft_gen. Everything is deterministic for (seed, scale, installed versions);
the versions are recorded in sources.json.

Eval lines are taken from held-out documents only, and any eval line that still occurs
inside the training text (the sources repeat themselves: the three focalinux volumes share
paragraphs) is dropped, so no eval line is ever trained on.
"""
from __future__ import annotations

import functools
import gzip
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import textwrap
import unicodedata
from dataclasses import asdict, dataclass
from pathlib import Path

from tatu.data.sft_gen import generate_pairs
from tatu.data.task_gen import TASKS, generate_task, language_task, source_task

# The one list of Debian packages the demo reads (the README names these).
DEMO_PACKAGES: tuple[str, ...] = ("focalinux-text", "fortunes-br", "wbrazilian", "fortunes",
                                  "fortunes-min", "debian-faq-pt")

FOCALINUX_FILES = tuple(f"/usr/share/doc/focalinux/text/{volume}/index.txt.gz"
                        for volume in ("iniciante", "intermediario", "avancado"))
FORTUNES_BR_FILE = "/usr/share/games/fortunes/brasil"
WORDLIST_FILE = "/usr/share/dict/brazilian"
# The held-out domain: the Debian FAQ in European Portuguese. No training source reads it, so
# its change vs step 0 measures generalisation to another variety and genre (questions and
# answers), not to more of the training distribution.
FAQ_FILE = "/usr/share/doc/debian/FAQ/debian-faq.pt.txt.gz"
HELD_OUT_FILE = "pt_faq.txt"
FORTUNES_DIR = "/usr/share/games/fortunes"
# fortune files that are pictures or meta-notes rather than sentences
FORTUNES_SKIP = {"ascii-art", "translate-me", "disclaimer"}


@dataclass(frozen=True)
class DemoScale:
    pt_corpus_max_chars: int
    en_corpus_max_chars: int
    pt_val_lines: int
    en_ruler_lines: int
    sft_train_pairs: int
    sft_held_pairs: int
    words: int | None  # None: the whole word list
    eval_min_chars: int = 20
    eval_max_chars: int = 300
    held_out_lines: int = 200  # lines of HELD_OUT_FILE
    task_items: int = 40  # items of each multiple-choice task (what they cost per eval: bench/categories.py)


SCALES: dict[str, DemoScale] = {
    # the operator's eval sizes; corpora small enough to tokenize and train on 2 cores in minutes
    "demo": DemoScale(pt_corpus_max_chars=4_000_000, en_corpus_max_chars=2_500_000,
                      pt_val_lines=390, en_ruler_lines=166, sft_train_pairs=4000,
                      sft_held_pairs=100, words=None),
    # for tests: seconds
    "tiny": DemoScale(pt_corpus_max_chars=40_000, en_corpus_max_chars=40_000,
                      pt_val_lines=24, en_ruler_lines=16, sft_train_pairs=200,
                      sft_held_pairs=20, words=2000, held_out_lines=12, task_items=10),
}


class DemoPackagesError(RuntimeError):
    """A Debian package the demo needs is missing and cannot be installed from here."""


# --- Debian packages ----------------------------------------------------------------------

def _dpkg_query(fmt: str, package: str) -> str | None:
    if shutil.which("dpkg-query") is None:
        raise DemoPackagesError(
            "dpkg-query not found: the demo data needs a Debian-based system with the packages "
            + " ".join(DEMO_PACKAGES))
    done = subprocess.run(["dpkg-query", "-W", f"-f={fmt}", package],
                          capture_output=True, text=True, check=False)
    return done.stdout if done.returncode == 0 else None


def package_version(package: str) -> str | None:
    """Installed version of a Debian package, None when it is not installed."""
    status = _dpkg_query("${db:Status-Abbrev}", package)
    if status is None or not status.startswith("ii"):
        return None
    return _dpkg_query("${Version}", package)


def missing_demo_packages() -> list[str]:
    return [package for package in DEMO_PACKAGES if package_version(package) is None]


def installed_versions() -> dict[str, str]:
    """{package: version} of DEMO_PACKAGES; DemoPackagesError naming the command when one is
    missing (`tatu data demo` installs them first when it runs as root: tatu.ops.packages)."""
    missing = missing_demo_packages()
    if missing:
        raise DemoPackagesError(
            f"missing Debian packages for the demo data: {', '.join(missing)}; "
            f"install them with: sudo apt-get update && sudo apt-get install -y {' '.join(missing)}")
    return {package: package_version(package) or "" for package in DEMO_PACKAGES}


def _fortune_files(package: str) -> list[str]:
    """The fortune text files a package ships (its .dat indexes and .u8 links left out)."""
    listed = subprocess.run(["dpkg-query", "-L", package], capture_output=True, text=True,
                            check=True).stdout.splitlines()
    return sorted(path for path in listed
                  if path.startswith(FORTUNES_DIR + "/") and os.path.isfile(path)
                  and not os.path.islink(path) and "." not in os.path.basename(path)
                  and os.path.basename(path) not in FORTUNES_SKIP)


# --- decoding and extraction -------------------------------------------------------------

def decode_lines(raw: bytes, fallback: str) -> tuple[list[str], int]:
    """Lines decoded as UTF-8, else as `fallback`; lines with control characters are dropped.

    Returns (lines, number dropped). Backspace overstriking (fortune's bold/underline) is
    removed first, since it is formatting, not text.
    """
    lines, dropped = [], 0
    for raw_line in raw.split(b"\n"):
        raw_line = _strip_overstrike(raw_line.rstrip(b"\r"))
        try:
            line = raw_line.decode("utf-8")
        except UnicodeDecodeError:
            try:
                line = raw_line.decode(fallback)
            except UnicodeDecodeError:
                dropped += 1
                continue
        line = line.expandtabs(8).rstrip()
        if any(unicodedata.category(ch) == "Cc" for ch in line):
            dropped += 1
            continue
        lines.append(line)
    return lines, dropped


def _strip_overstrike(raw_line: bytes) -> bytes:
    # "___\b\b\bonly" underlines "only": each backspace cancels the character before it
    while b"\x08" in raw_line:
        shorter = re.sub(rb"[^\x08]\x08", b"", raw_line)
        if shorter == raw_line:
            break  # a backspace at the start of a line: left for the control check
        raw_line = shorter
    return raw_line


def _blocks(lines: list[str]) -> list[list[str]]:
    """Runs of non-blank lines."""
    blocks, current = [], []
    for line in lines:
        if line.strip():
            current.append(line)
        elif current:
            blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    return blocks


def _letters_share(text: str) -> float:
    visible = [ch for ch in text if not ch.isspace()]
    return sum(ch.isalpha() for ch in visible) / max(1, len(visible))


def focalinux_documents(lines: list[str]) -> list[str]:
    """Prose paragraphs of the Foca GNU/Linux guide, each joined into one line.

    Prose is indented exactly five columns; code, configuration files and shell sessions
    sit at column 0 or deeper, and headings are underlined: both are left out.
    """
    documents = []
    for block in _blocks(lines):
        if not re.match(r" {5}\S", block[0]) or not all(re.match(r" {5,}\S", ln) for ln in block):
            continue
        text = " ".join(" ".join(block).split())
        text = re.sub(r"`([^`']*)'", r"\1", text)  # `comando' quoting
        text = re.sub(r"(?<!\w)_(\S(?:[^_]*\S)?)_(?!\w)", r"\1", text)  # _ênfase_
        # the tables of contents are lists of section numbers ("20.1.2. Instalar pacotes")
        if len(re.findall(r"\d+\.\d+\.", text)) >= 3:
            continue
        if len(text) >= 20 and _letters_share(text) >= 0.7:
            documents.append(text)
    return documents


def faq_documents(lines: list[str]) -> list[str]:
    """Prose paragraphs of the Debian FAQ's text version: blocks indented exactly four columns
    (deeper ones are lists, commands and examples; column 0 holds the headings)."""
    documents = []
    for block in _blocks([ln.replace("\xa0", " ") for ln in lines]):  # the text wraps at no-break spaces too
        if not all(re.match(r" {4}\S", ln) for ln in block):
            continue
        text = " ".join(" ".join(block).split())
        if len(re.findall(r"\d+\.\d+\.", text)) >= 3:  # tables of contents
            continue
        if len(text) >= 20 and _letters_share(text) >= 0.7:
            documents.append(text)
    return documents


def held_out_lines(n_lines: int, rng: random.Random, min_chars: int, max_chars: int) -> list[str]:
    """`n_lines` one-line texts of the FAQ, from its paragraphs in seeded order."""
    lines, dropped = _read_source(FAQ_FILE, "latin-1")
    documents = faq_documents(list(lines))
    rng.shuffle(documents)
    out, seen = [], set()
    for document in documents:
        for line in eval_candidates(document, min_chars, max_chars):
            if line not in seen and len(out) < n_lines:
                seen.add(line)
                out.append(line)
    return out


def fortune_documents(lines: list[str]) -> list[str]:
    """Fortunes ('%'-separated), keeping their line breaks but no blank lines inside."""
    documents, current = [], []
    for line in [*lines, "%"]:
        if line.strip() == "%":
            text = textwrap.dedent("\n".join(ln for ln in current if ln.strip()))
            if len(text) >= 20 and _letters_share(text) >= 0.6:
                documents.append(text)
            current = []
        else:
            current.append(line)
    return documents


def pydoc_documents(topics: dict[str, str]) -> list[str]:
    """Prose paragraphs of Python's own reference text (pydoc_data.topics)."""
    documents = []
    for name in sorted(topics):
        for block in _blocks(topics[name].splitlines()):
            # indented blocks are code or grammar; underlines mark headings
            if any(ln[0].isspace() or re.fullmatch(r"[*=\-~^]+", ln) for ln in block):
                continue
            text = " ".join(" ".join(block).split())
            if len(text) >= 20 and _letters_share(text) >= 0.7 and text[-1] in ".:?!)":
                documents.append(text)
    return documents


@dataclass
class SourceText:
    package: str
    version: str
    path: str
    documents: list[str]
    dropped_lines: int


@functools.lru_cache(maxsize=None)
def _read_source(path: str, fallback: str) -> tuple[tuple[str, ...], int]:
    if not os.path.isfile(path):
        raise DemoPackagesError(f"{path}: not found although its package is installed")
    raw = Path(path).read_bytes()
    if path.endswith(".gz"):
        raw = gzip.decompress(raw)
    lines, dropped = decode_lines(raw, fallback)
    return tuple(lines), dropped


def portuguese_sources(versions: dict[str, str]) -> list[SourceText]:
    sources = []
    for path in FOCALINUX_FILES:
        lines, dropped = _read_source(path, "latin-1")
        sources.append(SourceText("focalinux-text", versions["focalinux-text"], path,
                                  focalinux_documents(list(lines)), dropped))
    lines, dropped = _read_source(FORTUNES_BR_FILE, "latin-1")
    sources.append(SourceText("fortunes-br", versions["fortunes-br"], FORTUNES_BR_FILE,
                              fortune_documents(list(lines)), dropped))
    return sources


def english_sources(versions: dict[str, str]) -> list[SourceText]:
    sources = []
    for package in ("fortunes-min", "fortunes"):
        for path in _fortune_files(package):
            lines, dropped = _read_source(path, "latin-1")
            sources.append(SourceText(package, versions[package], path,
                                      fortune_documents(list(lines)), dropped))
    import pydoc_data.topics  # part of the standard library; its text changes with Python

    sources.append(SourceText("python", sys.version.split()[0], pydoc_data.topics.__file__,
                              pydoc_documents(pydoc_data.topics.topics), 0))
    return sources


# --- split --------------------------------------------------------------------------------

def _normalize(text: str) -> str:
    return " ".join(text.split())


def eval_candidates(document: str, min_chars: int, max_chars: int) -> list[str]:
    """One-line eval texts from a document: the whole of it if short enough, else sentences."""
    flat = _normalize(document)
    if min_chars <= len(flat) <= max_chars:
        return [flat]
    sentences = re.split(r"(?<=[.!?])\s+(?=[\"'(¿¡]?[A-ZÀ-Ý0-9])", flat)
    return [s for s in sentences if min_chars <= len(s) <= max_chars]


@dataclass
class Split:
    train: list[str]  # documents, in seeded shuffled order
    eval_lines: list[str]
    train_documents_by_path: dict[str, int]
    eval_requested: int
    eval_dropped_as_in_train: int
    documents_available: int
    duplicate_documents: int


def split_documents(sources: list[SourceText], n_eval: int, max_train_chars: int,
                    rng: random.Random, min_chars: int, max_chars: int) -> Split:
    """Dedupe documents, hold some out for `n_eval` eval lines, fill training up to a size."""
    seen: set[str] = set()
    documents: list[tuple[str, str]] = []  # (path, text)
    duplicates = 0
    for source in sources:
        for text in source.documents:
            key = _normalize(text).lower()
            if key in seen:
                duplicates += 1
                continue
            seen.add(key)
            documents.append((source.path, text))
    order = list(range(len(documents)))
    rng.shuffle(order)

    # Held-out documents give more candidates than needed: some are dropped below.
    wanted = n_eval + n_eval // 2 + 10
    candidates: list[str] = []
    candidate_set: set[str] = set()
    position = 0
    while position < len(order) and len(candidates) < wanted:
        for line in eval_candidates(documents[order[position]][1], min_chars, max_chars):
            if line not in candidate_set:
                candidate_set.add(line)
                candidates.append(line)
        position += 1

    train: list[str] = []
    by_path: dict[str, int] = {}
    chars = 0
    for index in order[position:]:
        path, text = documents[index]
        # the file is the documents joined by blank lines plus a final newline
        if chars + len(text) + 1 > max_train_chars:
            continue  # a shorter document further on may still fit
        train.append(text)
        by_path[path] = by_path.get(path, 0) + 1
        chars += len(text) + 2

    train_text = "\n".join(_normalize(text) for text in train)
    kept = [line for line in candidates if line not in train_text]
    return Split(train=train, eval_lines=kept[:n_eval], train_documents_by_path=by_path,
                 eval_requested=n_eval, eval_dropped_as_in_train=len(candidates) - len(kept),
                 documents_available=len(documents), duplicate_documents=duplicates)


# --- output -------------------------------------------------------------------------------

def _write(path: Path, text: str) -> dict:
    data = text.encode("utf-8")
    path.write_bytes(data)
    return {"bytes": len(data), "chars": len(text), "sha256": hashlib.sha256(data).hexdigest()}


def _source_records(sources: list[SourceText], used: dict[str, int]) -> list[dict]:
    return [{"package": s.package, "version": s.version, "path": s.path,
             "documents_read": len(s.documents), "documents_in_train": used.get(s.path, 0),
             "lines_dropped_undecodable_or_control_chars": s.dropped_lines} for s in sources]


def _text_outputs(out_dir: Path, language: str, sources: list[SourceText], split: Split,
                  corpus_name: str, eval_name: str) -> dict:
    corpus = _write(out_dir / corpus_name, "\n\n".join(split.train) + "\n")
    corpus["documents"] = len(split.train)
    corpus["documents_available_after_dedupe"] = split.documents_available
    corpus["duplicate_documents_dropped"] = split.duplicate_documents
    corpus["sources"] = _source_records(sources, split.train_documents_by_path)
    evaluation = _write(out_dir / eval_name, "".join(line + "\n" for line in split.eval_lines))
    evaluation["lines"] = len(split.eval_lines)
    evaluation["lines_requested"] = split.eval_requested
    evaluation["candidates_dropped_as_in_train"] = split.eval_dropped_as_in_train
    evaluation["note"] = (f"{language} lines from documents held out of {corpus_name}"
                          + ("" if len(split.eval_lines) == split.eval_requested
                             else "; fewer than requested: the sources ran short"))
    return {corpus_name: corpus, eval_name: evaluation}


def build_demo_sources(out_dir: Path, seed: int = 0, scale: str = "demo") -> dict:
    """Write the demo's raw text files into out_dir; return what sources.json records.

    Files: pt_corpus.txt, en_corpus.txt (documents separated by blank lines), pt_val.txt,
    en_ruler.txt, pt_faq.txt (one line each), sft_train.jsonl, sft_held.jsonl, pt_words.txt, sources.json.
    """
    if scale not in SCALES:
        raise ValueError(f"scale={scale!r}: expected one of {', '.join(SCALES)}")
    sizes = SCALES[scale]
    versions = installed_versions()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, dict] = {}

    # Each language: its sources split into a training corpus and held-out eval lines.
    languages = (
        ("pt", "Portuguese", portuguese_sources, sizes.pt_val_lines, sizes.pt_corpus_max_chars, "pt_corpus.txt", "pt_val.txt"),
        ("en", "English", english_sources, sizes.en_ruler_lines, sizes.en_corpus_max_chars, "en_corpus.txt", "en_ruler.txt"),
    )
    for code, language, read_sources, eval_lines, corpus_max_chars, corpus_file, eval_file in languages:
        sources = read_sources(versions)
        split = split_documents(sources, eval_lines, corpus_max_chars, random.Random(f"{seed}:{code}"),
                                sizes.eval_min_chars, sizes.eval_max_chars)
        files |= _text_outputs(out_dir, language, sources, split, corpus_file, eval_file)

    # Pairs never repeat a question, so the first sft_held_pairs are disjoint from the rest.
    pairs = generate_pairs(sizes.sft_held_pairs + sizes.sft_train_pairs, seed)
    for name, part in (("sft_held.jsonl", pairs[:sizes.sft_held_pairs]),
                       ("sft_train.jsonl", pairs[sizes.sft_held_pairs:])):
        files[name] = _write(out_dir / name, "".join(
            json.dumps(pair, ensure_ascii=False) + "\n" for pair in part))
        files[name] |= {"pairs": len(part), "source": "tatu.data.sft_gen.generate_pairs"}

    faq = held_out_lines(sizes.held_out_lines, random.Random(f"{seed}:faq"), sizes.eval_min_chars, sizes.eval_max_chars)
    files[HELD_OUT_FILE] = _write(out_dir / HELD_OUT_FILE, "".join(line + "\n" for line in faq))
    files[HELD_OUT_FILE] |= {"lines": len(faq), "lines_requested": sizes.held_out_lines,
                             "note": "held-out domain: European Portuguese Debian FAQ; no training source reads it",
                             "sources": [{"package": "debian-faq-pt", "version": versions["debian-faq-pt"],
                                          "path": FAQ_FILE}]}

    # multiple-choice tasks with checkable answers (tatu.data.task_gen); the language task's
    # lines are the held-out eval lines, never trained on
    pt_lines = (out_dir / "pt_val.txt").read_text(encoding="utf-8").splitlines()
    en_lines = (out_dir / "en_ruler.txt").read_text(encoding="utf-8").splitlines()
    tasks = {kind: generate_task(kind, sizes.task_items, seed) for kind in TASKS}
    tasks["language"] = language_task(pt_lines, en_lines, sizes.task_items, seed)
    tasks["source"] = source_task(faq, pt_lines, sizes.task_items, seed)
    for kind, items in tasks.items():
        name = f"task_{kind}.jsonl"
        files[name] = _write(out_dir / name, "".join(json.dumps(i, ensure_ascii=False) + "\n" for i in items))
        files[name] |= {"items": len(items), "source": "tatu.data.task_gen"}

    word_lines, dropped = _read_source(WORDLIST_FILE, "latin-1")
    words = sorted({w.strip() for w in word_lines if w.strip()})
    if sizes.words is not None and sizes.words < len(words):
        words = sorted(random.Random(f"{seed}:words").sample(words, sizes.words))
    files["pt_words.txt"] = _write(out_dir / "pt_words.txt", "".join(w + "\n" for w in words))
    files["pt_words.txt"] |= {"words": len(words), "sources": [{
        "package": "wbrazilian", "version": versions["wbrazilian"], "path": WORDLIST_FILE,
        "lines_dropped_undecodable_or_control_chars": dropped}]}

    record = {"seed": seed, "scale": scale, "sizes": asdict(sizes), "packages": versions,
              "files": files}
    (out_dir / "sources.json").write_text(
        json.dumps(record, ensure_ascii=False, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return record
