"""MixedStream: deterministic per seed, restartable from a small state, honest per-channel counts."""
import json
import random

import numpy as np
import pytest
import torch

from tatu.data.build import BuildSpec, build_data
from tatu.data.stream import IGNORE_INDEX, MicroBatch, MixedStream, epoch_permutation
from tatu.daemon.main import exit_code_for
from tatu.data.manifest import DataError
from tatu.exitcodes import BAD_CONFIG, BAD_DATA
from tatu.model.chat import encode_pair
from tatu.model.gpt import GPT, GPTConfig
from tatu.model.tokenizer import CharTokenizer

WORDS = "o tatu cava um buraco à noite ação é não então pão mãe".split()
EN_WORDS = "the armadillo digs a hole at night and sleeps by day".split()
SEQ_LEN = 24


def _docs(rng, words, n, max_words):
    return [" ".join(rng.choice(words) for _ in range(rng.randint(1, max_words))) for _ in range(n)]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("stream")
    rng = random.Random(0)
    pt, en = _docs(rng, WORDS, 30, 12), _docs(rng, EN_WORDS, 25, 10)
    # distinct prompts so each packed pair can be identified; lengths vary so packing is uneven
    pairs = [{"prompt": f"p{i}", "response": " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 2)))}
             for i in range(23)]
    (root / "pt.txt").write_text("\n\n".join(pt) + "\n", encoding="utf-8")
    (root / "en.txt").write_text("\n\n".join(en) + "\n", encoding="utf-8")
    (root / "sft.jsonl").write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pairs), encoding="utf-8")
    tok = CharTokenizer.train(pt + en + [p["prompt"] + p["response"] for p in pairs])
    spec = BuildSpec(tokenizer="", out_dir=str(root / "data"), text={"pretrain": [str(root / "pt.txt")],
                     "replay": [str(root / "en.txt")]}, sft={"sft": [str(root / "sft.jsonl")]}, seq_len=SEQ_LEN)
    build_data(spec, tok, progress=False)
    return root / "data", tok, pairs


def _stream(data_dir, seed=0, mix=None, micro_batch=3):
    return MixedStream(data_dir, mix=mix or {"sft": 2, "replay": 3}, micro_batch=micro_batch, seq_len=SEQ_LEN, seed=seed)


def _fingerprint(step):
    return [(mb.channel, mb.x.tobytes(), mb.y.tobytes()) for mb in step.micro_batches]


def test_batches_have_the_contract_shapes_and_order(built):
    data_dir, tok, _ = built
    step = _stream(data_dir).next_step()
    assert [mb.channel for mb in step.micro_batches] == ["sft"] * 2 + ["replay"] * 3
    for mb in step.micro_batches:
        assert mb.x.dtype == np.int64 and mb.y.dtype == np.int64 and mb.x.shape == mb.y.shape == (3, SEQ_LEN)


def test_same_seed_same_batches_other_seed_different(built):
    data_dir, _, _ = built
    a, b, c = _stream(data_dir, seed=1), _stream(data_dir, seed=1), _stream(data_dir, seed=2)
    steps_a = [_fingerprint(a.next_step()) for _ in range(10)]
    assert steps_a == [_fingerprint(b.next_step()) for _ in range(10)]
    assert steps_a != [_fingerprint(c.next_step()) for _ in range(10)]
    assert not np.array_equal(epoch_permutation(1, "sft", 0, 50), epoch_permutation(1, "sft", 1, 50))
    assert not np.array_equal(epoch_permutation(1, "sft", 0, 50), epoch_permutation(1, "replay", 0, 50))


@pytest.mark.parametrize("k", [0, 3, 7])
def test_state_restored_continues_the_identical_next_50_steps(built, k):
    data_dir, _, _ = built
    original = _stream(data_dir, seed=5)
    for _ in range(k):
        original.next_step()
    state = json.loads(json.dumps(original.state_dict()))  # it must survive JSON
    assert len(json.dumps(state)) < 400
    expected = [original.next_step() for _ in range(50)]
    # the 50 steps cross epoch boundaries of both channels, so restore must handle them
    assert expected[-1].epochs["sft"] >= 2 and expected[-1].epochs["replay"] >= 2

    restored = _stream(data_dir, seed=5)
    restored.load_state_dict(state)
    got = [restored.next_step() for _ in range(50)]
    assert [_fingerprint(s) for s in got] == [_fingerprint(s) for s in expected]
    assert [s.step for s in got] == list(range(k, k + 50))


