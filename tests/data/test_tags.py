"""Apertium tags built once at `tatu data build` (tatu.data.tags): stored and hashed in the
manifest, checked on load (an edited tag file is exit 65), never re-run by a run; their
categories agree with a hand-labelled sample; without the packages, one line and no crash.

The tagger is the real one (Debian apertium-por-cat and apertium-eng-spa, installed by
`make test` as root); where it cannot be installed the tests that need it skip with the reason
(fail under CI_STRICT=1)."""
from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from strict import cannot_run
from tiny_world import base_env

from tatu.daemon.logs import read_events
from tatu.daemon.main import main as daemon_main
from tatu.data import tags
from tatu.data.demo.sources import CHAT_PRETRAIN_FILE
from tatu.ops import cli
from tatu.ops.demo import PT_REPLAY, held_out_args

BENCH = Path(__file__).resolve().parents[2] / "bench" / "pos_agreement.py"


def need_tagger() -> None:
    problems = [p for p in (tags.tagger_problem("por"), tags.tagger_problem("eng")) if p]
    if problems:
        cannot_run("; ".join(problems) + f": apt-get install -y {' '.join(tags.TAGGER_PACKAGES)}")


def build(root: Path, src: Path, tokenizer: Path, out: Path) -> int:
    """`tatu data build` with the inputs the session's data was built from (tatu.ops.demo.prepare_data,
    through tiny_world.build_world): channels pretrain, replay and ptReplay, sft, the evals and the
    held-out sets the sources have. Other inputs are another build (and over the session's data, a
    rebuild under every other test reading it)."""
    chat = [src / CHAT_PRETRAIN_FILE] if (src / CHAT_PRETRAIN_FILE).is_file() else []
    pretrain = ",".join(map(str, [src / "pt_corpus.txt", src / "en_corpus.txt", *chat]))
    return cli.main(["data", "build", "--tokenizer", str(tokenizer), "--out", str(out),
                     "--text", f"pretrain={pretrain}", "--text", f"replay={src / 'en_corpus.txt'}",
                     "--text", f"{PT_REPLAY}={src / 'pt_corpus.txt'}", "--sft", f"sft={src / 'sft_train.jsonl'}",
                     "--eval", f"sftHeld={src / 'sft_held.jsonl'}", "--eval", f"ptVal={src / 'pt_val.txt'}",
                     "--eval", f"enRuler={src / 'en_ruler.txt'}", *held_out_args(src), "--seq-len", "192"])


def sft_env(tiny_trunk, data: Path, out: Path, run: str) -> dict:
    return base_env(data, out, TATU_RUN=run, TATU_SEED_CKPT=tiny_trunk["trunk"], SFT_GE=2, REPLAY_N=1,
                    MIX_STEPS_LIMIT=2, EVAL_EVERY=2, TATU_LR="1e-3", TATU_GEN_PROMPTS=0)


def test_tags_are_stored_hashed_and_built_once(tiny_trunk, tmp_path, capsys):
    need_tagger()
    manifest = json.loads((tiny_trunk["data"] / "manifest.json").read_text())
    for name, entry in manifest["evals"].items():
        stored = entry["tags"]
        path = tiny_trunk["data"] / stored["file"]
        assert stored["file"] == f"evals/{name}.tags.jsonl"
        assert tags.read_tags(path, stored["sha256"]) and len(tags.read_tags(path, stored["sha256"])) == entry["lines"]
        assert stored["language"] == ("eng" if name == "enRuler" else "por") and stored["units"] > 0
    first = json.loads((tiny_trunk["data"] / "evals" / "ptVal.tags.jsonl").read_text().splitlines()[0])
    text = (tiny_trunk["root"] / "sources" / "pt_val.txt").read_text().splitlines()[0]
    for start, end, category, tag in first["units"]:
        assert category in tags.CATEGORIES + ("punct",) and text[start:end]  # spans point into the scored text
    # same inputs and the same tagger: nothing to do. Built over a copy: the session's data is read by
    # tests running beside this one (pytest-xdist), and a build that were not up to date would rewrite it.
    data = tmp_path / "data"
    shutil.copytree(tiny_trunk["data"], data)
    capsys.readouterr()
    assert build(tmp_path, tiny_trunk["root"] / "sources", tiny_trunk["root"] / "tokenizer.json", data) == 0
    assert "up to date" in capsys.readouterr().out
    assert json.loads((data / "manifest.json").read_text()) == manifest


@pytest.mark.slow
def test_an_edited_tag_file_is_exit_65_for_the_daemon_and_tatu_eval(tiny_trunk, tmp_path, capsys):
    need_tagger()
    data = tmp_path / "data"
    shutil.copytree(tiny_trunk["data"], data)
    path = data / "evals" / "ptVal.tags.jsonl"
    path.write_text(path.read_text().replace('"noun"', '"verb"', 1))
    assert daemon_main(sft_env(tiny_trunk, data, tmp_path / "runs", "edited")) == 65
    assert cli.main(["eval", str(tiny_trunk["trunk"]), "--data", str(data), "--category", "noun",
                     "--json", str(tmp_path / "e.json")]) == 65
    assert "ptVal.tags.jsonl: its sha256 is not the manifest's" in capsys.readouterr().err


