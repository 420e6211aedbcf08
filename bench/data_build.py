"""Does `tatu data build` keep up with the encoder, in flat memory? One run prints:

  - tatu vs the fastest raw encoder on the same documents. tatu: `tatu data build --jobs N` as a
    fresh process, the whole command (interpreter starts, hashing the inputs, the encoder's check,
    reading and splitting the source, encoding in N worker processes, writing the shard and the
    manifest). The raw encoders are given the very documents the build finds, already split and in
    this process's memory, and only encode them (nothing read, nothing written):
      tokenizers' encode_batch (its own thread pool over every core), tiktoken's
      encode_ordinary_batch (N threads), tiktoken's encode_ordinary one document at a time
      (1 thread), and tiktoken's encode_to_numpy on the documents of each ~1 MB joined with BOS/EOS
      special tokens: the call tatu's workers make, in 1 thread and in N threads.
    Ratios: the fastest raw encoder's wall / tatu's wall (target >= 0.95), and CPU seconds (raw /
    tatu's whole process tree), what a loaded host distorts least.
  - identical tokens (yes/no): the shard against BOS + tokenizers' ids + EOS of every document.
  - peak RSS of the build (its whole process tree, workers included, sampled every 20 ms) at two
    corpus sizes, and what one more MB of source costs;
  - `tatu tokenizer train` on each corpus: seconds and peak RSS (--no-train skips it).

The corpus is made from the demo's sources (`tatu data demo`: Debian packages, installed as
root): their documents repeated in a seeded shuffle up to --mb MB (the small size is --mb / 4).
The tokenizer: byte-level BPE of --vocab ids trained on the demo sources once.

    .venv/bin/python bench/data_build.py [--mb 32] [--vocab 8192] [--jobs N] [--no-train] [--keep DIR]

--sizes 100,1000 instead times the build (wall, CPU, peak RSS) at each size in MB, and the
leanest raw encoders (tiktoken's framed call in 1 and in N threads, and encode_ordinary a
document at a time, 1 thread) on its documents, checked against its shard ~1 MB at a time (the
checks' time taken off the raw side's clocks): holding every document's ids as the full run does
would take gigabytes at 1 GB.
"""
from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

from tatu.data.documents import read_documents
from tatu.data.manifest import load_manifest
from tatu.data.text_shards import usable_cores
from tatu.model.encoders import framed, tiktoken_encoder, tiktoken_encoding
from tatu.model.tokenizer_json import load_tokenizer

TATU = [sys.executable, "-m", "tatu.ops.cli"]


def corpus_documents(sources: Path, mb: float, seed: int) -> list[str]:
    """The corpus's documents: the demo sources' documents repeated in a seeded shuffle up to `mb` MB
    (the same str objects over and over: a 1 GB list of them costs little memory)."""
    docs = [d.text for name in ("pt_corpus.txt", "en_corpus.txt") for d in read_documents(sources / name)]
    rng, written, chosen = random.Random(seed), 0, []
    while written < mb * 1e6:
        batch = docs[:]
        rng.shuffle(batch)
        for text in batch:
            chosen.append(text)
            written += len(text.encode()) + 2
            if written >= mb * 1e6:
                break
    return chosen


def write_corpus(out: Path, docs: list[str]) -> None:
    with open(out, "w", encoding="utf-8") as handle:
        for i, text in enumerate(docs):
            handle.write(text + ("\n\n" if i + 1 < len(docs) else "\n"))


def make_corpus(sources: Path, out: Path, mb: float, seed: int) -> list[str]:
    chosen = corpus_documents(sources, mb, seed)
    write_corpus(out, chosen)
    return chosen


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def peak_rss_of(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, subprocess.CompletedProcess, float]:
    """(wall seconds, peak RSS in MB of the process and its children together, the result, CPU seconds);
    `env`: the child's whole environment (default: this process's)."""
    cpu_before = children_cpu()
    started = time.perf_counter()
    proc = psutil.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    peak = 0
    while proc.poll() is None:
        try:
            tree = [proc, *proc.children(recursive=True)]
            peak = max(peak, sum(p.memory_info().rss for p in tree if p.is_running()))
        except psutil.Error:
            pass
        time.sleep(0.02)
    seconds = time.perf_counter() - started
    out, err = proc.communicate()
    return seconds, peak / 1e6, subprocess.CompletedProcess(cmd, proc.returncode, out, err), children_cpu() - cpu_before