def test_state_of_another_seed_or_seq_len_is_refused(built):
    data_dir, _, _ = built
    state = _stream(data_dir, seed=5).state_dict()
    with pytest.raises(DataError) as excinfo:
        _stream(data_dir, seed=6).load_state_dict(state)
    assert exit_code_for(excinfo.value) == BAD_CONFIG and "seed" in str(excinfo.value)


def test_reported_counts_and_replay_fraction_equal_the_batches(built):
    data_dir, _, _ = built
    stream = _stream(data_dir, seed=3, mix={"sft": 4, "replay": 2})
    for _ in range(20):
        step = stream.next_step()
        counted = {"sft": 0, "replay": 0}
        for mb in step.micro_batches:
            counted[mb.channel] += int((mb.y != IGNORE_INDEX).sum())
        assert step.target_tokens == counted
        assert step.replay_fraction == pytest.approx(counted["replay"] / (counted["sft"] + counted["replay"]))
        assert 0 < step.replay_fraction < 1


def test_zero_count_channels_are_skipped(built):
    data_dir, _, _ = built
    sft_only = _stream(data_dir, mix={"sft": 2, "replay": 0}).next_step()
    assert {mb.channel for mb in sft_only.micro_batches} == {"sft"} and sft_only.replay_fraction == 0.0
    replay_only = _stream(data_dir, mix={"sft": 0, "replay": 2, "absent": 0}).next_step()
    assert {mb.channel for mb in replay_only.micro_batches} == {"replay"} and replay_only.replay_fraction == 1.0
    with pytest.raises(DataError) as excinfo:
        _stream(data_dir, mix={"absent": 1})
    assert exit_code_for(excinfo.value) == BAD_CONFIG and "absent" in str(excinfo.value)


def test_text_windows_cover_the_shard_once_per_epoch(built):
    data_dir, tok, _ = built
    shard = np.fromfile(data_dir / "replay" / "tokens.bin", dtype=np.uint16).astype(np.int64)
    n_windows = (len(shard) - 1) // SEQ_LEN
    expected = sorted(tuple(shard[i * SEQ_LEN:i * SEQ_LEN + SEQ_LEN + 1]) for i in range(n_windows))
    stream = _stream(data_dir, mix={"replay": 1}, micro_batch=1)
    seen = []
    for _ in range(n_windows):
        (mb,) = stream.next_step().micro_batches
        x, y = mb.x[0], mb.y[0]
        predicted = y != IGNORE_INDEX
        assert np.array_equal(y[predicted], x[1:][predicted[:-1]].tolist() + ([y[-1]] if predicted[-1] else []))
        assert tok.bos_id not in y.tolist(), "BOS is never a target"
        full_y = np.where(predicted, y, tok.bos_id)  # only BOS targets are ignored in text windows
        seen.append(tuple([x[0], *full_y]))
    assert sorted(seen) == expected
    assert stream.channels["replay"].epoch == 1 and stream.channels["replay"].cursor == 0


def _split_row(row, tok):
    """Segments of a packed row (each starting at BOS), and the trailing padding length."""
    real = row[row != tok.pad_id]
    assert np.all(row[len(real):] == tok.pad_id), "padding only at the end of a row"
    starts = np.flatnonzero(real == tok.bos_id).tolist()
    assert starts and starts[0] == 0
    return [real[a:b].tolist() for a, b in zip(starts, starts[1:] + [len(real)])]


def test_sft_rows_pack_whole_pairs_and_only_responses_are_targets(built):
    data_dir, tok, pairs = built
    encoded = [encode_pair(tok, p["prompt"], p["response"]) for p in pairs]
    index_of = {tuple(ids): i for i, (ids, _) in enumerate(encoded)}
    stream = _stream(data_dir, seed=9, mix={"sft": 1}, micro_batch=4)
    visited = []
    for _ in range(8):
        (mb,) = stream.next_step().micro_batches
        for x, y in zip(mb.x, mb.y):
            # the row's last id is y[-1] when it is a target, else padding (pairs end with a target EOS)
            row = np.append(x, y[-1] if y[-1] != IGNORE_INDEX else tok.pad_id)
            expected_target = []
            for segment in _split_row(row, tok):
                assert tuple(segment) in index_of, "a row holds only whole pairs"
                visited.append(index_of[tuple(segment)])
                expected_target += encoded[index_of[tuple(segment)]][1]
            expected_target += [False] * (SEQ_LEN + 1 - len(expected_target))
            mask = np.array(expected_target[1:])
            assert np.array_equal(y, np.where(mask, row[1:], IGNORE_INDEX))
    # each epoch visits every pair exactly once
    assert sorted(visited[:len(pairs)]) == list(range(len(pairs)))
    assert sorted(visited[len(pairs):2 * len(pairs)]) == list(range(len(pairs)))


