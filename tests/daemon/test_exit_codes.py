"""The one table from each layer's exception to an exit code (daemon/main.py:exit_codes()), and a
bug left a crash (1, restarted), never bad data."""
from __future__ import annotations

import pytest

from tatu import exitcodes
from tatu.daemon.actions import NonFiniteError
from tatu.daemon.config import ConfigError
from tatu.daemon.main import exit_code_for
from tatu.daemon.main import main as daemon_main
from tatu.daemon.run_lock import RunDirBusy
from tatu.data.manifest import DataConfigError, DataError, check_tokenizer
from tatu.evals.sets import EvalSetError
from tatu.model.checkpoint import CheckpointError, NonFiniteTensorError
from tatu.storage import StorageError


@pytest.mark.parametrize("error, code", [
    (ConfigError("x"), exitcodes.BAD_CONFIG), (DataConfigError("x"), exitcodes.BAD_CONFIG),
    (DataError("x"), exitcodes.BAD_DATA), (EvalSetError("x"), exitcodes.BAD_DATA),
    (CheckpointError("x"), exitcodes.BAD_DATA), (NonFiniteError("x"), exitcodes.NONFINITE_LOSS),
    (NonFiniteTensorError("x"), exitcodes.NONFINITE_LOSS), (StorageError("x"), exitcodes.IO_ERROR),
    (RunDirBusy("x"), exitcodes.RUN_DIR_BUSY),
    (ValueError("x"), None), (KeyError("x"), None), (OSError("x"), None),
])
def test_one_table_maps_each_layers_failure_and_leaves_bugs_alone(error, code):
    assert exit_code_for(error) == code


def test_a_bug_in_the_loop_is_a_crash_not_bad_data(monkeypatch, tmp_path, capsys):
    def buggy_run(*_, **__):
        raise KeyError("a bug")

    monkeypatch.setattr("tatu.daemon.loop.run", buggy_run)
    code = daemon_main({"TATU_DATA": str(tmp_path), "TATU_MODE": "pretrain", "TATU_OUT": str(tmp_path)})
    assert code == exitcodes.CRASH  # restartable, never 65
    assert "ERROR: KeyError: 'a bug'" in capsys.readouterr().out  # the traceback, logged at error priority


def test_a_tokenizer_mismatch_is_one_exit_code_wherever_it_is_found():
    with pytest.raises(DataConfigError, match="tokenizer mismatch") as caught:
        check_tokenizer({"tokenizer_hash": "a" * 64}, "data", "b" * 64)
    assert exit_code_for(caught.value) == exitcodes.BAD_CONFIG
    check_tokenizer({"tokenizer_hash": "a" * 64}, "data", "a" * 64)  # the same tokenizer passes