def build_cmd(tok: Path, corpus: Path, out: Path, jobs: int | None) -> list[str]:
    return [*TATU, "data", "build", "--tokenizer", str(tok), "--out", str(out), "--text", f"pretrain={corpus}",
            "--progress", "never", *(["--jobs", str(jobs)] if jobs else [])]


def _framed_groups(docs: list[str], group_bytes: int = 1 << 20) -> list[list[str]]:
    """The documents in groups of about `group_bytes`, as the build's chunks hold them."""
    groups, group, size = [], [], 0
    for doc in docs:
        group.append(doc)
        size += len(doc) + 2
        if size >= group_bytes:
            groups.append(group)
            group, size = [], 0
    return groups + ([group] if group else [])


def raw_encoders(tok, docs: list[str], jobs: int) -> tuple[dict[str, tuple[float, bool, float]], np.ndarray]:
    """({name: (wall seconds, whether its ids equal tokenizers', CPU seconds)}, BOS + tokenizers' ids + EOS
    of every document: what the shard must hold). tokenizers runs first: its ids are the reference."""
    from concurrent.futures import ThreadPoolExecutor

    cores = usable_cores()
    encoding, _ = tiktoken_encoding(tok)
    framed_call = tiktoken_encoder(tok, encoding, "").encode_documents
    groups = _framed_groups(docs)

    def framed_in_threads() -> list:
        with ThreadPoolExecutor(jobs) as pool:
            return list(pool.map(framed_call, groups))

    runs = {
        f"tokenizers encode_batch ({cores} cores)": lambda: tok.encode_batch(docs),
        f"tiktoken encode_ordinary_batch ({jobs} threads)": lambda: encoding.encode_ordinary_batch(docs, num_threads=jobs),
        "tiktoken encode_ordinary, 1 doc a call (1 thread)": lambda: [encoding.encode_ordinary(d) for d in docs],
        "tiktoken framed, 1 call per MB (1 thread)": lambda: [framed_call(g) for g in groups],
        f"tiktoken framed, 1 call per MB ({jobs} threads)": framed_in_threads,
    }
    results, reference, expected = {}, None, None
    for name, run in runs.items():
        started, cpu = time.perf_counter(), time.process_time()
        output = run()
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        if reference is None:
            reference = output
            expected = framed(output, tok.bos_id, tok.eos_id)
        # checked and dropped at once: every output held together would be gigabytes at 128 MB
        same = np.array_equal(np.concatenate(output), expected) if "framed" in name else output == reference
        results[name] = (seconds, same, cpu)
        del output
    return results, expected


def raw_against_shard(tok, docs: list[str], shard: np.ndarray, jobs: int) -> dict[str, tuple[float, bool, float]]:
    """tiktoken's framed call (1 thread, and `jobs` threads: the fastest raw encoder) and its
    encode_ordinary a document at a time (1 thread) on `docs`, checked against the shard ~1 MB
    group by group, in order. The threaded run's pool takes every group at once and keeps encoding
    while a group is checked: the checks' time taken off its clocks flatters it, not tatu."""
    from concurrent.futures import ThreadPoolExecutor

    encoding, _ = tiktoken_encoding(tok)
    framed_call = tiktoken_encoder(tok, encoding, "").encode_documents
    ordinary = lambda g: [encoding.encode_ordinary(d) for d in g]  # noqa: E731
    groups = _framed_groups(docs)

    def in_threads(call):
        def outputs():
            with ThreadPoolExecutor(jobs) as pool:
                yield from pool.map(call, groups)
        return outputs

    runs = {"tiktoken framed, 1 call per MB (1 thread)": lambda: map(framed_call, groups),
            f"tiktoken framed, 1 call per MB ({jobs} threads)": in_threads(framed_call),
            "tiktoken encode_ordinary, 1 doc a call (1 thread)": lambda: map(ordinary, groups)}
    results = {}
    for name, run in runs.items():
        position, same, checking = 0, True, 0.0
        started, cpu_started = time.perf_counter(), time.process_time()
        for output in run():
            check_started = time.perf_counter()
            ids = output if isinstance(output, np.ndarray) else framed(output, tok.bos_id, tok.eos_id)
            same = same and np.array_equal(shard[position:position + len(ids)], ids)
            position += len(ids)
            checking += time.perf_counter() - check_started
        # the checks are not the encoder's work: their time comes off both clocks
        wall = time.perf_counter() - started - checking
        cpu = time.process_time() - cpu_started - checking
        results[name] = (wall, same and position == len(shard), cpu)
    return results


