"""The one table from each layer's exception to an exit code (daemon/main.py:exit_codes()), and a
bug left a crash (1, restarted), never bad data.

The expected codes are the contract as documented, written here as literals, never read from
tatu/exitcodes.py: the README's exit-code table (README.md#exit-codes), docs/architecture.md's
exception table, and sysexits.h's meanings (Python's os.EX_* carry them: 65 EX_DATAERR,
74 EX_IOERR, 75 EX_TEMPFAIL, 78 EX_CONFIG). A test below checks both documents say the same.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tatu import exitcodes
from tatu.daemon.actions import NonFiniteError
from tatu.daemon.config import ConfigError
from tatu.daemon.main import exit_code_for
from tatu.daemon.main import main as daemon_main
from tatu.daemon.run.lock import RunDirBusy
from tatu.data.manifest import DataConfigError, DataError, check_tokenizer
from tatu.evals.sets import EvalSetError
from tatu.model.checkpoint import CheckpointError, NonFiniteTensorError
from tatu.storage import StorageError

REPO = Path(__file__).resolve().parents[2]

# sysexits.h, as documented (and as the C library's header numbers them).
EX_DATAERR, EX_IOERR, EX_TEMPFAIL, EX_CONFIG = 65, 74, 75, 78
FORGET_ABORT, NONFINITE = 10, 11  # tatu's own (the README's table)
CRASH = 1  # "other: a crash (1: its traceback is logged ...)": restarted
# docs/architecture.md: "Errors: each layer raises its own exception, and exit_codes() maps them".
DOCUMENTED = {"ConfigError": EX_CONFIG, "DataConfigError": EX_CONFIG, "DataError": EX_DATAERR,
              "NonFiniteError": NONFINITE, "NonFiniteTensorError": NONFINITE, "CheckpointError": EX_DATAERR,
              "StorageError": EX_IOERR, "RunDirBusy": EX_TEMPFAIL}
NOT_RESTARTED = {FORGET_ABORT, NONFINITE, EX_DATAERR, EX_IOERR, EX_TEMPFAIL, EX_CONFIG}


def test_the_literals_are_sysexits_meanings():
    assert (os.EX_DATAERR, os.EX_IOERR, os.EX_TEMPFAIL, os.EX_CONFIG) == (EX_DATAERR, EX_IOERR, EX_TEMPFAIL, EX_CONFIG)


def test_the_readme_and_the_architecture_tables_state_these_codes():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Exit codes"):]
    section = section[:section.index("\n## ", 3)]
    rows = {int(m[1]): m[2].strip() for m in re.finditer(r"^\| (\d+) \|.*\| ([^|]+) \|$", section, re.M)}
    assert {code for code, restarted in rows.items() if restarted == "no" and code != 0} == NOT_RESTARTED, rows
    assert f"RestartPreventExitStatus={' '.join(map(str, sorted(NOT_RESTARTED)))}" in section
    architecture = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = dict(re.findall(r"^\| `(\w+)` \| .* \| (\d+) \|$", architecture, re.M))
    assert {name: int(code) for name, code in table.items()} == DOCUMENTED


def test_the_named_codes_are_the_documented_numbers():
    assert (exitcodes.OK, exitcodes.CRASH, exitcodes.FORGET_ABORT, exitcodes.NONFINITE_LOSS) == (0, CRASH, 10, 11)
    assert (exitcodes.BAD_DATA, exitcodes.IO_ERROR, exitcodes.RUN_DIR_BUSY, exitcodes.BAD_CONFIG) == (65, 74, 75, 78)
    assert set(exitcodes.NOT_RESTARTED) == NOT_RESTARTED
    unit = (REPO / "units" / "tatu-sft@.service").read_text(encoding="utf-8")
    (line,) = [l for l in unit.splitlines() if l.startswith("RestartPreventExitStatus=")]
    assert set(map(int, line.partition("=")[2].split())) == NOT_RESTARTED


@pytest.mark.parametrize("error, code", [
    (ConfigError("x"), 78), (DataConfigError("x"), 78),
    (DataError("x"), 65), (EvalSetError("x"), 65),
    (CheckpointError("x"), 65), (NonFiniteError("x"), 11),
    (NonFiniteTensorError("x"), 11), (StorageError("x"), 74),
    (RunDirBusy("x"), 75),
    (ValueError("x"), None), (KeyError("x"), None), (OSError("x"), None),
])
def test_one_table_maps_each_layers_failure_and_leaves_bugs_alone(error, code):
    assert exit_code_for(error) == code


def test_a_bug_in_the_loop_is_a_crash_not_bad_data(monkeypatch, tmp_path, capsys):
    def buggy_run(*_, **__):
        raise KeyError("a bug")

    monkeypatch.setattr("tatu.daemon.loop.run", buggy_run)
    code = daemon_main({"TATU_DATA": str(tmp_path), "TATU_MODE": "pretrain", "TATU_OUT": str(tmp_path)})
    assert code == 1  # a crash: restartable, never 65
    assert "ERROR: KeyError: 'a bug'" in capsys.readouterr().out  # the traceback, logged at error priority


def test_a_tokenizer_mismatch_is_one_exit_code_wherever_it_is_found():
    with pytest.raises(DataConfigError, match="tokenizer mismatch") as caught:
        check_tokenizer({"tokenizer_hash": "a" * 64}, "data", "b" * 64)
    assert exit_code_for(caught.value) == 78  # EX_CONFIG, as the README says
    check_tokenizer({"tokenizer_hash": "a" * 64}, "data", "a" * 64)  # the same tokenizer passes
