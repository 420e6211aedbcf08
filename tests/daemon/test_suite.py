"""The eval suite's generations (tatu.daemon.suite.generate_samples): the invented-word rate
and its Wilson interval over the generated words."""
from __future__ import annotations

import pytest
import torch

from tatu.daemon.config import load_config


def config(**env):
    base = {"TATU_DATA": "d", "TATU_MODE": "pretrain", "TATU_SEED": "3", "TATU_LR": "1e-2"}
    return load_config({**base, **{k: str(v) for k, v in env.items()}})[0]


def test_the_invented_word_rate_of_the_generations_has_a_wilson_interval():
    """The interval against scipy's Wilson interval over the same generated words."""
    from scipy.stats import binomtest

    from tatu.daemon.suite import Suite, generate_samples
    from tatu.evals.words import Dictionary, invented_rate
    from tatu.model.tokenizer import CharTokenizer

    tok = CharTokenizer.train(["casa gato mesa dorme bem", "quanto e dois xyzzy"])

    class Generator(torch.nn.Module):
        """Stands in for a trained model (an untrained one writes no words): it "generates" fixed
        texts, so the interval is checked over words whose count is known."""

        def generate(self, prompts, n_tokens, eos_id):
            return [tok.encode("casa xyzzy gato dorme"), tok.encode("mesa bem xyzzy")][:len(prompts)]

    model = Generator()
    dictionary = Dictionary.build(["casa gato mesa"] * 3, min_count=3)
    suite = Suite(sets={}, notes={}, file_hashes={}, gen_pairs=[("quanto e dois", "dois"), ("casa", "gato")],
                  dictionary=dictionary)
    cfg = config(TATU_GEN_TOKENS="40")
    sample = generate_samples(model, suite, tok, "cpu", cfg)
    inv = sample["invented"]
    texts = [s["output"] for s in sample["samples"]]
    counted = invented_rate(texts, dictionary)
    assert (inv["n_words"], inv["n_invented"]) == (counted.n_words, counted.n_invented) == (7, 4)
    ci = binomtest(inv["n_invented"], inv["n_words"]).proportion_ci(confidence_level=0.95, method="wilson")
    assert inv["lo"] == pytest.approx(ci.low, abs=1e-12) and inv["hi"] == pytest.approx(ci.high, abs=1e-12)
    assert inv["lo"] <= inv["rate"] <= inv["hi"]
