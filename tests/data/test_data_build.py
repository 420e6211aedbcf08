"""`tatu data build` and `tatu tokenizer train`: shards round-trip, counts match an independent count,
bad lines stop with FILE:LINE and exit 65 leaving nothing behind (or are skipped and counted)."""
import hashlib
import json

import numpy as np
import pytest

from tatu.data.manifest import token_dtype
from tatu.model.chat import encode_pair
from tatu.model.tokenizer import CharTokenizer
from tatu.model.tokenizer_json import load_tokenizer
from tatu.ops.cli import main

PT_DOCS = ["Era uma vez um tatu-bola.\nEle cavava túneis à noite.", "Não há ação sem reação —\n« disse ela ».",
           "Último parágrafo, com ç, ã, é e ü."]
EN_DOCS = ["The armadillo digs at night.", "Second English document,\nwith two lines."]
PAIRS = [{"prompt": "Quanto é 2 + 3?", "response": "Cinco."},
         {"prompt": "Escreva em duas linhas", "response": "linha um ção\nlinha dois é"},
         {"prompt": "Diga olá", "response": "Olá!"}]


@pytest.fixture
def sources(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "pt.txt").write_text("\n\n".join(PT_DOCS) + "\n", encoding="utf-8")
    (src / "en.txt").write_text("\n\n".join(EN_DOCS) + "\n", encoding="utf-8")
    (src / "train.jsonl").write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in PAIRS), encoding="utf-8")
    (src / "held.jsonl").write_text(json.dumps(PAIRS[0], ensure_ascii=False) + "\n", encoding="utf-8")
    (src / "val.txt").write_text("primeira linha\n\nsegunda linha ção\n", encoding="utf-8")
    tok = CharTokenizer.train(PT_DOCS + EN_DOCS + [p["prompt"] + p["response"] for p in PAIRS])
    tok.save(src / "tok.json")
    return src


def _build(src, out, *extra):
    return main(["data", "build", "--tokenizer", str(src / "tok.json"), "--out", str(out), *extra])


FULL_SEQ_LEN = 128


def _full_build(src, out, *extra):
    return _build(src, out, "--text", f"pretrain={src / 'pt.txt'}", "--text", f"replay={src / 'en.txt'}",
                  "--sft", f"sft={src / 'train.jsonl'}", "--eval", f"sftHeld={src / 'held.jsonl'}",
                  "--eval", f"ptVal={src / 'val.txt'}", "--seq-len", str(FULL_SEQ_LEN), *extra)


def _documents(shard, tok):
    """Split a text shard at its BOS/EOS markers and decode each document."""
    docs, current = [], None
    for token in shard.tolist():
        if token == tok.bos_id:
            assert current is None, "BOS inside a document"
            current = []
        elif token == tok.eos_id:
            docs.append(tok.decode(current))
            current = None
        else:
            assert current is not None, "token outside BOS..EOS"
            current.append(token)
    assert current is None
    return docs


def test_pairs_in_a_text_channel_are_written_in_the_chat_layout(sources, tmp_path):
    # What lets a trunk pretrain on the chat format: a JSONL pair in a text channel is the SFT
    # layout (markers, EOS), beside plain documents, every token counted as in any text channel.
    out = tmp_path / "data"
    assert _build(sources, out, "--text", f"pretrain={sources / 'pt.txt'},{sources / 'train.jsonl'}") == 0
    tok = load_tokenizer(out / "tokenizer.json")
    entry = json.loads((out / "manifest.json").read_text())["channels"]["pretrain"]
    shard = np.fromfile(out / entry["files"]["tokens"], dtype=entry["dtype"]).tolist()
    expected = [t for doc in PT_DOCS for t in [tok.bos_id, *tok.encode(doc), tok.eos_id]]
    expected += [t for p in PAIRS for t in encode_pair(tok, p["prompt"], p["response"])[0]]
    assert shard == expected
    assert shard.count(tok.user_id) == shard.count(tok.assistant_id) == len(PAIRS)
    assert entry["documents"] == len(PT_DOCS) + len(PAIRS)
    assert (entry["tokens"], entry["targets"]) == (len(shard), len(shard) - entry["documents"])


