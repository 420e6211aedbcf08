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
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from tatu.data.demo.split import Split, held_out_lines, split_documents
from tatu.data.demo.text import SourceText, decode_lines, focalinux_documents, fortune_documents, pydoc_documents
from tatu.data.sft_gen import generate_pairs, generate_pretraining_pairs
from tatu.data.task_gen import TASKS, generate_task, language_task, source_task
from tatu.debian import dpkg_available, installed_version

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
# the SFT tasks in other phrasings, in the chat layout: pretraining text only (ops/demo.py)
CHAT_PRETRAIN_FILE = "chat_pretrain.jsonl"
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
    # pairs of the SFT tasks in other phrasings, in the chat layout, that the trunk pretrains on
    # (chat_pretrain.jsonl): it knows the format and the tasks before SFT, so sftHeld's change
    # measures learning the pairs, not the format
    chat_pretrain_pairs: int = 0
    # tatu.data.sft_gen's task mix of the SFT pairs and of the pretraining pairs: "rules", tasks whose
    # answer follows from the prompt by one rule (copy, a date's month in words, a number below 100 in
    # words), which a small model learns in minutes (docs/answers.md)
    task_mix: str = "rules"


SCALES: dict[str, DemoScale] = {
    # the operator's eval sizes; corpora small enough to tokenize and train on 2 cores in minutes
    "demo": DemoScale(pt_corpus_max_chars=4_000_000, en_corpus_max_chars=2_500_000,
                      pt_val_lines=390, en_ruler_lines=166, sft_train_pairs=4000,
                      sft_held_pairs=100, words=None, chat_pretrain_pairs=24000),
    # for tests: seconds
    "tiny": DemoScale(pt_corpus_max_chars=40_000, en_corpus_max_chars=40_000,
                      pt_val_lines=24, en_ruler_lines=16, sft_train_pairs=200,
                      sft_held_pairs=20, words=2000, held_out_lines=12, task_items=10, chat_pretrain_pairs=200),
}


class DemoPackagesError(RuntimeError):
    """A Debian package the demo needs is missing and cannot be installed from here."""


# --- Debian packages ----------------------------------------------------------------------

def package_version(package: str) -> str | None:
    """Installed version of a Debian package, None when it is not installed."""
    if not dpkg_available():
        raise DemoPackagesError(
            "dpkg-query not found: the demo data needs a Debian-based system with the packages "
            + " ".join(DEMO_PACKAGES))
    return installed_version(package)


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


def _held_out_outputs(out_dir: Path, sizes: DemoScale, seed: int, versions: dict[str, str]) -> dict[str, dict]:
    """The held-out domain (pt_faq.txt) and the multiple-choice tasks (task_*.jsonl); the
    language task reads the eval lines already written, never trained on."""
    outputs: dict[str, dict] = {}
    faq_lines, _ = _read_source(FAQ_FILE, "latin-1")
    faq = held_out_lines(faq_lines, sizes.held_out_lines, random.Random(f"{seed}:faq"), sizes.eval_min_chars,
                         sizes.eval_max_chars)
    outputs[HELD_OUT_FILE] = _write(out_dir / HELD_OUT_FILE, "".join(line + "\n" for line in faq))
    outputs[HELD_OUT_FILE] |= {"lines": len(faq), "lines_requested": sizes.held_out_lines,
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
        outputs[name] = _write(out_dir / name, "".join(json.dumps(i, ensure_ascii=False) + "\n" for i in items))
        outputs[name] |= {"items": len(items), "source": "tatu.data.task_gen"}
    return outputs


def build_demo_sources(out_dir: Path, seed: int = 0, scale: str = "demo") -> dict:
    """Write the demo's raw text files into out_dir; return what sources.json records.

    Files: pt_corpus.txt, en_corpus.txt (documents separated by blank lines), pt_val.txt,
    en_ruler.txt, pt_faq.txt (one line each), sft_train.jsonl, sft_held.jsonl, chat_pretrain.jsonl,
    pt_words.txt, sources.json.
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
    n_sft = sizes.sft_held_pairs + sizes.sft_train_pairs
    pairs = generate_pairs(n_sft, seed, mix=sizes.task_mix)
    for name, part in (("sft_held.jsonl", pairs[:sizes.sft_held_pairs]),
                       ("sft_train.jsonl", pairs[sizes.sft_held_pairs:])):
        files[name] = _write(out_dir / name, "".join(
            json.dumps(pair, ensure_ascii=False) + "\n" for pair in part))
        files[name] |= {"pairs": len(part), "source": f"tatu.data.sft_gen.generate_pairs (mix {sizes.task_mix})"}

    files |= _held_out_outputs(out_dir, sizes, seed, versions)

    word_lines, dropped = _read_source(WORDLIST_FILE, "latin-1")
    words = sorted({w.strip() for w in word_lines if w.strip()})
    if sizes.words is not None and sizes.words < len(words):
        words = sorted(random.Random(f"{seed}:words").sample(words, sizes.words))
    files["pt_words.txt"] = _write(out_dir / "pt_words.txt", "".join(w + "\n" for w in words))
    files["pt_words.txt"] |= {"words": len(words), "sources": [{
        "package": "wbrazilian", "version": versions["wbrazilian"], "path": WORDLIST_FILE,
        "lines_dropped_undecodable_or_control_chars": dropped}]}

    # past every SFT pair's question
    chat = generate_pretraining_pairs(sizes.chat_pretrain_pairs, seed, after=n_sft, mix=sizes.task_mix)
    files[CHAT_PRETRAIN_FILE] = _write(out_dir / CHAT_PRETRAIN_FILE, "".join(
        json.dumps(pair, ensure_ascii=False) + "\n" for pair in chat))
    files[CHAT_PRETRAIN_FILE] |= {"pairs": len(chat), "source": "tatu.data.sft_gen.generate_pretraining_pairs",
                                     "note": "pretraining text in the chat layout: the SFT tasks in other phrasings, "
                                             "no question of sft_train.jsonl or sft_held.jsonl"}

    record = {"seed": seed, "scale": scale, "sizes": asdict(sizes), "packages": versions,
              "files": files}
    (out_dir / "sources.json").write_text(
        json.dumps(record, ensure_ascii=False, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return record
