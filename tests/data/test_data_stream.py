"""The streamed data build (chunks cut at document boundaries, encoded here or in worker processes,
by tiktoken where it gives the tokenizer's ids) writes the very bytes the whole-file build wrote:
checked against that build, kept here as the reference, on a multi-source corpus (bad lines,
CRLF, whitespace-only lines, JSONL of every form) and on the demo's sources."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from strict import cannot_run

from tatu.data import text_shards
from tatu.data.build import BuildSpec, build_data
from tatu.data.manifest import token_dtype
from tatu.data.documents import documents_in, plain_texts, read_documents
from tatu.model.chat import encode_messages, encode_pair
from tatu.model.tokenizer import BPETokenizer, CharTokenizer


def whole_file_shard(paths: list[str], tok, one_per_line: bool = False) -> tuple[bytes, list[tuple[str, int]]]:
    """The build before streaming: each source read whole, split at b"\\n", every document
    encoded by the tokenizer itself (a JSONL pair in the chat layout); (the shard's bytes, the (file, line) of every bad line)."""
    shard, bad = bytearray(), []
    dtype = token_dtype(tok.vocab_size)
    for path in paths:
        lines = Path(path).read_bytes().split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        docs, block, start = [], [], 0
        for number, raw in enumerate(lines, start=1):
            raw = raw[:-1] if raw.endswith(b"\r") else raw
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                bad.append((path, number))
                continue
            if path.endswith(".jsonl"):
                try:
                    payload = json.loads(text)
                except json.JSONDecodeError:
                    bad.append((path, number))
                    continue
                if "text" in payload:
                    docs.append(payload["text"])
                elif "messages" in payload:  # a pair is written in the chat layout, markers and EOS
                    docs.append(encode_messages(tok, payload["messages"])[0])
                else:
                    docs.append(encode_pair(tok, payload["prompt"], payload["response"])[0])
            elif one_per_line:
                if text.strip():
                    docs.append(text)
            elif not text.strip():
                if block:
                    docs.append("\n".join(block))
                block = []
            else:
                block.append(text)
        if block:
            docs.append("\n".join(block))
        for doc in docs:
            ids = doc if isinstance(doc, list) else [tok.bos_id, *tok.encode(doc), tok.eos_id]
            shard += np.asarray(ids, dtype=dtype).tobytes()
    return bytes(shard), bad


WORDS = "tatu bola cavou túnel à noite ação coração 😀 the armadillo digs 1234 don't l'água".split()


def corpus(src: Path) -> dict[str, str]:
    """Three sources a whole-file reader and a chunked one could read differently."""
    src.mkdir()
    rng = np.random.default_rng(5)

    def doc(n):
        return " ".join(rng.choice(WORDS) for _ in range(n))

    blocks = [doc(int(rng.integers(3, 40))) + ("\n" + doc(5) if i % 3 == 0 else "") for i in range(120)]
    a = ("\n\n".join(blocks[:40]) + "\n\n\n   \t\n\n" + "\r\n\r\n".join(b.replace("\n", "\r\n") for b in blocks[40:80])
         + "\r\n\r\n" + "\n \n".join(blocks[80:]))
    (src / "a.txt").write_bytes(a.encode() + b"\n\nbad \xff\xfe line\n\n" + doc(30).encode())  # no final newline
    (src / "b.txt").write_text("\n\n".join(doc(int(rng.integers(200, 400))) for _ in range(6)) + "\n", encoding="utf-8")
    rows = [json.dumps({"text": doc(20)}, ensure_ascii=False) for _ in range(20)]
    rows += [json.dumps({"prompt": doc(4), "response": doc(6)}, ensure_ascii=False) for _ in range(10)]
    rows += [json.dumps({"messages": [{"role": "user", "content": doc(3)}, {"role": "assistant", "content": doc(4)}]},
                        ensure_ascii=False), "{not json", json.dumps({"text": doc(7)}, ensure_ascii=False)]
    (src / "c.jsonl").write_text("\r\n".join(rows) + "\r\n", encoding="utf-8")
    return {name: str(src / name) for name in ("a.txt", "b.txt", "c.jsonl")}


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("stream")
    files = corpus(root / "src")
    texts = [d.text for f in files.values() for d in read_documents(f) if hasattr(d, "text")]
    return {"files": files, "root": root, "bpe": BPETokenizer.train(texts, vocab_size=400),
            "char": CharTokenizer.train(texts)}


def build(sources, tok, out: Path, paths: list[str], jobs: int = 1, one_per_line: bool = False):
    spec = BuildSpec(tokenizer="", out_dir=str(out), text={"pretrain": paths}, on_bad_line="skip",
                     jobs=jobs, one_per_line=one_per_line)
    return build_data(spec, tok, progress=False)


@pytest.mark.parametrize("kind,jobs", [("bpe", 1), ("char", 1), ("bpe", 2)])
def test_the_streamed_build_writes_the_whole_file_builds_bytes(sources, tmp_path, monkeypatch, kind, jobs):
    monkeypatch.setattr(text_shards, "CHUNK_BYTES", 97)  # every source in many chunks, some documents longer
    tok, paths = sources[kind], list(sources["files"].values())
    result = build(sources, tok, tmp_path / "data", paths, jobs=jobs)
    expected, bad = whole_file_shard(paths, tok)
    assert (tmp_path / "data" / "pretrain" / "tokens.bin").read_bytes() == expected
    channel = result.manifest["channels"]["pretrain"]
    assert [(b["path"], b["line"]) for b in channel["skipped_lines"]["lines"]] == [
        (str(Path(p).resolve()), n) for p, n in bad]
    assert len(bad) == 2  # the non-UTF-8 line of a.txt, the non-JSON line of c.jsonl
    assert result.manifest["encoder"]["name"] == ("tiktoken" if kind == "bpe" else "char")


def test_one_per_line_streams_as_it_read_whole(sources, tmp_path, monkeypatch):
    monkeypatch.setattr(text_shards, "CHUNK_BYTES", 64)
    paths = [sources["files"]["a.txt"], sources["files"]["b.txt"]]
    build(sources, sources["bpe"], tmp_path / "data", paths, one_per_line=True)
    assert (tmp_path / "data" / "pretrain" / "tokens.bin").read_bytes() == \
        whole_file_shard(paths, sources["bpe"], one_per_line=True)[0]


def test_the_first_bad_line_stops_a_chunked_build_with_its_file_and_line(sources, tmp_path, monkeypatch):
    from tatu.data.manifest import DataError

    monkeypatch.setattr(text_shards, "CHUNK_BYTES", 50)
    spec = BuildSpec(tokenizer="", out_dir=str(tmp_path / "data"), text={"pretrain": list(sources["files"].values())})
    expected_line = whole_file_shard([sources["files"]["a.txt"]], sources["char"])[1][0][1]
    with pytest.raises(DataError, match=rf"a\.txt:{expected_line}: not UTF-8 \(byte 0xff at column 5\)"):
        build_data(spec, sources["char"], progress=False)
    assert not (tmp_path / "data").exists()


@settings(max_examples=60, deadline=None)
@given(pieces=st.lists(st.sampled_from(["a", "ção", " ", "\n", "\r\n", "\n\n", " \n", "\t", "x\ny"]), max_size=60),
       chunk_bytes=st.integers(1, 40), one_per_line=st.booleans())
def test_chunks_cover_the_file_and_give_its_documents(tmp_path_factory, pieces, chunk_bytes, one_per_line):
    path = tmp_path_factory.mktemp("chunks") / "s.txt"
    path.write_bytes("".join(pieces).encode())
    parts = list(text_shards.chunks(str(path), one_per_line, chunk_bytes))
    assert sum(c.length for c in parts) == path.stat().st_size
    assert all(a.offset + a.length == b.offset for a, b in zip(parts, parts[1:]))
    data = path.read_bytes()
    chunked = [d for c in parts for d in documents_in(data[c.offset:c.offset + c.length], str(path), c.first_line,
                                                        one_per_line)]
    assert chunked == list(read_documents(path, one_per_line))


def test_the_demo_sources_build_the_same_bytes_streamed_and_in_workers(tmp_path, monkeypatch):
    from tatu.data.demo import sources as demo
    from tatu.ops import packages

    try:
        packages.ensure_demo_packages()
    except demo.DemoPackagesError as error:
        cannot_run(f"demo packages unavailable: {error}")
    src = tmp_path / "src"
    demo.build_demo_sources(src, seed=0, scale="tiny")
    paths = [str(src / "pt_corpus.txt"), str(src / "en_corpus.txt")]
    tok = BPETokenizer.train((d.text for p in paths for d in read_documents(p)), vocab_size=1024)
    monkeypatch.setattr(text_shards, "CHUNK_BYTES", 16 << 10)
    result = build({}, tok, tmp_path / "data", paths, jobs=2)
    assert result.manifest["encoder"]["name"] == "tiktoken"
    assert (tmp_path / "data" / "pretrain" / "tokens.bin").read_bytes() == whole_file_shard(paths, tok)[0]


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(st.sampled_from(["a", "ção", " ", "\n", "\r", "\r\n", "\r\r\n", "\n\n", " \n", "\t", "\x0b",
                                        "\x0c", "\x1c", "\x85", "\u00a0", "\u2028", "\u3000", "\ufdd0", "😀", "x\ny"]),
                       max_size=50),
       one_per_line=st.booleans())