def test_text_shard_round_trips_to_the_source_text(sources, tmp_path):
    out = tmp_path / "data"
    assert _full_build(sources, out) == 0
    tok = load_tokenizer(out / "tokenizer.json")
    manifest = json.loads((out / "manifest.json").read_text())
    entry = manifest["channels"]["pretrain"]
    shard = np.fromfile(out / entry["files"]["tokens"], dtype=entry["dtype"])
    assert entry["dtype"] == "uint16"
    docs = _documents(shard, tok)
    assert docs == PT_DOCS
    assert "\n\n".join(docs) + "\n" == (sources / "pt.txt").read_text(encoding="utf-8")


def test_one_per_line_makes_each_nonempty_line_a_document(sources, tmp_path):
    out = tmp_path / "data"
    assert _build(sources, out, "--text", f"pt={sources / 'pt.txt'}", "--one-per-line") == 0
    tok = load_tokenizer(out / "tokenizer.json")
    shard = np.fromfile(out / "pt" / "tokens.bin", dtype=np.uint16)
    expected = [line for line in (sources / "pt.txt").read_text(encoding="utf-8").split("\n") if line]
    assert _documents(shard, tok) == expected


def test_manifest_counts_equal_an_independent_count(sources, tmp_path):
    out = tmp_path / "data"
    assert _full_build(sources, out) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    tok = load_tokenizer(sources / "tok.json")
    assert manifest["format"] == "tatu-data-1" and manifest["tokenizer_hash"] == tok.hash
    assert manifest["options"]["seq_len"] == FULL_SEQ_LEN
    assert load_tokenizer(out / manifest["tokenizer"]).hash == tok.hash

    for name, docs, file in (("pretrain", PT_DOCS, "pt.txt"), ("replay", EN_DOCS, "en.txt")):
        entry = manifest["channels"][name]
        (source,) = entry["sources"]
        n_tokens = sum(len(tok.encode(d)) for d in docs)
        n_chars = sum(len(d) for d in docs)
        assert source["sha256"] == hashlib.sha256((sources / file).read_bytes()).hexdigest()
        assert (source["documents"], source["tokens"], source["chars"]) == (len(docs), n_tokens, n_chars)
        assert source["chars_per_token"] == pytest.approx(n_chars / n_tokens)
        shard_len = (out / entry["files"]["tokens"]).stat().st_size // 2
        assert entry["tokens"] == shard_len == n_tokens + 2 * len(docs)
        assert entry["targets"] == shard_len - len(docs)
        assert entry["skipped_lines"]["count"] == 0

    sft = manifest["channels"]["sft"]
    ids = np.fromfile(out / sft["files"]["ids"], dtype=np.uint16)
    mask = np.fromfile(out / sft["files"]["mask"], dtype=np.uint8)
    offsets = np.load(out / sft["files"]["offsets"])
    assert sft["pairs"] == len(PAIRS) and len(offsets) == len(PAIRS) + 1
    assert sft["targets"] == int(mask.sum()) == sum(len(p["response"]) + 1 for p in PAIRS)
    assert sft["tokens"] == len(ids) == offsets[-1]
    assert sft["sources"][0]["chars"] == sum(len(p["prompt"]) + len(p["response"]) for p in PAIRS)
    for i, pair in enumerate(PAIRS):
        expected_ids, expected_mask = encode_pair(tok, pair["prompt"], pair["response"])
        assert ids[offsets[i]:offsets[i + 1]].tolist() == expected_ids
        assert mask[offsets[i]:offsets[i + 1]].astype(bool).tolist() == expected_mask

    held, val = manifest["evals"]["sftHeld"], manifest["evals"]["ptVal"]
    assert (held["kind"], held["lines"], held["file"]) == ("pairs", 1, "evals/sftHeld.jsonl")
    assert (val["kind"], val["lines"], val["file"]) == ("text", 2, "evals/ptVal.txt")
    assert (out / val["file"]).read_bytes() == (sources / "val.txt").read_bytes()
    assert val["sha256"] == hashlib.sha256((sources / "val.txt").read_bytes()).hexdigest()


def test_rerun_on_unchanged_inputs_is_up_to_date_and_a_change_rebuilds(sources, tmp_path, capsys):
    out = tmp_path / "data"
    assert _full_build(sources, out) == 0
    before = (out / "manifest.json").stat().st_mtime_ns
    capsys.readouterr()
    assert _full_build(sources, out) == 0
    assert "up to date" in capsys.readouterr().out
    assert (out / "manifest.json").stat().st_mtime_ns == before

    assert _full_build(sources, out, "--seq-len", "200") == 0  # an option changed
    assert "up to date" not in capsys.readouterr().out
    with open(sources / "en.txt", "a", encoding="utf-8") as handle:
        handle.write("\nA new document.\n")
    assert _full_build(sources, out, "--seq-len", "200") == 0
    assert "up to date" not in capsys.readouterr().out
    assert json.loads((out / "manifest.json").read_text())["channels"]["replay"]["documents"] == len(EN_DOCS) + 1


