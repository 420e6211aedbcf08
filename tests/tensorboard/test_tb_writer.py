"""tatu/tensorboard/writer.py read back with TensorBoard's EventAccumulator: float64 values to the
bit, each (tag, step) once across writers, a torn record rewritten, a failure one warning."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tb_reader import read_back, require_tensorboard

from tatu.tensorboard.tags import Scalar
from tatu.tensorboard.writer import EVENT_FILES, TensorBoardWriter, last_steps


@pytest.fixture(autouse=True)
def _tensorboard():
    require_tensorboard()


def step(n: int, loss: float) -> dict:
    return {"event": "step", "time": 1.7e9 + n, "step": n, "loss": loss, "lr": 1e-3 / n, "grad_norm": 0.1 * n,
            "tokens_per_s": 1000.0 + n, "replay_fraction": 0.25}


def write(log_dir: Path, records: list[dict]) -> list[str]:
    warnings: list[str] = []
    writer = TensorBoardWriter(log_dir, warnings.append)
    writer.catch_up(records)
    writer.close()
    return warnings


def test_values_read_back_to_the_last_bit_at_their_steps_with_their_wall_times(tmp_path):
    loss = 2.718281828459045 + 1e-15  # float32 would keep about 7 of these digits
    assert write(tmp_path, [step(1, loss), step(2, 1 / 3)]) == []
    back = read_back(tmp_path)
    assert back.scalars["train/loss"] == [(1, loss), (2, 1 / 3)]
    assert back.scalars["train/lr"] == [(1, 1e-3), (2, 1e-3 / 2)]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path), size_guidance={"tensors": 0})
    acc.Reload()
    assert [e.wall_time for e in acc.Tensors("train/loss")] == [1.7e9 + 1, 1.7e9 + 2]  # the record's own time


def test_each_tag_and_step_is_written_once_across_writers_and_a_writer_with_nothing_new_adds_no_file(tmp_path):
    first = [step(n, 1.0 + n) for n in (1, 2, 3)]
    write(tmp_path, first)
    # A restart redoes steps 2 and 3 (another loss at step 3: the first copy stays) and goes on to 5.
    write(tmp_path, first + [step(2, 3.0), step(3, 99.0), step(4, 5.0), step(5, 6.0)])
    assert read_back(tmp_path).scalars["train/loss"] == [(1, 2.0), (2, 3.0), (3, 4.0), (4, 5.0), (5, 6.0)]
    files = sorted(tmp_path.glob(EVENT_FILES))
    assert len(files) == 2
    write(tmp_path, first)  # everything is there already
    assert sorted(tmp_path.glob(EVENT_FILES)) == files
    assert last_steps(tmp_path)["train/loss"] == 5


def test_a_restart_within_the_same_second_from_a_smaller_pid_reads_back_after_the_killed_run(tmp_path, monkeypatch):
    """TensorBoard reads a dir's event files in the order of their names. A killed daemon (a child,
    a large pid) and its restart (here: a smaller pid) can open their files within one second: the
    restart's points must still read back after the first run's."""
    import tatu.tensorboard.writer as writer_module

    monkeypatch.setattr(writer_module.time, "time", lambda: 1.7e9)
    monkeypatch.setattr(writer_module.os, "getpid", lambda: 99999)
    write(tmp_path, [step(1, 2.0), step(2, 3.0)])
    monkeypatch.setattr(writer_module.os, "getpid", lambda: 11111)
    write(tmp_path, [step(1, 2.0), step(2, 3.0), step(3, 4.0), step(4, 5.0)])
    assert [s for s, _ in read_back(tmp_path).scalars["train/loss"]] == [1, 2, 3, 4]


def test_a_torn_last_record_is_written_again(tmp_path):
    write(tmp_path, [step(n, float(n)) for n in (1, 2, 3)])
    (events,) = tmp_path.glob(EVENT_FILES)
    with open(events, "r+b") as f:  # a kill mid-write: step 3's last record (its replay share) half on disk
        f.truncate(os.path.getsize(events) - 5)
    assert last_steps(tmp_path)["train/replay_fraction"] == 2 and last_steps(tmp_path)["train/loss"] == 3
    write(tmp_path, [step(n, float(n)) for n in (1, 2, 3, 4)])
    back = read_back(tmp_path)
    assert back.scalars["train/replay_fraction"] == [(n, 0.25) for n in (1, 2, 3, 4)]
    assert back.scalars["train/loss"] == [(n, float(n)) for n in (1, 2, 3, 4)]


def test_an_unwritable_dir_is_one_warning_naming_it_and_never_an_exception(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a dir")  # under a regular file nothing can be created, even by root
    warnings = write(blocker / "tb", [step(1, 1.0), step(2, 2.0)])
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"TensorBoard: cannot write {blocker / 'tb'}: ") and "Not a directory" in warnings[0]
    assert blocker.read_text() == "not a dir"


def test_a_session_holds_its_hparams_and_its_metrics(tmp_path):
    writer = TensorBoardWriter(tmp_path, pytest.fail)
    metrics = [Scalar("drift/value", 4, 0.031), Scalar("change/sftHeld/hi", 4, -0.05)]
    writer.session({"REPLAY_N": 6.0, "CONFIG": "replay", "verdict": "holds"}, metrics)
    writer.close()
    back = read_back(tmp_path)
    assert back.hparams == {"REPLAY_N": 6.0, "CONFIG": "replay", "verdict": "holds"} and back.session_ended
    assert back.scalars == {"drift/value": [(4, 0.031)], "change/sftHeld/hi": [(4, -0.05)]}
