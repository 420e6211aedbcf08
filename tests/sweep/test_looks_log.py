"""The looks log (sweep/judge/looks_log.py): appended lines read back as logged, a torn last line
dropped, and a corrupted decision refused against the recomputation (65, naming the line)."""
from __future__ import annotations

import json

import pytest

from tatu.evals.seeds.power import CrossedParts
from tatu.evals.seeds.sequential import Design, Estimate, look
from tatu.exitcodes import BAD_DATA
from tatu.sweep.errors import SweepError
from tatu.sweep.judge import looks_log as log

DESIGN = Design("obf", 3, 6)
PARTS = CrossedParts(seed=0.7, interaction=0.3, lines=0.01, n_lines=100)


def _looks(sweep: str):
    out = []
    for n, mean in ((3, -1.5), (4, -1.4), (5, -1.6)):
        out.append(log.LoggedLook("replay-n6", "drift_hi < MIX_FORGET_LIMIT", tuple(f"{sweep}.replay-n6-s{s}" for s in range(1, n + 1)),
                                  (24,) * n, look(DESIGN, Estimate(n, mean, PARTS), 0.0)))
    return out


def test_appended_looks_read_back_and_agree(tmp_path):
    looks = _looks(tmp_path.name)
    for entry in looks:
        log.append(tmp_path, entry)
    assert log.read(tmp_path) == looks
    log.check_agrees(tmp_path / log.FILE, log.read(tmp_path), looks)


def test_a_torn_last_line_is_dropped(tmp_path):
    looks = _looks(tmp_path.name)
    for entry in looks:
        log.append(tmp_path, entry)
    with open(tmp_path / log.FILE, "a") as f:
        f.write('{"version": 1, "config": "replay')  # killed mid-write: never acted on
    assert log.read(tmp_path) == looks
    # the coordinator started again logs its look anew: the torn tail is cut, not glued to
    log.append(tmp_path, looks[0])
    assert log.read(tmp_path) == looks + [looks[0]]
    (tmp_path / log.FILE).write_text('{"version": 1, "con')  # torn before any newline: nothing was logged
    log.append(tmp_path, looks[1])
    assert log.read(tmp_path) == [looks[1]]


def test_a_corrupted_decision_is_refused(tmp_path):
    looks = _looks(tmp_path.name)
    for entry in looks:
        log.append(tmp_path, entry)
    path = tmp_path / log.FILE
    lines = path.read_text().splitlines()
    doc = json.loads(lines[1])
    assert doc["look"]["decision"] == "continue"
    doc["look"]["decision"] = "pass"
    lines[1] = json.dumps(doc)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SweepError) as err:
        log.check_agrees(path, log.read(tmp_path), looks)
    assert err.value.code == BAD_DATA
    assert f"{path}:2: replay-n6 drift_hi < MIX_FORGET_LIMIT at 4 seeds disagrees" in str(err.value)
    assert "decision 'pass' (recomputed 'continue')" in str(err.value)


def test_a_log_from_before_members_were_named_by_their_folders_reads_as_the_same_members(tmp_path):
    """Up to issue 44 the log named a member `replay-n6-s1`; the files name it by its run's folder,
    `SWEEP.replay-n6-s1`: an old sweep's log still agrees with its run dirs."""
    looks = _looks(tmp_path.name)
    with open(tmp_path / log.FILE, "w") as f:
        for entry in looks:
            doc = entry.to_json()
            doc["members"] = [m.removeprefix(tmp_path.name + ".") for m in doc["members"]]
            f.write(json.dumps(doc, sort_keys=True) + "\n")
    assert "replay-n6-s1" in (tmp_path / log.FILE).read_text() and tmp_path.name + "." not in (tmp_path / log.FILE).read_text()
    assert log.read(tmp_path) == looks
    log.check_agrees(tmp_path / log.FILE, log.read(tmp_path), looks)