GOOD = '{"prompt": "Diga olá", "response": "Olá!"}'
BAD_SFT_LINES = {
    "not_json": (b'{"prompt": "a", "response": ', "not valid JSON"),
    "missing_field": (b'{"prompt": "a"}', "missing field 'response'"),
    "empty_prompt": (b'{"prompt": "", "response": "b"}', "empty 'prompt'"),
    "empty_response": (b'{"prompt": "a", "response": " "}', "empty 'response'"),
    "not_utf8": (b'{"prompt": "ol\xe1", "response": "b"}', "not UTF-8"),
    "too_long": (('{"prompt": "a", "response": "' + "x" * 100 + '"}').encode(), "longer than --seq-len 64"),
}


def _siblings(out):
    return sorted(p.name for p in out.parent.iterdir())


@pytest.mark.parametrize("kind", sorted(BAD_SFT_LINES))
def test_every_bad_sft_line_stops_with_file_line_and_exit_65(sources, tmp_path, capsys, kind):
    raw, reason = BAD_SFT_LINES[kind]
    bad = sources / "bad.jsonl"
    bad.write_bytes(GOOD.encode() + b"\n" + GOOD.encode() + b"\n" + raw + b"\n" + GOOD.encode() + b"\n")
    out = tmp_path / "out" / "data"
    out.parent.mkdir()
    rc = _build(sources, out, "--sft", f"sft={bad}", "--seq-len", "64")
    err = capsys.readouterr().err
    assert rc == 65
    assert f"{bad}:3: " in err and reason in err
    assert not out.exists() and _siblings(out) == []  # no half-written dir, no temp dir left


def test_bad_text_line_stops_with_file_line_and_exit_65(sources, tmp_path, capsys):
    bad = sources / "bad.txt"
    bad.write_bytes("bom começo\n\n".encode() + b"caf\xe9 latin-1\n")
    out = tmp_path / "data"
    assert _build(sources, out, "--text", f"pt={bad}") == 65
    assert f"{bad}:3: not UTF-8" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("failure", ["bad pair", "bad text", "no documents"])
def test_failed_build_into_new_parents_leaves_no_trace(sources, tmp_path, capsys, failure):
    """--out new/sub/out: a rejected build removes the parents it created, not only its temp dir."""
    flags = {"bad pair": ["--sft", f"sft={sources / 'bad.jsonl'}", "--seq-len", "64"],
             "bad text": ["--text", f"pt={sources / 'bad.txt'}"],
             "no documents": ["--text", f"pt={sources / 'blank.txt'}"]}[failure]
    (sources / "bad.jsonl").write_bytes(GOOD.encode() + b"\n{oops\n")
    (sources / "bad.txt").write_bytes(b"caf\xe9\n")
    (sources / "blank.txt").write_text("\n \n")
    work = tmp_path / "work"
    work.mkdir()
    assert _build(sources, work / "new" / "sub" / "out", *flags) == 65
    assert list(work.iterdir()) == []
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_out_below_a_file_is_one_line_and_exit_78(sources, tmp_path, capsys):
    (tmp_path / "file").write_text("not a dir")
    assert _build(sources, tmp_path / "file" / "sub" / "out", "--text", f"pt={sources / 'pt.txt'}") == 78
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not a directory" in err[0] and str(tmp_path / "file") in err[0]


def test_failed_rebuild_keeps_the_previous_data_dir(sources, tmp_path):
    out = tmp_path / "data"
    assert _full_build(sources, out) == 0
    before = (out / "manifest.json").read_bytes()
    (sources / "train.jsonl").write_text(GOOD + "\n{oops\n", encoding="utf-8")
    assert _full_build(sources, out) == 65
    assert (out / "manifest.json").read_bytes() == before