@pytest.mark.slow
def test_a_run_reads_the_stored_tags_and_never_runs_the_tagger(tiny_trunk, tmp_path, monkeypatch):
    need_tagger()
    # the tagger made unreachable for the run: its category metrics come from the data dir alone
    monkeypatch.setattr(tags, "APERTIUM_DIR", tmp_path / "no-apertium")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert daemon_main(sft_env(tiny_trunk, tiny_trunk["data"], tmp_path / "runs", "stored")) == 0
    evals = [e for e in read_events(tmp_path / "runs" / "stored" / "events.jsonl") if e["event"] == "eval"]
    assert evals[-1]["categories_note"] is None
    for name in ("sftHeld", "ptVal", "enRuler"):
        noun = evals[-1]["categories"][name]["noun"]
        assert noun["n_tokens"] > 0 and noun["bpc"] > 0 and set(noun["change"]) == {"value", "lo", "hi", "p_value", "mde"}
    assert evals[0]["categories"]["ptVal"]["verb"]["change"]["value"] == 0.0


@pytest.mark.slow
def test_without_the_packages_one_line_and_no_category_metrics(tiny_trunk, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tags, "APERTIUM_DIR", tmp_path / "no-apertium")  # as on a machine without them
    data = tmp_path / "data"
    assert build(tmp_path, tiny_trunk["root"] / "sources", tiny_trunk["root"] / "tokenizer.json", data) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "category" in line]
    assert len(err) == 1 and "apt-get install -y apertium-por-cat apertium-eng-spa" in err[0]
    assert all("error" in e["tags"] for e in json.loads((data / "manifest.json").read_text())["evals"].values())
    assert daemon_main(sft_env(tiny_trunk, data, tmp_path / "runs", "untagged")) == 0
    log = (tmp_path / "runs" / "untagged" / "run.log").read_text()
    assert log.count("no category metrics") == 1
    evals = [e for e in read_events(tmp_path / "runs" / "untagged" / "events.jsonl") if e["event"] == "eval"]
    assert all(e["categories"] == {} and "apt-get install" in e["categories_note"] for e in evals)


def test_categories_agree_with_the_hand_labelled_sample():
    need_tagger()
    spec = importlib.util.spec_from_file_location("pos_agreement", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for name, language in (("pt.txt", "por"), ("en.txt", "eng")):
        result = bench.agreement(bench.FIXTURES / name, language)
        assert result["sentences"] == 50 and result["words"] > 250
        # measured 94.2% (pt) and 92.1% (en) by bench/pos_agreement.py; docs/metrics.md prints them
        assert result["agree"] / result["words"] > 0.9, (name, result["disagreements"])
        assert all(a / n >= 0.6 for a, n in result["by_label"].values()), result["by_label"]


def test_lexical_units_and_categories_parse_the_stream_format():
    units = tags.lexical_units(r"^Do/De<pr>+o<det><def>$ ^a\/b/*a\/b$ \[x\] ^casa/casa<n><f><sg>$^./.<sent>$")
    assert units == [("Do", "De<pr>+o<det><def>"), ("a/b", "*a/b"), ("casa", "casa<n><f><sg>"), (".", ".<sent>")]
    assert [tags.category_of(a) for _, a in units] == [("function", "pr"), ("unknown", "*"), ("noun", "n"),
                                                       ("punct", "sent")]
    assert tags.align("Do a/b [x] casa.", units) == [[0, 2, "function", "pr"], [3, 6, "unknown", "*"],
                                                     [11, 15, "noun", "n"], [15, 16, "punct", "sent"]]
    assert tags.language_of("enRuler") == "eng" and tags.language_of("ptFaq") == "por" and tags.language_of("entrada") == "por"


def test_tatu_eval_category_prints_the_daemons_numbers(tiny_trunk, tmp_path):
    """`tatu eval --data DIR --category noun,verb` on the trunk's final weights: the per-category
    results its last eval logged (same weights, lines, seed and resamples)."""
    need_tagger()
    out = tmp_path / "eval.json"
    assert cli.main(["eval", str(tiny_trunk["trunk"]), "--data", str(tiny_trunk["data"]), "--category", "noun,verb",
                     "--json", str(out)]) == 0
    shown = json.loads(out.read_text())["sets"]
    last = [e for e in read_events(tiny_trunk["root"] / "runs" / "trunk" / "events.jsonl") if e["event"] == "eval"][-1]
    for name in ("ptVal", "enRuler"):
        by_category = {r["category"]: r for r in shown[name][1:]}
        assert set(by_category) == {"noun", "verb"}
        for category, result in by_category.items():
            logged = last["categories"][name][category]
            assert result["ppl"] == pytest.approx(logged["ppl"], rel=1e-12)
            assert result["bpc"] == pytest.approx(logged["bpc"], rel=1e-12)
            assert (result["ci"]["lo"], result["ci"]["hi"]) == pytest.approx((logged["lo"], logged["hi"]), rel=1e-12)
