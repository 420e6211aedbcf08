"""Part-of-speech tags of the eval sets, from Apertium's tagger, built once at `tatu data build`.

Portuguese sets go through the analysis half of Apertium's por-cat pipeline (Debian package
apertium-por-cat: lt-proc -w | cg-proc -w | apertium-tagger -g), English ones (a set whose name
starts with "en" and a capital letter, like enRuler) through eng-spa's (apertium-eng-spa:
lt-proc | apertium-tagger -g), all offline. The tagger never runs during a run: its output is
stored beside the eval file as evals/<name>.tags.jsonl and hashed in the manifest.

One JSON line per scored line of the set (the non-blank lines, in order): {"line": N,
"units": [[start, end, category, tag], ...]}: each lexical unit Apertium found, with its
character span in the scored text (the line; for pairs the response), the category it maps to
(CATEGORIES) and Apertium's first tag. tatu.evals.categories turns units into per-token category labels.

Without the packages there are no tags: the manifest says why and how to install them, and a
run reports no category metrics (one line), never a crash.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tatu.data.manifest import DataError
from tatu.debian import installed_version

TAGGER_PACKAGES: tuple[str, ...] = ("apertium-por-cat", "apertium-eng-spa")
APERTIUM_DIR = Path("/usr/share/apertium")

# The documented categories (docs/metrics.md) and the Apertium tags that map to each; a tag not
# listed (interjections, abbreviations) and a word Apertium does not know ("*") are "unknown".
CATEGORIES: tuple[str, ...] = ("noun", "proper", "verb", "adjective", "adverb", "function", "number", "unknown")
TAG_CATEGORY: dict[str, str] = {
    "n": "noun", "np": "proper",
    "vblex": "verb", "vbser": "verb", "vbhaver": "verb", "vbmod": "verb", "vaux": "verb", "vbdo": "verb",
    "adj": "adjective", "adv": "adverb", "preadv": "adverb",
    "det": "function", "predet": "function", "prn": "function", "pr": "function", "cnjcoo": "function",
    "cnjsub": "function", "cnjadv": "function", "rel": "function", "gen": "function",
    "num": "number",
}
PUNCTUATION_TAGS = frozenset({"sent", "cm", "lpar", "rpar", "lquest", "guio", "apos", "quot", "percent", "rquest"})
ESCAPED = set("\\[]^$/@<>{}")


@dataclass(frozen=True)
class Language:
    code: str
    package: str
    stages: tuple[tuple[str, ...], ...]  # the commands of the pipeline, in order


def _language(code: str) -> Language:
    if code == "eng":
        d = APERTIUM_DIR / "apertium-eng-spa"
        return Language("eng", "apertium-eng-spa", (("lt-proc", str(d / "eng-spa.automorf.bin")),
                                                     ("apertium-tagger", "-g", "-p", str(d / "eng-spa.prob"))))
    d = APERTIUM_DIR / "apertium-por-cat"
    return Language("por", "apertium-por-cat", (("lt-proc", "-w", str(d / "por-cat.automorf.bin")),
                                                 ("cg-proc", "-w", str(d / "por-cat.rlx.bin")),
                                                 ("apertium-tagger", "-g", "-p", str(d / "por-cat.prob"))))


def language_of(set_name: str) -> str:
    """"eng" for an English set (enRuler, enNews: "en" and a capital), else "por"."""
    return "eng" if re.match(r"en[A-Z]", set_name) else "por"


def tagger_problem(code: str) -> str | None:
    """Why this language cannot be tagged here (None when it can): one line with the command."""
    language = _language(code)
    missing = [stage[0] for stage in language.stages if shutil.which(stage[0]) is None]
    files = [arg for stage in language.stages for arg in stage[1:] if arg.startswith("/") and not Path(arg).is_file()]
    if missing or files:
        return f"{language.package} is not installed ({', '.join(missing + files)} missing)"
    return None


def untagged_line(entries: dict) -> str | None:
    """One line for every set of a manifest (`evals` entries) that has no tags: why, and how to
    get them; None when every set has its tags."""
    problems = []
    for entry in entries.values():
        tags = entry.get("tags")
        problem = "the data dir was built without tags" if tags is None else tags.get("error")
        if problem and problem not in problems:
            problems.append(problem)
    if not problems:
        return None
    return (f"no category metrics: {'; '.join(problems)}; install the taggers with: apt-get install -y "
            f"{' '.join(TAGGER_PACKAGES)}, then rebuild the data dir with `tatu data build`")


def tagger_versions() -> dict[str, str | None]:
    """{package: installed version or None}: part of the build key, so installing or upgrading
    the tagger rebuilds the tags."""
    return {package: installed_version(package) for package in TAGGER_PACKAGES}


def _escape(text: str) -> str:
    # the stream format's reserved characters; a newline would end the line, so it becomes a space
    return "".join("\\" + ch if ch in ESCAPED else (" " if ch in "\n\r" else ch) for ch in text)


def run_tagger(texts: list[str], code: str) -> list[str]:
    """Apertium's output, one line per text (the stream format, escapes kept)."""
    language = _language(code)
    data = "".join(_escape(t) + "\n" for t in texts).encode("utf-8")
    for stage in language.stages:
        done = subprocess.run(list(stage), input=data, capture_output=True, check=False)
        if done.returncode != 0:
            raise DataError(f"{' '.join(stage)} failed ({done.returncode}): "
                            f"{done.stderr.decode('utf-8', 'replace').strip()[-300:]}")
        data = done.stdout
    lines = data.decode("utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) != len(texts):
        raise DataError(f"{language.package}: tagged {len(texts)} lines but got {len(lines)} back")
    return lines


def lexical_units(tagged: str) -> list[tuple[str, str]]:
    """(surface, analysis) of each ^...$ unit of one output line, escapes resolved."""
    units, i, n = [], 0, len(tagged)
    while i < n:
        ch = tagged[i]
        if ch == "\\":
            i += 2
            continue
        if ch != "^":
            i += 1
            continue
        i += 1
        parts, current = [], []
        while i < n and tagged[i] != "$":
            if tagged[i] == "\\" and i + 1 < n:
                current.append(tagged[i + 1])
                i += 2
                continue
            if tagged[i] == "/" and not parts:
                parts.append("".join(current))
                current = []
            else:
                current.append(tagged[i])
            i += 1
        parts.append("".join(current))
        i += 1
        if len(parts) == 2:
            units.append((parts[0], parts[1]))
    return units


def category_of(analysis: str) -> tuple[str, str]:
    """(category, first tag) of an analysis like "de<pr>+o<det><def>" or "*tatu"."""
    if analysis.startswith("*"):
        return "unknown", "*"
    match = re.search(r"<([^>]+)>", analysis.split("+")[0])
    tag = match.group(1) if match else ""
    if tag in PUNCTUATION_TAGS:
        return "punct", tag
    return TAG_CATEGORY.get(tag, "unknown"), tag


def align(text: str, units: list[tuple[str, str]]) -> list[list]:
    """[start, end, category, tag] of each unit found in `text`, in order (a unit the tagger
    added, like the sentence end it appends, is not in the text and is left out)."""
    out, position = [], 0
    for surface, analysis in units:
        start = text.find(surface, position) if surface else -1
        if start < 0:
            continue
        category, tag = category_of(analysis)
        out.append([start, start + len(surface), category, tag])
        position = start + len(surface)
    return out


def tag_texts(texts: list[str], code: str) -> list[list[list]]:
    """The aligned units of every text (see align)."""
    return [align(text, lexical_units(line)) for text, line in zip(texts, run_tagger(texts, code))]


def write_tags(name: str, texts: list[tuple[int, str]], work: Path) -> dict:
    """Tag one eval set's scored texts ((line number, text) per scored line) into
    work/evals/<name>.tags.jsonl; returns its manifest entry (or why there are no tags)."""
    code = language_of(name)
    problem = tagger_problem(code)
    if problem:
        return {"error": problem}
    started = time.perf_counter()
    tagged = tag_texts([t for _, t in texts], code)
    seconds = time.perf_counter() - started
    rel = f"evals/{name}.tags.jsonl"
    body = "".join(json.dumps({"line": number, "units": units}, ensure_ascii=False) + "\n"
                   for (number, _), units in zip(texts, tagged))
    (work / rel).write_text(body, encoding="utf-8")
    n_units = sum(len(u) for u in tagged)
    return {"file": rel, "sha256": hashlib.sha256(body.encode("utf-8")).hexdigest(), "language": code,
            "package": _language(code).package, "units": n_units, "seconds": round(seconds, 3),
            "units_per_s": round(n_units / seconds, 1) if seconds > 0 else None}


def read_tags(path: Path, sha256: str) -> list[list[list]]:
    """The stored units of a set, refused (DataError, exit 65) when the file is not the one built."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DataError(f"{path}: cannot read the tags ({exc.strerror})") from None
    if hashlib.sha256(data).hexdigest() != sha256:
        raise DataError(f"{path}: its sha256 is not the manifest's: the tags were edited after `tatu data build`; "
                        "rebuild the data dir")
    return [json.loads(line)["units"] for line in data.decode("utf-8").splitlines() if line.strip()]