def build_only(args, work: Path, tok_path: Path, sources: Path) -> None:
    """--sizes: the build at each size (wall, CPU, peak RSS of the process tree), and the leanest
    raw encoders on its documents, checked against its shard."""
    jobs = args.jobs or usable_cores()
    tok = load_tokenizer(tok_path)
    for mb in (float(x) for x in args.sizes.split(",")):
        corpus = work / f"corpus-{mb:g}mb-seed{args.seed}.txt"  # the raw side re-draws the same documents
        docs = corpus_documents(sources, mb, args.seed)
        if not corpus.is_file():
            write_corpus(corpus, docs)
        out = work / f"data-{mb:g}mb"
        shutil.rmtree(out, ignore_errors=True)
        load = os.getloadavg()[0]
        seconds, rss, proc, cpu = peak_rss_of(build_cmd(tok_path, corpus, out, jobs))
        if proc.returncode != 0:
            sys.exit(f"tatu data build exited {proc.returncode}: {proc.stderr[-2000:]}")
        size = corpus.stat().st_size / 1e6
        channel = load_manifest(out)["channels"]["pretrain"]
        shard = np.memmap(out / "pretrain" / "tokens.bin", dtype=channel["dtype"], mode="r")
        print(f"tatu data build --jobs {jobs} on {size:.1f} MB ({len(shard)} tokens): wall {seconds:.1f} s "
              f"({size / seconds:.2f} MB/s), CPU {cpu:.1f} s, peak RSS {rss:.0f} MB; load average {load:.1f} "
              f"-> {os.getloadavg()[0]:.1f}", flush=True)
        if not args.no_raw:
            for name, (raw_wall, same, raw_cpu) in raw_against_shard(tok, docs, shard, jobs).items():
                print(f"  raw {name}: wall {raw_wall:.1f} s, CPU {raw_cpu:.1f} s, ids == the shard's: "
                      f"{'yes' if same else 'no'}; tatu vs it: wall {raw_wall / seconds:.2f}, CPU {raw_cpu / cpu:.2f}",
                      flush=True)
        del shard
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=32)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--jobs", type=int, default=None,
                        help="tatu data build --jobs at both sizes (default: every core, so the sizes compare)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-train", action="store_true", help="skip timing `tatu tokenizer train`")
    parser.add_argument("--keep", type=Path, default=None, help="work here and keep it (default: a temp dir)")
    parser.add_argument("--sizes", default=None, help="MB,MB,...: time only the build at each size (see above)")
    parser.add_argument("--no-raw", action="store_true", help="with --sizes: skip the raw encoders")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="tatu-bench-data-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        run(args, work)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


