"""`tatu eval` and `tatu compare` in-process, on tiny checkpoints saved in tmp_path."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from tatu.evals.scoring import evaluate
from tatu.evals.sets import load_eval_set, sample_lines
from tatu.model.checkpoint import save_checkpoint
from tatu.model.gpt import GPT, GPTConfig
from tatu.model.tokenizer import CharTokenizer
from tatu.ops.cli import main as tatu

PT_LINES = [f"o gato {w} dorme na casa de {v}" for w, v in zip("abcdefghijkl", "mnopqrstuvwx")]


def _config(tok):
    return GPTConfig(vocab_size=tok.vocab_size, block_size=32, n_layer=2, n_head=2, n_embd=32)


def _trained(model, tok, steps: int) -> GPT:
    """A few steps on the eval text itself: a model clearly better than uniform on it."""
    data = [torch.tensor([tok.bos_id, *tok.encode(line)]) for line in PT_LINES]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(steps):
        for seq in data:
            _, nll = model(seq[None, :-1], seq[None, 1:])
            opt.zero_grad()
            nll.mean().backward()
            opt.step()
    return model


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("evalcli")
    tok = CharTokenizer.train(PT_LINES + ["pergunta resposta sim"])
    torch.manual_seed(0)
    base = GPT(_config(tok))
    save_checkpoint(root / "base", model=base, model_config=_config(tok), tokenizer=tok)
    uniform = GPT(_config(tok))
    with torch.no_grad():
        uniform.transformer.wte.weight.zero_()
    save_checkpoint(root / "uniform", model=uniform, model_config=_config(tok), tokenizer=tok)
    torch.manual_seed(1)
    save_checkpoint(root / "trained", model=_trained(GPT(_config(tok)), tok, 15), model_config=_config(tok), tokenizer=tok)
    (root / "pt.txt").write_text("\n".join(PT_LINES) + "\n", encoding="utf-8")
    (root / "held.jsonl").write_text(
        "\n".join(json.dumps({"prompt": "pergunta", "response": r}) for r in ("sim", "o gato dorme")) + "\n",
        encoding="utf-8",
    )
    return root, tok, base


def test_eval_prints_table_and_writes_json_matching_the_rig(files, tmp_path, capsys):
    root, tok, base = files
    out = tmp_path / "e.json"
    rc = tatu(["eval", str(root / "base"), "--set", f"ptVal={root / 'pt.txt'}", "--set",
               f"sftHeld={root / 'held.jsonl'}", "--json", str(out), "--resamples", "200", "--category", "function-words"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "ptVal" in printed and "sftHeld" in printed and "ptVal[function-words]" in printed and "bpc" in printed
    payload = json.loads(out.read_text())
    expected = evaluate(base, load_eval_set(root / "pt.txt", tok, name="ptVal"), n_resamples=200)
    whole, function = payload["sets"]["ptVal"]
    assert whole["ppl"] == pytest.approx(expected.ppl, rel=1e-9)
    assert whole["n_lines"] == len(PT_LINES) and whole["bpc"] == pytest.approx(expected.bpc, rel=1e-9)
    assert function["category"] == "function-words" and function["bpc"] is None
    assert 0 < function["n_tokens"] < whole["n_tokens"]
    assert f"{whole['n_lines']}/{whole['n_lines_total']}" in printed
    ci = whole["ci"]  # as fmt_ci spells an interval: brackets, a comma, no space
    assert f" [{ci['lo']:.4g},{ci['hi']:.4g}] " in printed
    held = payload["sets"]["sftHeld"][0]
    assert held["n_chars"] == len("sim") + len("o gato dorme")  # responses only; EOS adds no chars
    assert held["n_tokens"] == held["n_chars"] + 2  # char-level, plus one EOS per pair


def test_eval_subsampling_draws_seeded_ruler_lines_says_k_of_n_and_warns(files, tmp_path, capsys):
    """--en-batches subsamples enRuler only (as EVAL_EN_BATCHES in the daemon), by sample_lines(seed):
    the same lines at every eval with that seed, recorded in the JSON."""
    root, _, _ = files
    out = tmp_path / "e.json"
    args = ["eval", str(root / "base"), "--set", f"enRuler={root / 'pt.txt'}", "--set", f"ptVal={root / 'pt.txt'}",
            "--en-batches", "2", "--batch", "3", "--json", str(out), "--resamples", "200", "--seed", "5"]
    assert tatu(args) == 0
    captured = capsys.readouterr()
    assert f"6/{len(PT_LINES)}" in captured.out and f"{len(PT_LINES)}/{len(PT_LINES)}" in captured.out
    assert "warning" in captured.err and "SE" in captured.err
    payload = json.loads(out.read_text())
    ruler, pt = payload["sets"]["enRuler"][0], payload["sets"]["ptVal"][0]
    assert ruler["lines"]["index"] == sample_lines(len(PT_LINES), 6, 5) and ruler["sample_seed"] == 5
    assert pt["lines"]["index"] == list(range(len(PT_LINES))) and pt["sample_seed"] is None
    assert payload["seed"] == 5
    assert tatu(args) == 0 and json.loads(out.read_text())["sets"]["enRuler"][0]["lines"]["index"] == ruler["lines"]["index"]
    capsys.readouterr()
    assert tatu([*args[:-1], "6"]) == 0
    assert json.loads(out.read_text())["sets"]["enRuler"][0]["lines"]["index"] == sample_lines(len(PT_LINES), 6, 6)


@pytest.mark.parametrize("command", ["eval", "compare"])
def test_a_part_of_speech_category_without_data_names_its_flag_and_the_word_lists(files, capsys, command):
    """`function` is Apertium's part-of-speech class (tags of a --data dir), never the word list:
    without --data it is refused before a checkpoint loads, naming where it comes from."""
    root, _, _ = files
    ckpts = [str(root / "base")] * (1 if command == "eval" else 2)
    assert tatu([command, *ckpts, "--set", f"pt={root / 'pt.txt'}", "--category", "content-words,function"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--category function: a part-of-speech category" in err[0]
    assert "--data" in err[0] and "function-words" in err[0]
    with pytest.raises(SystemExit) as usage:  # argparse's own usage error
        tatu([command, *ckpts, "--set", f"pt={root / 'pt.txt'}", "--category", "content"])
    assert usage.value.code == 2
    assert "unknown category 'content' (the word list is content-words;" in capsys.readouterr().err


def test_en_batches_without_a_ruler_set_is_a_usage_error(files, capsys):
    root, _, _ = files
    assert tatu(["eval", str(root / "base"), "--set", f"pt={root / 'pt.txt'}", "--en-batches", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "enRuler" in err[0]


def test_blank_lines_are_counted_and_reported(files, tmp_path, capsys):
    root, _, _ = files
    padded = tmp_path / "padded.txt"
    padded.write_text("\n".join(PT_LINES[:4] + ["", "   ", "\t", "\u00a0"] + PT_LINES[4:]) + "\n", encoding="utf-8")
    out = tmp_path / "b.json"
    assert tatu(["eval", str(root / "base"), "--set", f"pt={padded}", "--json", str(out), "--resamples", "200"]) == 0
    assert f"pt: {len(PT_LINES)} scored, 4 blank" in capsys.readouterr().out
    result = json.loads(out.read_text())["sets"]["pt"][0]
    assert result["n_blank"] == 4 and result["n_lines"] == len(PT_LINES)


def test_seed_defaults_to_the_checkpoints_tatu_seed(files, tmp_path, capsys):
    """One default: a checkpoint that records TATU_SEED is bootstrapped with it, else with
    TATU_SEED's default; --seed overrides. The CI follows the seed, the ppl does not."""
    from tatu.daemon.config import RunConfig
    from tatu.model.checkpoint import load_checkpoint

    root, tok, _ = files
    base = load_checkpoint(root / "base")
    seeded = tmp_path / "seeded"
    save_checkpoint(seeded, model=base.build_model("cpu"), model_config=base.model_config, tokenizer=tok,
                    meta={"config": {"TATU_SEED": 4242}})
    runs = {}
    for name, ckpt, extra in (("seeded", seeded, []), ("default", root / "base", []),
                              ("explicit", root / "base", ["--seed", "4242"])):
        out = tmp_path / f"{name}.json"
        assert tatu(["eval", str(ckpt), "--set", f"pt={root / 'pt.txt'}", "--json", str(out), "--resamples", "200",
                     *extra]) == 0
        runs[name] = json.loads(out.read_text())
    printed = capsys.readouterr().out
    assert f"seed 4242 (TATU_SEED of {seeded}), 200 resamples" in printed
    assert runs["seeded"]["seed"] == 4242 and runs["default"]["seed"] == RunConfig.model_fields["seed"].default
    seeded_ci, default_ci, explicit_ci = (runs[n]["sets"]["pt"][0]["ci"] for n in ("seeded", "default", "explicit"))
    assert seeded_ci == explicit_ci and seeded_ci != default_ci
    expected = evaluate(base.build_model("cpu"), load_eval_set(root / "pt.txt", tok, name="pt"), n_resamples=200, seed=4242)
    assert (seeded_ci["lo"], seeded_ci["hi"]) == (expected.ci.lo, expected.ci.hi)


