"""`tatu tokenizer train`: a char or byte-level BPE tokenizer from text and JSONL sources."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Iterator

from tatu.exitcodes import BAD_CONFIG, BAD_DATA, USAGE, TatuExit


def _err(line: str) -> None:
    print(line, file=sys.stderr)


def add_tokenizer_args(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    train = sub.add_parser("train", help="train a char or BPE tokenizer on text/JSONL sources")
    train.add_argument("--kind", choices=("bpe", "char"), required=True)
    train.add_argument("--vocab", type=int, default=None,
                       help="vocabulary size including bytes and specials (required for bpe; caps char)")
    train.add_argument("--out", required=True, help="tokenizer JSON to write")
    train.add_argument("--one-per-line", action="store_true",
                       help="text sources hold one document per line (default: blank-line separated)")
    train.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                       help="a progress bar over the sources' bytes on stderr (auto: when it is a terminal)")
    train.add_argument("sources", nargs="+", help="text files, or JSONL (pairs: prompt + response text)")


def _counted(texts: Iterator[str], seen: list[int]) -> Iterator[str]:
    """Pass `texts` through, counting them in seen[0] (training consumes the iterator)."""
    for text in texts:
        seen[0] += 1
        yield text


def tokenizer_main(args: argparse.Namespace) -> int:
    if args.action != "train":
        _err("usage: tatu tokenizer train --kind bpe|char [--vocab N] --out FILE SOURCES...")
        return USAGE
    from tatu.data.documents import training_texts
    from tatu.model.tokenizer import TokenizerError, train_tokenizer

    for path in args.sources:
        if not Path(path).is_file():
            raise TatuExit(BAD_DATA, f"{path}: no such file")
    out = Path(args.out)
    # refused before training, which can take a while
    if out.is_dir():
        raise TatuExit(BAD_CONFIG, f"--out {out}: is a directory; give the tokenizer JSON file to write")
    n_documents = [0]
    from tqdm import tqdm

    enabled = {"auto": sys.stderr.isatty(), "always": True, "never": False}[args.progress]
    bar = tqdm(total=sum(Path(p).stat().st_size for p in args.sources), unit="B", unit_scale=True,
               desc="tatu tokenizer train: reading", file=sys.stderr, disable=not enabled, leave=False)
    try:
        texts = training_texts(args.sources, args.one_per_line, progress=bar.update)
        tok = train_tokenizer(args.kind, _counted(texts, n_documents), args.vocab, show_progress=enabled)
    except TokenizerError as exc:
        raise TatuExit(BAD_CONFIG, str(exc)) from None
    finally:
        bar.close()
    if n_documents[0] == 0:
        raise TatuExit(BAD_DATA, f"{', '.join(args.sources)}: no documents to train a tokenizer on")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tok.save(out)
    except OSError as exc:
        raise TatuExit(BAD_CONFIG, f"--out {out}: cannot write the tokenizer: {exc.strerror or exc}") from None
    print(f"tokenizer {tok.kind}: vocab {tok.vocab_size}, hash {tok.hash[:12]} -> {out}")
    return 0
