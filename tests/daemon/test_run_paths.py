"""RunDir: the one place a run dir's file names live, and its events reader."""
import json

from tatu.daemon.run.paths import RunDir, event_kind


def test_every_file_of_a_run_has_its_name(tmp_path):
    run = RunDir(tmp_path / "runs" / "run5")
    names = {"log_file": "run.log", "events_file": "events.jsonl", "verdict_file": "verdict.json", "state": "state",
             "best": "best", "final": "final", "evals_dir": "evals", "tb": "tb", "report": "report",
             "fisher_file": "fisher.safetensors"}
    assert {attr: getattr(run, attr).relative_to(run.path).as_posix() for attr in names} == names
    assert run.eval_lines(8) == run.path / "evals" / "step-000008.json"
    assert run.env_file == tmp_path / "runs" / "run5.env"  # beside the run dir, not in it


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
