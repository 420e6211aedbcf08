"""REPLAY_SOURCES through the daemon: the run reads its replay from the sources it names, says so
at its start, in every step event and in `tatu status`; a source the data lacks is a 78 naming the
nearest channel before the run leaves a trace. (Exact resume after kill -9 with sources:
tests/daemon/test_daemon.py's test_sigkill_at_random_moments_then_resume_is_bit_identical[sources].)"""
from __future__ import annotations

from tiny_world import sft_env

from tatu.daemon.logs import read_events
from tatu.daemon.main import main as daemon_main
from tatu.exitcodes import BAD_CONFIG


def test_a_run_draws_its_replay_from_its_sources_and_says_so(tiny_trunk, tmp_path, monkeypatch):
    from tatu.daemon.supervisor import Supervisor
    from tatu.ops.status import format_status

    supervisors = []
    original = Supervisor.tick
    monkeypatch.setattr(Supervisor, "tick", lambda self, stats: (supervisors.append(self), original(self, stats))[1])
    # REPLAY_N=1 and a third / two thirds: steps 1..6 read pretrain, replay, pretrain, pretrain, replay, pretrain
    assert daemon_main(sft_env(tiny_trunk, tmp_path, REPLAY_SOURCES="replay:1/3,pretrain:2/3")) == 0
    run_dir = tmp_path / "run"
    log = (run_dir / "run.log").read_text()
    assert "replay from replay 33.33%, pretrain 66.67% of its micro-batches" in log
    steps = [e for e in read_events(run_dir / "events.jsonl") if e["event"] == "step"]
    read = [[source for source, tokens in e["replay_tokens"].items() if tokens] for e in steps]
    assert read == [["pretrain"], ["replay"], ["pretrain"], ["pretrain"], ["replay"], ["pretrain"]]
    for e in steps:  # one micro-batch a step: its tokens are the step's replay tokens, every source listed
        assert set(e["replay_tokens"]) == {"replay", "pretrain"}
        assert sum(e["replay_tokens"].values()) == e["tokens"]["replay"] > 0
    shown = format_status(dict(supervisors[-1]._snapshot.progress))  # what `tatu status` prints
    assert "replay  replay 1/3 drew 2 (33.3%)  pretrain 2/3 drew 4 (66.7%) micro-batches" in shown.splitlines()
    # and once no daemon answers, from the run's directory
    from tatu.daemon.run.view import read_run
    from tatu.ops.status_files import describe

    said = describe(read_run(run_dir), tmp_path)
    assert "replay  replay 33.33%, pretrain 66.67% of the replay micro-batches (REPLAY_SOURCES)" in said


def test_a_run_without_sources_writes_the_events_it_always_wrote(tiny_trunk, tmp_path):
    assert daemon_main(sft_env(tiny_trunk, tmp_path, MIX_STEPS_LIMIT=2, EVAL_EVERY=2)) == 0
    steps = [e for e in read_events(tmp_path / "run" / "events.jsonl") if e["event"] == "step"]
    assert steps and all("replay_tokens" not in e and set(e["tokens"]) == {"sft", "replay"} for e in steps)


def test_a_source_the_data_lacks_exits_78_naming_the_nearest_channel(tiny_trunk, tmp_path, capsys):
    code = daemon_main(sft_env(tiny_trunk, tmp_path / "out", REPLAY_SOURCES="replay:0.5,pretrian:0.5"))
    said = capsys.readouterr()
    assert code == BAD_CONFIG
    assert "replay source 'pretrian' is not a channel of the data (did you mean pretrain?)" in said.out + said.err
    assert not (tmp_path / "out" / "run").exists()