def test_eval_and_compare_write_a_file_only_where_asked(files, tmp_path, monkeypatch, capsys):
    root, _, _ = files
    monkeypatch.chdir(tmp_path)
    assert tatu(["eval", str(root / "base"), "--set", f"pt={root / 'pt.txt'}", "--resamples", "200"]) == 0
    assert tatu(["compare", str(root / "base"), str(root / "trained"), "--set", f"pt={root / 'pt.txt'}",
                 "--resamples", "200"]) == 0
    assert not list(tmp_path.iterdir()) and "wrote" not in capsys.readouterr().out
    out = tmp_path / "sub" / "e.json"
    out.parent.mkdir()
    assert tatu(["eval", str(root / "base"), "--set", f"pt={root / 'pt.txt'}", "--resamples", "200", "--json", str(out)]) == 0
    assert list(tmp_path.iterdir()) == [out.parent] and f"wrote {out}" in capsys.readouterr().out


def test_bad_checkpoint_and_bad_eval_file_exit_65_with_one_line(files, tmp_path, capsys):
    root, _, _ = files
    rc = tatu(["eval", str(tmp_path / "nope"), "--set", f"pt={root / 'pt.txt'}"])
    err = capsys.readouterr().err
    assert rc == 65 and "no such checkpoint" in err and len(err.strip().splitlines()) == 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a", "response": "b"}\n{oops\n')
    rc = tatu(["eval", str(root / "base"), "--set", f"held={bad}", "--json", str(tmp_path / "x.json")])
    err = capsys.readouterr().err
    assert rc == 65 and f"{bad}:2:" in err and len(err.strip().splitlines()) == 1
    assert tatu(["eval", str(root / "base"), "--set", "no-equals-sign"]) == 65


