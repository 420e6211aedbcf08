"""tatu/ core: the one atomic write (its private mode, its cleanup), env files both ways, and
the sweep's number formats, each against literals written from their documented form
(tatu/formats.py's docstrings: 0.012 -> "+1.2%" / "1.2%", p three decimals and "<0.001" below,
"n/a" when unknown) and the README's exit-code table (78: bad configuration)."""
import json
import math
import os
import stat

import pytest

from tatu.atomic import write_atomic, write_json_atomic
from tatu.envfile import EnvFileError, env_file_text, env_value, parse_env_file
from tatu.formats import fmt_ci, fmt_interval, fmt_p_formula, fmt_pct, fmt_share


def test_write_atomic_private_mode_and_sorted_json(tmp_path):
    target = tmp_path / "member.env"
    write_atomic(target, "A=1\n", mode=0o600)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600 and target.read_text() == "A=1\n"
    doc = {"b": [1, 2], "a": {"z": 1, "y": None}}
    write_json_atomic(tmp_path / "lock.json", doc, sort_keys=True)
    assert (tmp_path / "lock.json").read_text() == json.dumps(doc, indent=1, sort_keys=True) + "\n"


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path, monkeypatch):
    target = tmp_path / "lock.json"
    target.write_text("old\n")

    def refuse(*_):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError):
        write_json_atomic(target, {"new": True})
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["lock.json"]


def test_env_file_round_trip_and_a_bad_line_names_file_and_line(tmp_path):
    env = {"TATU_RUN": "run5", "TATU_OUT": "/srv/runs", "SFT_GE": "4"}
    path = tmp_path / "run5.env"
    path.write_text("# a comment\n" + env_file_text(env) + "QUOTED='a b'\n")
    assert parse_env_file(path) == {**env, "QUOTED": "a b"}
    path.write_text("TATU_RUN=x\nnot a line\n")
    with pytest.raises(EnvFileError) as info:  # a library error, not the CLI's TatuExit
        parse_env_file(path)
    assert info.value.code == 78  # EX_CONFIG: README.md#exit-codes, bad configuration
    assert str(info.value) == f"{path}:2: expected KEY=VALUE"


@pytest.mark.parametrize("value, written", [
    (0.003 / 10, "0.0003"), (0.1 + 0.2, "0.3"), (3e-5, "3e-05"), (1e-3, "0.001"), (2.0, "2.0"), (1 / 3, "0.333333333333333"),
    (12345.678, "12345.678"), (-0.07 * 3, "-0.21"), (6, "6"), ("runs/x", "runs/x"),
])
def test_env_files_write_numbers_as_a_person_would(value, written):
    assert env_value(value) == written
    assert env_file_text({"TATU_MIN_LR": value}) == f"TATU_MIN_LR={written}\n"


@pytest.mark.parametrize("value", [0.003 / 10, 1 / 3, 2 ** 0.5, 1e-300, 6.02214076e23, 0.1 + 0.2, 123456789.123456789])
def test_a_written_float_is_within_its_15th_digit_of_the_value(value):
    """Against a naive bound: 15 significant digits are within half a unit of the 15th digit."""
    written = env_value(value)
    digits = written.lower().split("e")[0].replace("-", "").replace(".", "").lstrip("0")
    assert len(digits) <= 15
    assert abs(float(written) - value) <= 0.5 * 10 ** (math.floor(math.log10(abs(value))) - 14)


@pytest.mark.parametrize("x, pct, share, p, p_text", [
    (0.0, "+0.0%", "0.0%", 0.0, "<0.001"),
    (0.012, "+1.2%", "1.2%", 0.012, "0.012"),
    (0.0123, "+1.2%", "1.2%", 0.0123, "0.012"),
    (-0.456, "-45.6%", "45.6%", 0.456, "0.456"),
    (1.5, "+150.0%", "150.0%", 0.5, "0.500"),
    (-0.0875, "-8.8%", "8.8%", 0.001, "0.001"),
    (1e-9, "+0.0%", "0.0%", 0.000999, "<0.001"),
    (2, "+200.0%", "200.0%", 1, "1.000"),
])
def test_sweep_number_formats_are_the_documented_strings(x, pct, share, p, p_text):
    assert fmt_pct(x) == pct
    assert fmt_share(abs(x)) == share
    assert fmt_p_formula(p) == p_text


@pytest.mark.parametrize("unknown", [None, float("nan"), float("inf"), float("-inf"), "0.1", True])
def test_an_unknown_number_is_n_a(unknown):
    assert fmt_pct(unknown) == fmt_share(unknown) == fmt_p_formula(unknown) == "n/a"


def test_every_interval_is_one_spelling():
    """fmt_ci's documented "+8.1% [+7.1%,+9.3%]"; fmt_interval the same brackets for an interval
    alone (the EVAL line's drift_ci=) or of a number that is not a relative change."""
    assert fmt_ci(0.081, 0.071, 0.093) == "+8.1% [+7.1%,+9.3%]"
    assert fmt_ci(None, None, None) == "n/a [n/a,n/a]"
    assert fmt_interval(-0.003, 0.027) == "[-0.3%,+2.7%]"
    assert fmt_interval(9.01, 9.13, "{:.4f}".format) == "[9.0100,9.1300]"
