"""A directory that is not a checkpoint, given where one goes, is named so: `tatu generate
data/build` once said "manifest.json: missing or invalid ('files')" (a data dir's manifest)."""
from __future__ import annotations

import json

import pytest

from tatu.data.manifest import FORMAT as DATA_FORMAT
from tatu.exitcodes import BAD_DATA
from tatu.ops.cli import main as tatu


@pytest.mark.parametrize("holds", ["a data manifest", "nothing"])
def test_generate_on_a_directory_that_is_not_a_checkpoint_says_so(tmp_path, capsys, holds):
    given = tmp_path / "build"
    given.mkdir()
    if holds == "a data manifest":
        (given / "manifest.json").write_text(json.dumps({"format": DATA_FORMAT, "channels": {}}))
    assert tatu(["generate", str(given), "--prompt", "Olá"]) == BAD_DATA
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"tatu generate: {given}: not a checkpoint ("), lines
    assert "a run's final/ or best/ directory is one" in lines[0]
    if holds == "a data manifest":
        assert f"'{DATA_FORMAT}'" in lines[0]