def run(args, work: Path) -> None:
    sources = work / "sources"
    if not (sources / "pt_corpus.txt").is_file():
        subprocess.run([*TATU, "data", "demo", str(sources)], check=True, stdout=subprocess.DEVNULL)
    tok_path = work / "tok.json"
    if not tok_path.is_file():
        subprocess.run([*TATU, "tokenizer", "train", "--kind", "bpe", "--vocab", str(args.vocab), "--out", str(tok_path),
                        str(sources / "pt_corpus.txt"), str(sources / "en_corpus.txt")], check=True, stdout=subprocess.DEVNULL)
    if args.sizes:
        return build_only(args, work, tok_path, sources)
    tok = load_tokenizer(tok_path)
    rows, trained = {}, {}
    for mb in (args.mb / 4, args.mb):
        corpus = work / f"corpus-{mb:g}mb.txt"
        docs = make_corpus(sources, corpus, mb, args.seed)
        out = work / f"data-{mb:g}mb"
        shutil.rmtree(out, ignore_errors=True)
        seconds, rss, proc, cpu = peak_rss_of(build_cmd(tok_path, corpus, out, args.jobs or usable_cores()))
        if proc.returncode != 0:
            sys.exit(f"tatu data build exited {proc.returncode}: {proc.stderr[-2000:]}")
        rows[mb] = (seconds, rss, corpus.stat().st_size / 1e6, docs, out, proc.stdout, cpu)
        if not args.no_train:
            train_cmd = [*TATU, "tokenizer", "train", "--kind", "bpe", "--vocab", str(args.vocab), "--progress", "never",
                         "--out", str(work / f"tok-{mb:g}mb.json"), str(corpus)]
            train_seconds, train_rss, proc, _ = peak_rss_of(train_cmd)
            if proc.returncode != 0:
                sys.exit(f"tatu tokenizer train exited {proc.returncode}: {proc.stderr[-2000:]}")
            trained[mb] = (train_seconds, train_rss, corpus.stat().st_size / 1e6)
    seconds, rss, size_mb, docs, out, printed, cpu = rows[args.mb]
    jobs = args.jobs or usable_cores()
    raw, expected = raw_encoders(tok, docs, jobs)
    shard = np.fromfile(out / "pretrain" / "tokens.bin", dtype=load_manifest(out)["channels"]["pretrain"]["dtype"])
    identical = shard.shape == expected.shape and bool((shard == expected).all())
    raw_same = all(same for _, same, _ in raw.values())
    encoder_line = next((line for line in printed.splitlines() if line.startswith("encoder ")), "encoder ?")
    print(f"corpus {size_mb:.1f} MB, {len(docs)} documents, {len(shard)} tokens; vocab {tok.vocab_size}; "
          f"{usable_cores()} cores; load average {os.getloadavg()[0]:.1f}")
    print(f"tatu data build --jobs {jobs}: {encoder_line}")
    print(f"  {'':<55} {'wall':>8} {'MB/s':>7} {'CPU s':>7}")
    for name, (raw_seconds, _, raw_cpu) in raw.items():
        print(f"  raw {name:<51} {raw_seconds:7.2f}s {size_mb / raw_seconds:7.2f} {raw_cpu:7.2f}")
    print(f"  {'tatu data build (the whole command)':<55} {seconds:7.2f}s {size_mb / seconds:7.2f} {cpu:7.2f}")
    library = [name for name in raw if "framed" not in name]
    for label, names in (("the fastest raw encoder", list(raw)), ("the libraries' own calls", library)):
        fastest = min(names, key=lambda name: raw[name][0])
        leanest = min(names, key=lambda name: raw[name][2])
        print(f"tatu vs {label}: wall {raw[fastest][0] / seconds:.2f} ({fastest}; target >= 0.95), "
              f"CPU seconds {raw[leanest][2] / cpu:.2f} ({leanest})")
    print(f"identical tokens (shard == tokenizers' ids of every document): {'yes' if identical else 'no'}; "
          f"every raw encoder's ids == tokenizers': {'yes' if raw_same else 'no'}")
    (_, rss_small, mb_small, *_), (_, rss_big, mb_big, *_) = rows[args.mb / 4], rows[args.mb]
    slope = (rss_big - rss_small) / (mb_big - mb_small)
    print(f"peak RSS of the build: {rss_small:.0f} MB at {mb_small:.1f} MB of source, {rss_big:.0f} MB at "
          f"{mb_big:.1f} MB ({slope:.2f} MB per MB of source)")
    for mb, (train_seconds, train_rss, size) in trained.items():
        print(f"tatu tokenizer train --vocab {args.vocab} on {size:.1f} MB: {train_seconds:.1f} s "
              f"({size / train_seconds:.2f} MB/s), peak RSS {train_rss:.0f} MB")


if __name__ == "__main__":
    main()