def test_a_pair_longer_than_a_row_is_refused(built):
    data_dir, _, _ = built
    with pytest.raises(DataError) as excinfo:
        MixedStream(data_dir, mix={"sft": 1}, micro_batch=1, seq_len=4, seed=0)
    assert exit_code_for(excinfo.value) == BAD_DATA and "--seq-len 4" in str(excinfo.value)


def test_micro_batch_with_zero_targets_gives_a_finite_step_loss(built):
    data_dir, tok, _ = built
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=SEQ_LEN, n_layer=1, n_head=2, n_embd=16))
    real = _stream(data_dir, mix={"replay": 1}, micro_batch=2).next_step().micro_batches[0]
    empty = MicroBatch("sft", real.x.copy(), np.full_like(real.y, IGNORE_INDEX))
    assert empty.n_targets == 0

    def step_loss(micro_batches):
        """The loop's reduction: token-weighted over the whole step."""
        total_targets = sum(mb.n_targets for mb in micro_batches)
        loss = torch.zeros(())
        for mb in micro_batches:
            _, nll = model(torch.from_numpy(mb.x), torch.from_numpy(mb.y))
            loss = loss + nll.sum() / max(total_targets, 1)
        return loss

    model.zero_grad()
    mixed = step_loss([real, empty])
    mixed.backward()
    assert torch.isfinite(mixed)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    assert mixed.item() == pytest.approx(step_loss([real]).item(), rel=1e-6)
    only_empty = step_loss([empty])
    assert torch.isfinite(only_empty) and only_empty.item() == 0.0


def test_state_of_another_micro_batch_or_mix_is_refused_naming_it(built):
    data_dir, _, _ = built
    state = _stream(data_dir, seed=5).state_dict()
    with pytest.raises(DataError) as excinfo:
        _stream(data_dir, seed=5, micro_batch=2).load_state_dict(state)
    assert exit_code_for(excinfo.value) == BAD_CONFIG and "micro_batch 3 (now 2)" in str(excinfo.value)
    with pytest.raises(DataError) as excinfo:
        _stream(data_dir, seed=5, mix={"sft": 2, "replay": 1}).load_state_dict(state)
    assert exit_code_for(excinfo.value) == BAD_CONFIG and "mix" in str(excinfo.value)
    assert "micro_batch" not in str(excinfo.value) and "\n" not in str(excinfo.value)


def test_state_of_other_data_is_refused(built, tmp_path):
    data_dir, tok, _ = built
    root = data_dir.parent
    # the same channels and tokenizer, one replay document more: cursors would point elsewhere
    (tmp_path / "en.txt").write_text((root / "en.txt").read_text(encoding="utf-8") + "\nthe armadillo sleeps\n",
                                     encoding="utf-8")
    spec = BuildSpec(tokenizer="", out_dir=str(tmp_path / "data"), text={"replay": [str(tmp_path / "en.txt")]},
                     sft={"sft": [str(root / "sft.jsonl")]}, seq_len=SEQ_LEN)
    build_data(spec, tok, progress=False)
    state = _stream(data_dir, seed=5).state_dict()
    with pytest.raises(DataError) as excinfo:
        _stream(tmp_path / "data", seed=5).load_state_dict(state)
    assert exit_code_for(excinfo.value) == BAD_CONFIG and "build_key" in str(excinfo.value)


@pytest.mark.parametrize("damage", ["no_step", "no_channels", "no_build_key", "channel_without_cursor",
                                    "channel_missing", "step_not_int"])
def test_malformed_state_is_bad_data_not_a_key_error(built, damage):
    data_dir, _, _ = built
    state = json.loads(json.dumps(_stream(data_dir, seed=5).state_dict()))
    if damage == "no_step":
        del state["step"]
    elif damage == "no_channels":
        del state["channels"]
    elif damage == "no_build_key":
        del state["build_key"]
    elif damage == "channel_without_cursor":
        del state["channels"]["sft"]["cursor"]
    elif damage == "channel_missing":
        del state["channels"]["replay"]
    else:
        state["step"] = "7"
    with pytest.raises(DataError) as excinfo:
        _stream(data_dir, seed=5).load_state_dict(state)
    assert exit_code_for(excinfo.value) == BAD_DATA and str(excinfo.value).startswith("stream state")