def compare_on_pt(root: Path, a: str, b: str, tmp_path: Path, capsys, resamples: int) -> tuple[str, dict]:
    """`tatu compare A B` on the pt set: (what it printed, its JSON row for pt); exit 0 asserted."""
    out = tmp_path / "c.json"
    rc = tatu(["compare", str(root / a), str(root / b), "--set", f"pt={root / 'pt.txt'}",
               "--json", str(out), "--resamples", str(resamples)])
    assert rc == 0
    return capsys.readouterr().out, json.loads(out.read_text())["sets"]["pt"][0]


def test_compare_identical_checkpoints_is_within_resolution(files, tmp_path, capsys):
    printed, row = compare_on_pt(files[0], "base", "base", tmp_path, capsys, 200)
    assert "within resolution" in printed
    # nothing varies between A and B: no resolution to state, as the daemon's step-0 `mde=n/a`
    assert "(MDE n/a)" in printed and "0.00%  within" not in printed
    # the CI as fmt_ci writes one (tatu/formats.py): brackets, a comma, no space
    assert f"change +0.0%, CI [{(row['lo'] - 1) * 100:+.1f}%,{(row['hi'] - 1) * 100:+.1f}%] includes 0" in printed
    table_row = next(line for line in printed.splitlines() if line.startswith("pt "))
    assert table_row.split()[5] == f"[{row['lo']:.4f},{row['hi']:.4f}]" and table_row.split()[7] == "n/a"
    assert row["ratio"] == pytest.approx(1.0, abs=1e-12) and row["lo"] <= 1.0 <= row["hi"]


def test_compare_says_which_is_better(files, tmp_path, capsys):
    root, tok, _ = files
    printed, row = compare_on_pt(root, "uniform", "trained", tmp_path, capsys, 500)
    assert f"B is better by {(1 - row['ratio']) * 100:.1f}% (CI [{(row['lo'] - 1) * 100:+.1f}%,{(row['hi'] - 1) * 100:+.1f}%], p<" in printed
    # every replicate on one side: the p-value is at the bootstrap's floor, 2/(B+1), and says so
    assert row["p_value"] == pytest.approx(2 / 501) and "p<0.004" in printed and "p=" not in printed
    assert row["a"]["ppl"] == pytest.approx(tok.vocab_size, rel=1e-6)
    assert row["ratio"] == pytest.approx(row["b"]["ppl"] / row["a"]["ppl"], rel=1e-9) and row["hi"] < 1.0
    printed, row = compare_on_pt(root, "trained", "uniform", tmp_path, capsys, 500)
    assert "B is worse by" in printed and row["lo"] > 1.0


def test_uniform_checkpoint_scores_vocab_size_through_the_cli(files, tmp_path):
    root, tok, _ = files
    out = tmp_path / "u.json"
    assert tatu(["eval", str(root / "uniform"), "--set", f"pt={root / 'pt.txt'}", "--json", str(out),
                 "--resamples", "200"]) == 0
    result = json.loads(out.read_text())["sets"]["pt"][0]
    assert result["ppl"] == pytest.approx(tok.vocab_size, rel=1e-6)
    assert result["bpc"] == pytest.approx(math.log2(tok.vocab_size), rel=1e-6)