def test_skip_counts_bad_lines_and_records_them(sources, tmp_path, capsys):
    lines = [GOOD.encode()] + [raw for raw, _ in BAD_SFT_LINES.values()] + [GOOD.encode()]
    bad = sources / "mixed.jsonl"
    bad.write_bytes(b"\n".join(lines) + b"\n")
    out = tmp_path / "data"
    rc = _build(sources, out, "--sft", f"sft={bad}", "--seq-len", "64", "--on-bad-line", "skip")
    err = capsys.readouterr().err
    assert rc == 0
    assert f"skipped {len(BAD_SFT_LINES)} bad lines" in err
    entry = json.loads((out / "manifest.json").read_text())["channels"]["sft"]
    assert entry["pairs"] == 2
    assert entry["skipped_lines"]["count"] == len(BAD_SFT_LINES)
    assert [b["line"] for b in entry["skipped_lines"]["lines"]] == list(range(2, 2 + len(BAD_SFT_LINES)))


def test_bad_eval_line_is_an_error_even_with_skip(sources, tmp_path, capsys):
    held = sources / "held_bad.jsonl"
    held.write_text(GOOD + "\n" + '{"prompt": "x"}' + "\n", encoding="utf-8")
    out = tmp_path / "data"
    assert _build(sources, out, "--eval", f"sftHeld={held}", "--on-bad-line", "skip", "--seq-len", "64") == 65
    assert f"{held}:2: missing field 'response'" in capsys.readouterr().err
    assert not out.exists()


def test_token_dtype_follows_vocab_size():
    assert token_dtype(65535) == np.uint16 and token_dtype(65536) == np.uint32


def test_tokenizer_train_uses_text_and_pair_sources(sources, tmp_path, capsys):
    char_out, bpe_out = tmp_path / "char.json", tmp_path / "bpe.json"
    inputs = [str(sources / "pt.txt"), str(sources / "train.jsonl")]
    assert main(["tokenizer", "train", "--kind", "char", "--out", str(char_out), *inputs]) == 0
    char_tok = load_tokenizer(char_out)
    # "!" appears only in a response, "+" only in a prompt: both were trained on
    assert {"!", "+", "ç"} <= set(char_tok.chars)
    assert main(["tokenizer", "train", "--kind", "bpe", "--vocab", "300", "--out", str(bpe_out), *inputs]) == 0
    bpe_tok = load_tokenizer(bpe_out)
    assert bpe_tok.vocab_size <= 300 and bpe_tok.decode(bpe_tok.encode(PT_DOCS[1])) == PT_DOCS[1]


def test_tokenizer_train_reports_a_bad_source_line(sources, tmp_path, capsys):
    bad = sources / "bad.jsonl"
    bad.write_text(GOOD + "\n[1, 2]\n", encoding="utf-8")
    assert main(["tokenizer", "train", "--kind", "char", "--out", str(tmp_path / "t.json"), str(bad)]) == 65
    assert f"{bad}:2: expected a JSON object" in capsys.readouterr().err


# ---- what --out may replace ------------------------------------------------------------------

def _snapshot(path):
    """Every file under `path` (or the file itself) with its bytes."""
    if path.is_file():
        return {".": path.read_bytes()}
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("existing", ["dir_with_files", "regular_file", "other_manifest"])
def test_out_that_is_not_a_data_dir_is_refused_and_left_untouched(sources, tmp_path, capsys, existing):
    out = tmp_path / "precious"
    if existing == "regular_file":
        out.write_text("my thesis\n")
    else:
        out.mkdir()
        (out / "notes.txt").write_text("do not lose\n")
        if existing == "other_manifest":
            (out / "manifest.json").write_text(json.dumps({"format": "something-else"}))
    before = _snapshot(out)
    assert _full_build(sources, out) == 78
    err = capsys.readouterr().err
    assert f"{out}: exists and is not a tatu data dir; refusing to replace it" in err
    assert _snapshot(out) == before
    assert _siblings(out) == ["precious", "src"]  # no temp dir left


def test_empty_dir_and_previous_build_are_replaced(sources, tmp_path):
    out = tmp_path / "data"
    out.mkdir()
    assert _full_build(sources, out) == 0
    assert json.loads((out / "manifest.json").read_text())["channels"]["replay"]["documents"] == len(EN_DOCS)
    (sources / "en.txt").write_text("Only one document now.\n", encoding="utf-8")
    assert _full_build(sources, out) == 0
    assert json.loads((out / "manifest.json").read_text())["channels"]["replay"]["documents"] == 1


