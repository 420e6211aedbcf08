"""`tatu interpolate`: the weights against a naive float64 computation, the scores against
`tatu eval` / `tatu compare` of the parents, the pick against a hand computation, the written
checkpoint, and the refusals. The parents: the session's tiny trunk and a 4-step SFT run from it."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tiny_world import sft_env
from tatu.daemon.main import main as daemon_main
from tatu.model.checkpoint import load_checkpoint
from tatu.model.hf import load_checkpoint_or_gpt2
from tatu.model.interpolation import interpolate_state, plain_weights
from tatu.ops.cli import main as tatu
from tatu.ops.interpolate.pick import choose, parse_pick

BOOT = ["--seed", "7", "--resamples", "200"]


@pytest.fixture(scope="module")
def path_run(interp_world):
    """One interpolation at 0, 0.25, 0.5, 1 with its report: path.json as a dict."""
    report = interp_world["root"] / "report"
    assert tatu(["interpolate", str(interp_world["seed"]), str(interp_world["ft"]), "--data", str(interp_world["data"]),
                 "--alphas", "0.25,0.5,1", "--report", str(report), *BOOT]) == 0
    assert (report / "path.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return json.loads((report / "path.json").read_text())


def _naive(seed: torch.Tensor, ft: torch.Tensor, alpha: float) -> np.ndarray:
    """Element by element in float64 with numpy, rounded once to float32."""
    return ((1.0 - alpha) * seed.numpy().astype(np.float64) + alpha * ft.numpy().astype(np.float64)).astype(np.float32)


def test_interpolated_weights_equal_a_naive_float64_computation(interp_world):
    seed, ft = (plain_weights(load_checkpoint(interp_world[k])) for k in ("seed", "ft"))
    assert any(not torch.equal(seed[k], ft[k]) for k in seed)  # the fine-tune moved something
    for alpha in (0.25, 0.5, 0.7):
        mixed = interpolate_state(seed, ft, alpha)
        assert mixed.keys() == seed.keys()
        for key in seed:
            assert mixed[key].dtype == seed[key].dtype
            assert np.array_equal(mixed[key].numpy(), _naive(seed[key], ft[key], alpha)), (alpha, key)
    half = interpolate_state(seed, ft, 0.5)
    for key in seed:  # the acceptance's own words: at 0.5, the float64 mean
        assert torch.equal(half[key], ((seed[key].double() + ft[key].double()) / 2).float())


def test_alpha_0_is_the_seed_and_alpha_1_the_fine_tune_bit_for_bit(interp_world):
    seed, ft = (plain_weights(load_checkpoint(interp_world[k])) for k in ("seed", "ft"))
    for alpha, parent in ((0.0, seed), (1.0, ft)):
        mixed = interpolate_state(seed, ft, alpha)
        for key in parent:
            assert mixed[key].numpy().tobytes() == parent[key].numpy().tobytes(), (alpha, key)
    # a signed zero keeps its sign at the endpoints (the formula would give -0.0 + 0.0 = +0.0)
    a, b = {"w": torch.tensor([-0.0, 1.0])}, {"w": torch.tensor([2.0, 3.0])}
    assert interpolate_state(a, b, 0.0)["w"].numpy().tobytes() == a["w"].numpy().tobytes()


def test_the_tied_embedding_stays_one_tensor(interp_world):
    ckpt = load_checkpoint(interp_world["seed"])
    mixed = interpolate_state(plain_weights(ckpt), plain_weights(load_checkpoint(interp_world["ft"])), 0.5)
    assert "lm_head.weight" not in mixed
    model = ckpt.build_model()
    model.load_state_dict(mixed, strict=False)
    assert model.lm_head.weight is model.transformer.wte.weight
    assert torch.equal(model.lm_head.weight, mixed["transformer.wte.weight"])


def _eval_json(ckpt: Path, data: Path, out: Path) -> dict:
    assert tatu(["eval", str(ckpt), "--data", str(data), "--json", str(out), *BOOT]) == 0
    return json.loads(out.read_text())


def test_scores_at_alpha_0_and_1_are_tatu_eval_of_the_parents(interp_world, path_run, tmp_path):
    by_alpha = {a["alpha"]: a for a in path_run["alphas"]}
    assert sorted(by_alpha) == [0.0, 0.25, 0.5, 1.0]  # 0 added: every change is against it
    for alpha, key in ((0.0, "seed"), (1.0, "ft")):
        expected = _eval_json(interp_world[key], interp_world["data"], tmp_path / f"{key}.json")["sets"]
        assert set(by_alpha[alpha]["sets"]) == set(expected) >= {"sftHeld", "enRuler", "ptVal"}
        for name, (whole, *_) in expected.items():
            got = by_alpha[alpha]["sets"][name]
            assert got["ppl"] == whole["ppl"] and got["ci"] == whole["ci"], (alpha, name)
            assert got["lines"] == whole["lines"]
    assert by_alpha[0.0]["metrics"]["drift"] == 0.0 and by_alpha[0.0]["metrics"]["drift_hi"] == 0.0


def test_changes_are_tatu_compares_paired_ci_against_the_seed(interp_world, path_run, tmp_path):
    out = tmp_path / "c.json"
    assert tatu(["compare", str(interp_world["seed"]), str(interp_world["ft"]), "--data", str(interp_world["data"]), "--json", str(out), *BOOT]) == 0
    compared = json.loads(out.read_text())["sets"]
    at_1 = next(a for a in path_run["alphas"] if a["alpha"] == 1.0)
    for name, (row, *_) in compared.items():
        change = at_1["changes"][name]
        assert (change["value"], change["lo"], change["hi"]) == pytest.approx((row["ratio"] - 1, row["lo"] - 1, row["hi"] - 1),
                                                                           rel=1e-12, abs=1e-15), name
    metrics = at_1["metrics"]
    assert metrics["drift_hi"] == at_1["changes"]["enRuler"]["hi"]
    assert metrics["sftHeld_change_lo"] == at_1["changes"]["sftHeld"]["lo"]
    assert "ptVal_change" not in metrics  # shown, never judged


def _hand_pick(path_run: dict, threshold: float, chooses=max) -> float | None:
    ok = [a["alpha"] for a in path_run["alphas"] if a["changes"]["enRuler"]["hi"] < threshold]
    return chooses(ok) if ok else None


def test_pick_chooses_what_a_hand_computation_chooses(path_run):
    highs = sorted(a["changes"]["enRuler"]["hi"] for a in path_run["alphas"])
    metrics = {a["alpha"]: a["metrics"] for a in path_run["alphas"]}
    for threshold in [(x + y) / 2 for x, y in zip(highs, highs[1:])] + [highs[-1] + 1]:
        for word, chooses in (("largest", max), ("smallest", min)):
            pick = parse_pick(f"{word} alpha such that drift_hi < {threshold!r}", (), {}, Path("ft"))
            assert choose(pick, metrics).alpha == _hand_pick(path_run, threshold, chooses), (word, threshold)
    synthetic = {0.0: {"drift": 0.0}, 0.5: {"drift": 0.05}, 1.0: {"drift": 0.10}}
    assert choose(parse_pick("smallest alpha such that drift <= 5%", (), {}, Path("x")), synthetic).alpha == 0.0
    assert choose(parse_pick("largest alpha such that drift <= 5%", (), {}, Path("x")), synthetic).alpha == 0.5
    assert choose(parse_pick("largest alpha such that drift < 5%", (), {}, Path("x")), synthetic).alpha == 0.0
    limit = parse_pick("largest alpha such that drift < MIX_FORGET_LIMIT", (), {"MIX_FORGET_LIMIT": 0.2}, Path("x"))
    assert choose(limit, synthetic).alpha == 1.0
    assert choose(parse_pick("largest alpha such that drift < -1", (), {}, Path("x")), synthetic).alpha is None


@pytest.fixture(scope="module")
def picked(interp_world, path_run):
    """--pick with a threshold between two alphas' drift_hi, chosen so that the hand computation
    lands inside the path (0.25 or 0.5): the checkpoint is then neither parent."""
    highs = sorted(a["changes"]["enRuler"]["hi"] for a in path_run["alphas"])
    rule, alpha = next((f"{word} alpha such that drift_hi < {t!r}", _hand_pick(path_run, t, chooses))
                       for word, chooses in (("largest", max), ("smallest", min))
                       for t in [(x + y) / 2 for x, y in zip(highs, highs[1:])]
                       if _hand_pick(path_run, t, chooses) in (0.25, 0.5))
    out = interp_world["root"] / "picked"
    assert tatu(["interpolate", str(interp_world["seed"]), str(interp_world["ft"]), "--data", str(interp_world["data"]), "--alphas", "0.25,0.5,1",
                 "--pick", rule, "--out", str(out), "--report", str(interp_world["root"] / "report-picked"), *BOOT]) == 0
    return out, alpha


def test_the_picked_checkpoint_records_both_parents_and_alpha(interp_world, picked, path_run):
    out, alpha = picked
    meta = json.loads((out / "meta.json").read_text())["interpolation"]
    assert meta["alpha"] == alpha and alpha is not None
    for key, name in (("seed", "seed"), ("ft", "finetuned")):
        assert meta[name]["sha256"] == hashlib.sha256((interp_world[key] / "model.safetensors").read_bytes()).hexdigest()
    assert " alpha such that drift_hi <" in meta["rule"] and 0 < alpha < 1
    assert meta["said"].startswith(f"interpolated at alpha={alpha:g} between {interp_world['seed']} (sha256 {meta['seed']['sha256'][:12]}..)")
    assert meta["metrics"] == next(a["metrics"] for a in path_run["alphas"] if a["alpha"] == alpha)
    ckpt = load_checkpoint_or_gpt2(out)  # the loader of tatu eval, compare, generate, export and TATU_SEED_CKPT
    mixed = interpolate_state(*(plain_weights(load_checkpoint(interp_world[k])) for k in ("seed", "ft")), alpha)
    assert all(torch.equal(ckpt.model_state[k], v) for k, v in mixed.items()) and ckpt.model_state.keys() == mixed.keys()
    assert ckpt.tokenizer.hash == load_checkpoint(interp_world["seed"]).tokenizer.hash


def test_the_picked_checkpoint_scores_in_tatu_eval_as_on_the_path(interp_world, picked, path_run, tmp_path):
    out, alpha = picked
    scored = _eval_json(out, interp_world["data"], tmp_path / "e.json")["sets"]
    on_path = next(a for a in path_run["alphas"] if a["alpha"] == alpha)["sets"]
    assert {name: whole["ppl"] for name, (whole, *_) in scored.items()} == {n: r["ppl"] for n, r in on_path.items()}


def test_the_picked_checkpoint_seeds_a_daemon_run(interp_world, picked, tmp_path):
    out, alpha = picked
    env = sft_env({"data": interp_world["data"], "trunk": out}, tmp_path, TATU_RUN="next", MIX_STEPS_LIMIT=1, EVAL_EVERY=1,
                  TATU_GEN_PROMPTS=0)
    assert daemon_main(env) == 0
    events = [json.loads(line) for line in (tmp_path / "next" / "events.jsonl").read_text().splitlines()]
    first = next(e for e in events if e.get("event") == "eval")
    assert first["step"] == 0 and first["sets"]["sftHeld"]["ppl"] == pytest.approx(
        load_ppl(interp_world, alpha, "sftHeld"), rel=1e-9)


def load_ppl(interp_world, alpha: float, name: str) -> float:
    report = json.loads((interp_world["root"] / "report-picked" / "path.json").read_text())
    return next(a for a in report["alphas"] if a["alpha"] == alpha)["sets"][name]["ppl"]


@pytest.fixture(scope="module")
def lora_world(interp_world, tiny_trunk):
    """A LoRA run's final/ (merged weights, the adapter beside) and the tiny interp_world's data rebuilt
    with a held-out set, ptNews: the path of a partial fine-tune, judged on a held-out set."""
    from tiny_world import PT_WORDS, sentences

    root, src = interp_world["root"] / "lora", tiny_trunk["root"] / "sources"
    root.mkdir()
    (root / "ptNews.txt").write_text("\n".join(sentences(PT_WORDS, 12, seed=100)) + "\n", encoding="utf-8")
    data = root / "data"
    assert tatu(["data", "build", "--tokenizer", str(tiny_trunk["root"] / "tokenizer.json"), "--out", str(data),
                 "--text", f"pretrain={src / 'pt_corpus.txt'}", "--text", f"replay={src / 'en_corpus.txt'}",
                 "--sft", f"sft={src / 'sft_train.jsonl'}", "--eval", f"sftHeld={src / 'sft_held.jsonl'}",
                 "--eval", f"ptVal={src / 'pt_val.txt'}", "--eval", f"enRuler={src / 'en_ruler.txt'}",
                 "--eval", f"ptNews={root / 'ptNews.txt'}", "--seq-len", "192"]) == 0
    assert daemon_main(sft_env(tiny_trunk, root / "runs", TATU_RUN="lora", MIX_STEPS_LIMIT=4, EVAL_EVERY=4,
                               TATU_GEN_PROMPTS=0, TATU_LR="2e-2", TATU_TRAIN="lora", TATU_LORA_RANK=2)) == 0
    return {"data": data, "ft": root / "runs" / "lora" / "final", "root": root}


def test_a_lora_final_interpolates_like_any_checkpoint_and_a_held_out_set_is_judged(interp_world, lora_world, capsys):
    ft = load_checkpoint(lora_world["ft"])
    assert "adapter" in ft.extra_tensors and ft.meta["adapter"]["rank"] == 2  # a LoRA run's final/, adapter beside
    seed_state, ft_state = plain_weights(load_checkpoint(interp_world["seed"])), plain_weights(ft)
    assert ft_state.keys() == seed_state.keys()  # merged: plain weights, no adapter tensors
    half = interpolate_state(seed_state, ft_state, 0.5)
    assert all(np.array_equal(half[k].numpy(), _naive(seed_state[k], ft_state[k], 0.5)) for k in seed_state)
    report = lora_world["root"] / "report"
    rule = "largest alpha such that ptNews_change_hi < 0.5 and drift_hi < 1"
    assert tatu(["interpolate", str(interp_world["seed"]), str(lora_world["ft"]), "--data", str(lora_world["data"]),
                 "--alphas", "0:1:0.5", "--pick", rule, "--report", str(report), *BOOT]) == 0
    printed = capsys.readouterr().out
    assert "ptNews change" in printed.splitlines()[next(i for i, l in enumerate(printed.splitlines()) if "alpha  sftHeld" in l)]
    path = json.loads(report.joinpath("path.json").read_text())
    metrics = {a["alpha"]: a["metrics"] for a in path["alphas"]}
    assert sorted(metrics) == [0.0, 0.5, 1.0] and metrics[1.0]["ptNews_change_hi"] == path["alphas"][2]["changes"]["ptNews"]["hi"]
    # alpha 1's row: each change as fmt_ci writes one (+8.1% [+7.1%,+9.3%]), the held-out set's alone
    row = next(line.split() for line in printed.splitlines() if line.split()[:1] == ["1"])
    changes = path["alphas"][2]["changes"]
    ci = {name: [f"{c['value'] * 100:+.1f}%", f"[{c['lo'] * 100:+.1f}%,{c['hi'] * 100:+.1f}%]"] for name, c in changes.items()}
    assert row[1:6] == ci["sftHeld"] + ci["enRuler"] + ci["ptNews"][:1]
    hand = max(a for a, m in metrics.items() if m["ptNews_change_hi"] < 0.5 and m["drift_hi"] < 1)
    assert path["pick"]["alpha"] == hand and f"alpha={hand:g}: the largest alpha such that" in printed


def test_the_picked_checkpoint_runs_in_generate_compare_and_export(interp_world, picked, tmp_path, capsys):
    out, _ = picked
    assert tatu(["generate", str(out), "--prompt", "o gato", "--max-new-tokens", "4"]) == 0
    assert tatu(["compare", str(interp_world["seed"]), str(out), "--data", str(interp_world["data"]), *BOOT]) == 0
    assert tatu(["export", str(out), "--format", "hf", str(tmp_path / "hf")]) == 0
    exported = load_checkpoint_or_gpt2(tmp_path / "hf")
    assert all(torch.equal(exported.model_state[k], v) for k, v in load_checkpoint(out).model_state.items())
