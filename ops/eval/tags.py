"""`tatu eval|compare --data DIR --category noun,verb`: the per-category results from the tags
`tatu data build` stored (tatu.data.tags, hash-checked: an edited file is exit 65)."""
from __future__ import annotations

import argparse

from tatu.data.manifest import DataError, load_manifest
from tatu.data.tags import CATEGORIES as TAG_CATEGORIES
from tatu.exitcodes import BAD_DATA, TatuExit


def manifest_entry(args: argparse.Namespace, name: str) -> dict | None:
    if args.data is None:
        return None
    try:
        return load_manifest(args.data)["evals"].get(name)
    except (DataError, KeyError, AttributeError):  # set_specs has already named an unreadable manifest
        return None


def why_untagged(args: argparse.Namespace, name: str) -> str:
    entry = manifest_entry(args, name)
    if entry is None:
        return "tags come with a data dir: give --data DIR (built by `tatu data build` with Apertium installed)"
    from tatu.data.tags import untagged_line

    return untagged_line({name: entry}) or "no tags"


def stored_tags(args: argparse.Namespace, name: str) -> list | None:
    """The set's stored units when --data has them (hash-checked: an edited file is exit 65)."""
    from tatu.data.tags import read_tags

    tags = (manifest_entry(args, name) or {}).get("tags") or {}
    if "file" not in tags:
        return None
    try:
        return read_tags(args.data / tags["file"], tags["sha256"])
    except DataError as exc:
        raise TatuExit(BAD_DATA, str(exc)) from None


def tag_categories(whole, eval_set, tokenizer, units, asked, args) -> dict:
    from tatu.evals.categories import category_results, token_categories, word_chars

    if len(units) != eval_set.n_lines_total:
        raise TatuExit(BAD_DATA, f"{eval_set.name}: {len(units)} tagged lines for {eval_set.n_lines_total} scored lines")
    categories = token_categories(eval_set, tokenizer, units)
    wanted = [c for c in asked if c in TAG_CATEGORIES]
    return category_results(whole, categories, word_chars(eval_set, tokenizer, categories), args.resamples, args.seed,
                            only=wanted)
