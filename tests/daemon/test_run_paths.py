"""RunDir and SweepDir: the one place a run dir's and a sweep dir's file names live, and the events reader."""
import json

from tatu.daemon.run.paths import RunDir, SweepDir, event_kind


def test_every_file_of_a_run_has_its_name(tmp_path):
    run = RunDir(tmp_path / "runs" / "run5")
    names = {"log_file": "run.log", "events_file": "events.jsonl", "verdict_file": "verdict.json", "state": "state",
             "best": "best", "final": "final", "evals_dir": "evals", "tb": "tb", "report": "report",
             "fisher_file": "fisher.safetensors"}
    assert {attr: getattr(run, attr).relative_to(run.path).as_posix() for attr in names} == names
    assert run.eval_lines(8) == run.path / "evals" / "step-000008.json"
    assert run.env_file == tmp_path / "runs" / "run5.env"  # beside the run dir, not in it


def test_every_file_of_a_sweep_has_its_name(tmp_path):
    sweep = SweepDir(tmp_path / "sweeps" / "s")
    names = {"lock_file": "plan.lock.json", "runs": "runs", "env_dir": "env", "looks_file": "looks.jsonl",
             "scores": "scores", "report": "report"}
    assert {attr: getattr(sweep, attr).relative_to(sweep.path).as_posix() for attr in names} == names
    assert sweep.env_file("s.a-s1") == sweep.path / "env" / "s.a-s1.env"


def test_a_run_dir_is_a_members_only_in_runs_beside_a_lock(tmp_path):
    sweep = SweepDir(tmp_path / "s")
    member = sweep.runs / "s.a-s1"
    member.mkdir(parents=True)
    assert SweepDir.of_member(member) is None  # no lock yet: not a sweep
    sweep.lock_file.write_text("{}")
    assert SweepDir.of_member(member) == sweep
    other = sweep.path / "elsewhere" / "s.a-s1"  # beside the lock, but not under runs/
    other.mkdir(parents=True)
    assert SweepDir.of_member(other) is None
    (tmp_path / "link").symlink_to(member)  # a link to a member is that member
    assert SweepDir.of_member(tmp_path / "link") == sweep


def test_a_resume_state_is_found_mid_swap(tmp_path):
    run = RunDir(str(tmp_path))  # a str is taken as a Path
    assert not run.has_resume()
    (tmp_path / "state.old").mkdir()
    assert run.has_resume()


def test_events_filtered_by_kind_in_order_a_torn_line_ignored(tmp_path):
    run = RunDir(tmp_path)
    assert run.events() == [] and run.events("eval") == []  # before the run wrote any
    lines = [{"event": "step", "step": 1}, {"event": "eval", "step": 1}, [1, 2], {"event": "eval", "step": 2}]
    run.events_file.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"event": "st', encoding="utf-8")
    assert run.events() == lines
    assert [e["step"] for e in run.events("eval")] == [1, 2]
    assert run.events("step") == [lines[0]]
    assert event_kind([1, 2]) is None
