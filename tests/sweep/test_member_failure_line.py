"""A member that ends before its first step is named with its reason and its log: the daemon's
refusal is a line in tatu's voice ("tatu: TATU_DATA=...: no such data directory"), with no
"error" in it, which the coordinator once missed ("see its log", no path, no reason)."""
from __future__ import annotations

from pathlib import Path

from tatu.sweep.plan.member import Member
from tatu.sweep.run.backends import ForegroundBackend, SystemdBackend, _pick_error


def test_the_daemons_refusal_is_the_reason_found_in_its_output():
    lines = ["  TATU_DATA              = /srv/nodata            [env]",
             "tatu: TATU_DATA=/srv/nodata [env]: no such data directory (no directory /srv/nodata; `tatu data build` writes one)"]
    assert _pick_error(lines) == ("TATU_DATA=/srv/nodata [env]: no such data directory (no directory /srv/nodata; "
                                  "`tatu data build` writes one)")
    # as journald keeps it (the daemon's priority prefix), and in a command's voice
    assert _pick_error(["<3>tatu run: r5.env:3: MIX_STEPS_LIMIT=ten: not a whole number"]) == \
        "r5.env:3: MIX_STEPS_LIMIT=ten: not a whole number"
    # the run's own progress lines are not reasons
    assert _pick_error(["tatu run x.y (sft) -> runs/x.y  config 0123"]) == ""


def test_each_backend_names_where_a_members_log_is(tmp_path):
    member = Member("replay-n6-s1", "dose.replay-n6-s1", "compare", "replay-n6", {}, 1, {"TATU_OUT": str(tmp_path)})
    assert ForegroundBackend(tmp_path).log_of(member) == str(tmp_path / "logs" / "replay-n6-s1.out")
    assert SystemdBackend().log_of(member) == "journalctl --user -t tatu-sft-dose.replay-n6-s1"