def test_out_holding_an_input_is_refused(sources, tmp_path, capsys):
    out = tmp_path / "data"
    assert _full_build(sources, out) == 0
    inside = out / "more.txt"
    inside.write_text("A document kept inside the data dir.\n", encoding="utf-8")
    before = _snapshot(out)
    assert _full_build(sources, out, "--text", f"more={inside}") == 78
    assert f"holds the input {inside}" in capsys.readouterr().err
    assert _snapshot(out) == before


# ---- --seq-len is required wherever pairs are built ------------------------------------------

@pytest.mark.parametrize("flag", ["--sft", "--eval"])
def test_pairs_without_seq_len_are_a_usage_error(sources, tmp_path, capsys, flag):
    out = tmp_path / "data"
    name = "sft" if flag == "--sft" else "sftHeld"
    assert _build(sources, out, flag, f"{name}={sources / 'held.jsonl'}") == 2
    err = capsys.readouterr().err
    assert "--seq-len is required" in err and name in err
    assert not out.exists()


def test_text_only_build_needs_no_seq_len(sources, tmp_path):
    out = tmp_path / "data"
    assert _build(sources, out, "--text", f"pt={sources / 'pt.txt'}", "--eval", f"ptVal={sources / 'val.txt'}") == 0
    assert json.loads((out / "manifest.json").read_text())["options"]["seq_len"] is None


# ---- tatu tokenizer train: bad requests are one-line errors ----------------------------------

def test_char_vocab_below_bytes_and_specials_is_refused(sources, tmp_path, capsys):
    out = tmp_path / "tok.json"
    assert main(["tokenizer", "train", "--kind", "char", "--vocab", "100", "--out", str(out),
                 str(sources / "pt.txt")]) == 78
    assert "needs >= 261" in capsys.readouterr().err
    assert not out.exists()
    # the smallest vocab that is allowed keeps only the single most frequent character
    assert main(["tokenizer", "train", "--kind", "char", "--vocab", "262", "--out", str(out),
                 str(sources / "pt.txt")]) == 0
    counts = {}
    for ch in "".join(PT_DOCS):
        counts[ch] = counts.get(ch, 0) + 1
    assert load_tokenizer(out).chars == [max(counts, key=counts.get)]


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_tokenizer_train_on_no_documents_exits_65(sources, tmp_path, capsys, kind):
    empty = sources / "empty.txt"
    empty.write_text("\n\n  \n", encoding="utf-8")
    out = tmp_path / "tok.json"
    assert main(["tokenizer", "train", "--kind", kind, "--vocab", "300", "--out", str(out), str(empty)]) == 65
    assert "no documents" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("where", ["a_directory", "under_a_file"])
def test_tokenizer_out_that_cannot_be_written_is_one_line(sources, tmp_path, capsys, where):
    if where == "a_directory":
        out = tmp_path / "a_dir"
        out.mkdir()
    else:
        (tmp_path / "plain").write_text("x")
        out = tmp_path / "plain" / "tok.json"
    assert main(["tokenizer", "train", "--kind", "char", "--out", str(out), str(sources / "pt.txt")]) == 78
    err = capsys.readouterr().err
    assert str(out) in err and "Traceback" not in err and err.count("\n") == 1


RSS_PROBE = """
import resource, sys
from tatu.ops.cli import main
rc = main(sys.argv[1:])
print(rc, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def _build_peak_rss_kb(src, out, pairs):
    """Exit code and peak RSS (KiB) of `tatu data build` over `pairs` in a fresh child process."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", RSS_PROBE, "data", "build", "--tokenizer", str(src / "tok.json"),
                           "--out", str(out), "--sft", f"sft={pairs}", "--seq-len", "64"],
                          capture_output=True, text=True, timeout=300)
    rc, peak = proc.stdout.split()[-2:]
    return int(rc), int(peak), proc.stderr


