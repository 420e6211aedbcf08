"""Replay sources (tatu.data.replay, REPLAY_SOURCES): the replay micro-batches of a run come from
several text channels by their shares, each source's lines from its own channel, and a resumed
stream draws each source's own next lines."""
import json
from fractions import Fraction

import numpy as np
import pytest

from test_stream import SEQ_LEN, _fingerprint, built  # noqa: F401 -- the module's data dir fixture

from tatu.daemon.main import exit_code_for
from tatu.data.manifest import DataError
from tatu.data.replay import ReplaySources
from tatu.data.stream import MixedStream
from tatu.exitcodes import BAD_CONFIG

MICRO = 3


def _stream(data_dir, sources: str | None, replay_n: int = 3, seed: int = 4) -> MixedStream:
    return MixedStream(data_dir, mix={"sft": 1, "replay": replay_n}, micro_batch=MICRO, seq_len=SEQ_LEN, seed=seed,
                       replay_sources=None if sources is None else ReplaySources.parse(sources))


def _windows(data_dir, channel: str) -> set[bytes]:
    """Every input row a text channel can give (window[:-1] at a stride of seq_len), read from its shard."""
    shard = np.fromfile(data_dir / channel / "tokens.bin", dtype=np.uint16).astype(np.int64)
    n = (len(shard) - 1) // SEQ_LEN
    return {shard[i * SEQ_LEN:i * SEQ_LEN + SEQ_LEN].tobytes() for i in range(n)}


def _source_of(mb, windows: dict[str, set[bytes]]) -> str:
    """The channel whose shard holds every row of a replay micro-batch, found from the tokens alone."""
    owners = [name for name, rows in windows.items() if all(row.tobytes() in rows for row in mb.x)]
    assert len(owners) == 1, owners
    return owners[0]


@pytest.mark.parametrize("sources,replay_n", [("replay:1/4,pretrain:3/4", 3), ("pretrain:0.5,replay:0.5", 1),
                                              ("replay:0.2,pretrain:0.8", 2)])
def test_a_naive_count_of_drawn_lines_per_source_follows_the_shares_at_every_step(built, sources, replay_n):
    data_dir, _, _ = built
    windows = {name: _windows(data_dir, name) for name in ("replay", "pretrain")}
    assert not windows["replay"] & windows["pretrain"]  # the two sources' lines are told apart by their tokens
    shares = {name: Fraction(share) for name, share in (part.split(":") for part in sources.split(","))}
    stream = _stream(data_dir, sources, replay_n)
    counted = {name: 0 for name in shares}
    for step_index in range(40):
        step = stream.next_step()
        tokens = {name: 0 for name in shares}
        for mb in step.micro_batches:
            if mb.channel != "replay":
                continue
            owner = _source_of(mb, windows)
            counted[owner] += 1
            tokens[owner] += mb.n_targets
        drawn = (step_index + 1) * replay_n
        for name, share in shares.items():  # within one micro-batch of its share, at every step
            assert abs(counted[name] - share * drawn) < 1, (step_index, counted)
        assert step.replay_tokens == tokens and sum(tokens.values()) == step.target_tokens["replay"]
        assert step.replay_drawn == counted
    assert sum(counted.values()) == 40 * replay_n


def test_each_micro_batch_says_the_source_its_lines_come_from(built):
    data_dir, _, _ = built
    windows = {name: _windows(data_dir, name) for name in ("replay", "pretrain")}
    stream = _stream(data_dir, "replay:0.5,pretrain:0.5", 2)
    replay = [mb for _ in range(10) for mb in stream.next_step().micro_batches if mb.channel == "replay"]
    assert [mb.source for mb in replay] == [_source_of(mb, windows) for mb in replay]
    assert {mb.source for mb in replay} == {"replay", "pretrain"}


@pytest.mark.parametrize("k", [1, 5, 11])
def test_a_resumed_stream_draws_each_source_its_own_next_lines(built, k):
    """k steps, the state through JSON, a new stream: the next steps are the uninterrupted ones, each
    replay micro-batch from its own source's next windows (a position restored into another source's
    channel, or a schedule that forgets what was drawn, gives other lines)."""
    data_dir, _, _ = built
    windows = {name: _windows(data_dir, name) for name in ("replay", "pretrain")}
    sources = "replay:1/3,pretrain:2/3"
    original = _stream(data_dir, sources, 2, seed=9)
    for _ in range(k):
        original.next_step()
    state = json.loads(json.dumps(original.state_dict()))
    assert state["replay_sources"] == [["replay", "1/3"], ["pretrain", "2/3"]]
    assert set(state["channels"]) == {"sft", "replay", "pretrain"}
    expected = [original.next_step() for _ in range(30)]
    restored = _stream(data_dir, sources, 2, seed=9)
    restored.load_state_dict(state)
    got = [restored.next_step() for _ in range(30)]
    assert [[(mb.source, mb.x.tobytes()) for mb in s.micro_batches] for s in got] == \
           [[(mb.source, mb.x.tobytes()) for mb in s.micro_batches] for s in expected]
    for step in got:
        for mb in step.micro_batches:
            if mb.channel == "replay":
                assert _source_of(mb, windows) == mb.source


@pytest.mark.parametrize("other", ["pretrain:2/3,replay:1/3", "replay:0.5,pretrain:0.5", None])
def test_a_state_of_other_sources_is_refused_naming_them(built, other):
    """The order breaks ties, the shares make the schedule: a state continues only the same sources (78)."""
    data_dir, _, _ = built
    state = _stream(data_dir, "replay:1/3,pretrain:2/3").state_dict()
    with pytest.raises(DataError) as excinfo:
        _stream(data_dir, other).load_state_dict(state)
    assert exit_code_for(excinfo.value) == BAD_CONFIG and "replay_sources" in str(excinfo.value)
    if other is None:  # and the other way round: a state saved without sources
        with pytest.raises(DataError) as excinfo:
            _stream(data_dir, "replay:1/3,pretrain:2/3").load_state_dict(_stream(data_dir, None).state_dict())
        assert exit_code_for(excinfo.value) == BAD_CONFIG and "replay_sources" in str(excinfo.value)


def test_one_source_named_replay_draws_what_a_run_without_sources_draws(built):
    data_dir, _, _ = built
    plain, named = _stream(data_dir, None), _stream(data_dir, "replay")
    assert [_fingerprint(plain.next_step()) for _ in range(12)] == [_fingerprint(named.next_step()) for _ in range(12)]
    assert "replay_sources" not in plain.state_dict() and plain.next_step().replay_tokens == {}


@pytest.mark.parametrize("sources,says", [("replya:0.5,pretrain:0.5", "did you mean replay?"),
                                          ("replay:0.5,sft:0.5", "'sft' is a sft channel, not text")])
def test_a_source_the_data_lacks_or_that_is_not_text_is_refused_with_the_nearest_name(built, sources, says):
    data_dir, _, _ = built
    with pytest.raises(DataError) as excinfo:
        _stream(data_dir, sources)
    assert exit_code_for(excinfo.value) == BAD_CONFIG and says in str(excinfo.value)
    assert "\n" not in str(excinfo.value)


@pytest.mark.parametrize("text,says", [("replay:0.5,pretrain:0.4", "sum to 0.9, not 1"), ("replay:0", "above 0"),
                                       ("replay:half", "not a number"), ("replay:0.5,replay:0.5", "named twice"),
                                       ("replay:0.5,", "not NAME:SHARE")])
def test_malformed_sources_say_what_is_wrong(text, says):
    with pytest.raises(ValueError, match=says):
        ReplaySources.parse(text)
