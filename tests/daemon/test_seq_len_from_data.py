"""A run takes its sequence length from the data it reads (`tatu data build --seq-len`, the
manifest's seq_len) unless TATU_SEQ_LEN says otherwise: pairs the build accepted fit the run. A
trunk from scratch gets a block that holds it. A seed whose block is shorter is one line, 78."""
from __future__ import annotations

import json
from pathlib import Path

from tiny_world import daemon, sft_env

from tatu import exitcodes
from tatu.daemon.config import describe
from tatu.daemon.main import configure


def _data(tmp_path: Path, seq_len: int | None) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    (data / "manifest.json").write_text(json.dumps({"format": "tatu-data-1", "options": {"seq_len": seq_len}}))
    return data


def _configure(env: dict):
    return configure([("env", env)], None, False)


def test_a_built_data_dirs_length_is_read(tiny_trunk):
    """The manifest `tatu data build` writes (the tiny world's, built with --seq-len 192)."""
    config, origins = _configure({"TATU_DATA": str(tiny_trunk["data"]), "TATU_SEED_CKPT": str(tiny_trunk["trunk"])})
    assert (config.seq_len, origins["TATU_SEQ_LEN"]) == (192, "data")


def test_an_unset_seq_len_is_the_datas_and_says_so(tmp_path):
    data = _data(tmp_path, 256)
    config, origins = _configure({"TATU_DATA": str(data), "TATU_SEED_CKPT": "seed"})
    assert config.seq_len == 256 and origins["TATU_SEQ_LEN"] == "data"
    assert config.block_size == 128 and origins["TATU_BLOCK_SIZE"] == "default"  # a seed brings its own block
    assert any(line.split()[:3] == ["TATU_SEQ_LEN", "=", "256"] and "[data]" in line for line in describe(config, origins))


def test_a_trunk_from_scratch_gets_a_block_that_holds_the_datas_length(tmp_path):
    data = _data(tmp_path, 256)
    config, origins = _configure({"TATU_DATA": str(data), "TATU_MODE": "pretrain"})
    assert (config.seq_len, config.block_size) == (256, 256)
    assert origins["TATU_BLOCK_SIZE"] == "data"
    # a block set by the operator stays (and the start refuses 256 > 128 with its own line)
    config, _ = _configure({"TATU_DATA": str(data), "TATU_MODE": "pretrain", "TATU_BLOCK_SIZE": "512"})
    assert config.block_size == 512


def test_a_set_seq_len_wins_and_data_without_one_keeps_the_default(tmp_path):
    data = _data(tmp_path, 256)
    config, origins = _configure({"TATU_DATA": str(data), "TATU_SEED_CKPT": "seed", "TATU_SEQ_LEN": "64"})
    assert config.seq_len == 64 and origins["TATU_SEQ_LEN"] == "env"
    (data / "manifest.json").write_text(json.dumps({"format": "tatu-data-1", "options": {"seq_len": None}}))  # text only
    config, origins = _configure({"TATU_DATA": str(data), "TATU_SEED_CKPT": "seed"})
    assert config.seq_len == 128 and origins["TATU_SEQ_LEN"] == "default"


def test_a_seq_len_past_the_seeds_block_is_one_line_naming_both_and_the_fix(tiny_trunk, tmp_path):
    env = sft_env(tiny_trunk, tmp_path / "runs", TATU_SEQ_LEN=256)  # the tiny trunk's block is 192
    proc = daemon(env)
    assert proc.returncode == exitcodes.BAD_CONFIG, proc.stderr[-2000:]
    errors = [line for line in (proc.stdout + proc.stderr).splitlines() if "exceeds" in line]
    assert len(errors) == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "TATU_SEQ_LEN=256 from [env] exceeds the seed's block_size 192: set TATU_SEQ_LEN=192" in errors[0]