def test_a_huge_pair_is_refused_by_its_length_before_it_is_tokenized(sources, tmp_path):
    """A valid 8 MB pair: refused (65, FILE:LINE) with memory near that of a tiny bad line.
    Tokenizing it first, as before, cost ~35 bytes of RSS per character."""
    huge_chars = 8_000_000
    small, huge = tmp_path / "small.jsonl", tmp_path / "huge.jsonl"
    small.write_text(GOOD + "\n" + json.dumps({"prompt": "a", "response": "x" * 100}) + "\n", encoding="utf-8")
    huge.write_text(GOOD + "\n" + json.dumps({"prompt": "Diga", "response": "olá " * (huge_chars // 4)}) + "\n",
                    encoding="utf-8")
    rc_small, rss_small, _ = _build_peak_rss_kb(sources, tmp_path / "a", small)
    rc_huge, rss_huge, err = _build_peak_rss_kb(sources, tmp_path / "b", huge)
    assert rc_small == rc_huge == 65
    growth_bytes = (rss_huge - rss_small) * 1024
    # reading and parsing the line costs a few copies of it; 10 bytes per character is generous
    assert growth_bytes < 10 * huge_chars, f"peak RSS grew by {growth_bytes / 1e6:.0f} MB"
    assert f"{huge}:2: pair is at least" in err and "longer than --seq-len 64" in err


def test_length_bound_never_exceeds_the_real_length():
    """The pre-check may only refuse what the exact check would: min_ids <= len(ids) for both
    tokenizers, equal for a char tokenizer on known characters."""
    from tatu.data.sft_shards import max_chars_per_token
    from tatu.data.sft import SFTExample
    from tatu.model.tokenizer import BPETokenizer

    texts = PT_DOCS + EN_DOCS + ["ação " * 50, "çççç" * 30, "🙂 emoji fora do vocabulário", "a"]
    char = CharTokenizer.train(PT_DOCS + EN_DOCS)
    bpe = BPETokenizer.train(texts * 20, vocab_size=300)
    examples = [SFTExample("f", 1, prompt=p, response=r) for p in texts for r in texts[:4]]
    examples += [SFTExample("f", 1, messages=({"role": "system", "content": texts[0]}, {"role": "user", "content": t},
                                              {"role": "assistant", "content": t}, {"role": "assistant", "content": "ok"}))
                 for t in texts]
    for tok in (char, bpe):
        per_token = max_chars_per_token(tok)
        for example in examples:
            assert example.min_ids(per_token) <= len(example.encode(tok)[0])
    assert max_chars_per_token(char) == 1
    known = SFTExample("f", 1, prompt=PT_DOCS[0], response=EN_DOCS[0])
    assert known.min_ids(1) == len(known.encode(char)[0])


def test_pair_of_exactly_one_row_is_accepted_and_one_more_is_refused(sources, tmp_path):
    tok = load_tokenizer(sources / "tok.json")
    n_ids = len(encode_pair(tok, "Diga", "olá")[0])  # char-level: the bound is exact here
    pairs = sources / "edge.jsonl"
    pairs.write_text(json.dumps({"prompt": "Diga", "response": "olá"}, ensure_ascii=False) + "\n", encoding="utf-8")
    assert _build(sources, tmp_path / "fits", "--sft", f"sft={pairs}", "--seq-len", str(n_ids - 1)) == 0
    assert _build(sources, tmp_path / "over", "--sft", f"sft={pairs}", "--seq-len", str(n_ids - 2)) == 65


def test_eval_answers_are_counted_in_the_manifest_and_a_partial_marking_is_refused(sources, tmp_path, capsys):
    held = sources / "held_answers.jsonl"
    marked = [dict(p, answer=p["response"]) for p in PAIRS]
    held.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in marked), encoding="utf-8")
    out = tmp_path / "data"
    assert _build(sources, out, "--eval", f"sftHeld={held}", "--eval", f"ptVal={sources / 'val.txt'}",
                  "--seq-len", "64") == 0
    evals = json.loads((out / "manifest.json").read_text())["evals"]
    assert evals["sftHeld"]["answers"] == 3
    assert "answers" not in evals["ptVal"]  # a set without answers has no count at all, never 0

    plain = tmp_path / "plain"
    assert _build(sources, plain, "--eval", f"sftHeld={sources / 'held.jsonl'}", "--seq-len", "64") == 0
    assert "answers" not in json.loads((plain / "manifest.json").read_text())["evals"]["sftHeld"]

    capsys.readouterr()
    partial = sources / "held_partial.jsonl"
    partial.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in [marked[0], PAIRS[1], marked[2]]),
                       encoding="utf-8")
    refused = tmp_path / "refused"
    assert _build(sources, refused, "--eval", f"sftHeld={partial}", "--seq-len", "64") == 65
    assert f"{partial}:2: no 'answer' field, while line 1 has one" in capsys.readouterr().err
    assert not refused.exists()