def test_plain_texts_are_the_line_readers_documents(pieces, one_per_line):
    data = "".join(pieces).encode()
    line_reader = [d.text for d in documents_in(data, "s.txt", 1, one_per_line)]
    assert plain_texts(data, one_per_line) == line_reader


def test_plain_texts_leave_a_chunk_that_is_not_utf8_to_the_line_reader():
    assert plain_texts(b"ok\n\nbad \xff\n", False) is None
    assert plain_texts(b"ok\n\nbad \xff\n", True) is None


def test_a_source_holding_the_frame_characters_builds_the_same_bytes(sources, tmp_path):
    """tiktoken's one call per chunk frames documents with two noncharacters; a chunk that holds
    one is encoded a document at a time, and the shard is still the tokenizer's ids."""
    from tatu.model.encoders import FRAME_BOS, FRAME_EOS

    path = tmp_path / "frames.txt"
    path.write_text(f"plain words here\n\nword {FRAME_BOS} inside {FRAME_EOS}x\n\n{FRAME_EOS}{FRAME_BOS}\n\nend\n",
                    encoding="utf-8")
    result = build(sources, sources["bpe"], tmp_path / "data", [str(path)])
    assert result.manifest["encoder"]["name"] == "tiktoken"
    expected = whole_file_shard([str(path)], sources["bpe"])[0]
    assert (tmp_path / "data" / "pretrain" / "tokens.bin").read_bytes() == expected
