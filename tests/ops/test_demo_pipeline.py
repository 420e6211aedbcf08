"""`make demo`, scaled down to seconds, through the same code path (tatu.ops.demo).

The demo's text comes from Debian packages (ops/packages.py installs them as root). Where they
cannot be installed this skips with the reason — except under CI (CI_STRICT=1, set by
.ci/run, runs as root), where it must run. The run itself is the session fixture `tiny_demo`
(tests/ops/conftest.py).
"""
from __future__ import annotations

import datetime
import html
import json
import math
import re
import subprocess
import sys

import pytest

from demo_world import demo_packages_problem
from sweep_world import assert_every_p_agrees_with_its_ci
from strict import cannot_run
from tb_reader import read_back
from tiny_world import RUN_PREFIXES

from tatu.daemon.logs import read_events
from tatu.data.tags import tagger_versions
from tatu.formats import fmt_p_formula, fmt_pct
from tatu.ops.demo import ENGLISH, NO_REPLAY, PT_EN, RULE, SEEDS, SWEEP

CONFIGS = (NO_REPLAY, ENGLISH, PT_EN)  # the plan's order: no replay (the baseline), English, Portuguese + English


def _members(sweep_dir):
    return {f"{c}-s{s}": sweep_dir / "runs" / f"{SWEEP}.{c}-s{s}" for c in CONFIGS for s in SEEDS}


@pytest.mark.slow
def test_tiny_demo_end_to_end(tiny_demo):
    out, stdout = tiny_demo.out, tiny_demo.stdout
    sweep_dir = out / "sweeps" / SWEEP
    members = _members(sweep_dir)
    assert (out / "runs" / "trunk" / "final").is_dir()
    lock = json.loads((sweep_dir / "plan.lock.json").read_text())
    assert lock["rule"] == RULE and lock["seeds"] == list(SEEDS)
    # the rule was locked before any member ran: the lock is older than every member's first event
    first_events = []
    for name, run_dir in members.items():
        events = read_events(run_dir / "events.jsonl")
        first_events.append(events[0]["time"])
        steps = [e for e in events if e["event"] == "step"]
        assert steps, name
        # one trunk, one seed checkpoint; only the mix differs between the configurations
        if name.startswith(NO_REPLAY):
            assert all(e["replay_fraction"] == 0.0 for e in steps), name
        else:
            assert all(e["replay_fraction"] > 0.0 for e in steps), name
        # the Portuguese + English members draw both sources, the English ones English alone
        drawn = {source for e in steps for source, tokens in (e.get("replay_tokens") or {}).items() if tokens}
        assert drawn == ({"replay", "ptReplay"} if name.startswith(PT_EN) else set()), (name, drawn)
        evals = [e for e in events if e["event"] == "eval"]
        assert evals[0]["drift"]["value"] == 0.0 and evals[-1]["drift_tronco"] is not None, name
    created = datetime.datetime.strptime(lock["created"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    assert created.timestamp() <= min(first_events)

    report = json.loads((sweep_dir / "report" / "report.json").read_text())
    configs = {c["key"]: c for c in report["compare"]["configs"]}
    assert set(configs) == set(CONFIGS)
    lines = stdout.splitlines()
    # the closing table is the sweep's: per configuration, drift and the sftHeld change over seeds x lines
    for key, config in configs.items():
        row = next(line for line in lines if re.match(rf"{key}( \*)?\s+3/3\s", line))
        for metric in ("drift", "sftHeld"):
            st = config["stats"][metric]
            assert f"{fmt_pct(st['value'])} [{fmt_pct(st['lo'])},{fmt_pct(st['hi'])}]" in row, (row, metric)
            assert st["n_seeds"] == len(SEEDS)
    # the difference paired by seed and line, each replaying configuration against no replay
    for key in (ENGLISH, PT_EN):
        paired_row = next(line for line in lines if line.startswith(f"{key} ") and "3/3" not in line)
        for metric in ("drift", "sftHeld"):
            p = configs[key]["paired"][metric]
            assert p["n_seeds"] == len(SEEDS)
            diff = f"{fmt_pct(math.expm1(p['diff']))} [{fmt_pct(math.expm1(p['lo']))},{fmt_pct(math.expm1(p['hi']))}]"
            assert diff in paired_row, (paired_row, diff)
            assert paired_row.split(diff, 1)[1].split()[0] == fmt_p_formula(p['p_value']), (paired_row, p)  # its p, beside its CI
    assert assert_every_p_agrees_with_its_ci(report) >= 2
    verdict_line = next(line for line in lines if line.startswith("VERDICT (locked rule): "))
    assert report["verdict"]["line"] in verdict_line and report["verdict"]["complete"]
    # each seed's own verdict, as its daemon wrote it
    for name, run_dir in members.items():
        own = json.loads((run_dir / "verdict.json").read_text())["verdict"]
        row = next(line for line in lines if line.startswith(f"{SWEEP}.{name} "))  # a member named by its folder
        assert row.split()[3] == own, (row, own)
    # the machine it ran on, at the start and in the closing lines
    machine = [line for line in lines if line.startswith("machine: ")]
    assert len(machine) == 2 and machine[0] == machine[1] and "ATen kernels" in machine[0] and "MKL_CBWR" in machine[0]
    assert (sweep_dir / "report" / "index.html").exists() and (out / "report" / "index.html").exists()
    assert re.search(r"sweep report\s+\S+index\.html", stdout)

    # the run report names every run, and reads by configuration: one sentence each, its seeds below
    page = (out / "report" / "index.html").read_text()
    for name in members:
        assert f"{SWEEP}.{name}" in page
    assert re.findall(r'<p class="verdict-sentence" data-config="([^"]+)"', page) == list(CONFIGS)

    # what it says: written from report.json (sweep/report/prose.py), printed under its heading and on the sweep page
    from tatu.ops.demo import WHAT_IT_SAYS, what_it_says
    from tatu.sweep.report.prose import what_it_says as sentences

    from tatu.sweep.judge.sweep_report import read_report_json

    read = read_report_json(sweep_dir / "report" / "report.json")  # the statistics as records, as prose reads them
    said = stdout.split(WHAT_IT_SAYS + "\n", 1)[1]
    assert said.startswith(what_it_says(read) + "\n"), said[:2000]
    sweep_page = html.unescape((sweep_dir / "report" / "index.html").read_text())
    assert all(s.text in sweep_page for s in sentences(read))


# Each check below needs something of its own (the taggers, the tensorboard package) and skips, or
# fails under CI_STRICT=1, only for its own reason: a machine without taggers still reads TensorBoard back.

@pytest.mark.slow
def test_tiny_demo_run_report_has_the_word_category_tables(tiny_demo):
    if not all(tagger_versions().values()):
        cannot_run("Apertium's taggers are not installed: the demo's word-category tables are not checked")
    page = (tiny_demo.out / "report" / "index.html").read_text()
    assert "Word categories at the last eval" in page and "categories-absent" not in page


@pytest.mark.slow
def test_tiny_demo_tensorboard_has_every_runs_curve(tiny_demo):
    """TATU_TENSORBOARD=auto: RUN_DIR/tb per run, read back with TensorBoard's own reader (which
    skips, or fails under CI_STRICT=1, without the tensorboard package); one HParams session per member."""
    out = tiny_demo.out
    sweep_dir = out / "sweeps" / SWEEP
    members = _members(sweep_dir)
    for run_dir in [out / "runs" / "trunk", *members.values()]:
        steps = {e["step"]: e["loss"] for e in read_events(run_dir / "events.jsonl") if e["event"] == "step"}
        assert steps, run_dir
        curve = dict(read_back(run_dir / "tb").scalars["train/loss"])
        assert curve == steps, run_dir
    assert len(list((sweep_dir / "tb").iterdir())) == len(members)  # one HParams session per member


@pytest.mark.slow
@pytest.mark.systemd
def test_tiny_demo_runs_through_systemd_when_a_user_manager_answers(tmp_path):
    """The same demo, but the trunk goes through `systemctl --user start --wait tatu-sft@trunk`
    and the sweep through `tatu sweep start --wait` (the coordinator unit tatu-sweep@, its members
    tatu-sft@ units) of a real user manager (tests/systemd_harness.py)."""
    from systemd_harness import user_manager_session

    problem = demo_packages_problem()
    if problem:
        cannot_run(f"demo packages unavailable: {problem}")
    out = tmp_path / "demo"
    journals: dict[str, str] | None = None
    runs = ["trunk", *(f"{SWEEP}.{name}" for name in _members(out))]
    with user_manager_session() as um:
        env = {k: v for k, v in um.env.items() if not k.startswith(RUN_PREFIXES)}
        proc = subprocess.run([sys.executable, "-m", "tatu.ops.demo", "--scale", "tiny", "--out", str(out)],
                              env=env, capture_output=True, text=True, timeout=900, cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "(systemd --user)" in proc.stdout and "members as tatu-sft@ units" in proc.stdout
        for run in runs:
            # the template and each run's env file are where this manager reads them: the
            # instance loaded, and it has ended (the demo waited for it).
            shown = um.show(f"tatu-sft@{run}.service", "LoadState", "ActiveState", "FragmentPath")
            assert shown == {"LoadState": "loaded", "ActiveState": "inactive",
                             "FragmentPath": str(um.unit_dir / "tatu-sft@.service")}, (run, shown)
            assert (um.config_home / "tatu" / f"{run}.env").is_file()
        for run_dir in _members(out / "sweeps" / SWEEP).values():
            assert (run_dir / "verdict.json").exists()
        coordinator = um.show(f"tatu-sweep@{SWEEP}.service", "ActiveState", "ExecMainStatus")
        assert coordinator == {"ActiveState": "inactive", "ExecMainStatus": "0"}, coordinator
        if um.journal_available:
            # journald reads the units' stdout on its own time: wait for the lines, with a deadline.
            journals = {run: um.wait_for(
                lambda run=run: (lambda text: text if "VERDICT " in text else None)(
                    um.journalctl("-t", f"tatu-sft-{run}", "-o", "cat")),
                timeout=30, what=f"tatu-sft@{run}'s VERDICT line in the journal") for run in runs[1:3]}
    assert (out / "report" / "index.html").exists()
    assert "VERDICT (locked rule): " in proc.stdout
    if journals is None:  # everything else was checked: only the journal half could not run
        cannot_run("journald is not running and the harness could not start it: the units' journal is not checked")
    for run, journal in journals.items():
        assert re.search(r"EVAL [0-9]+: sftHeld", journal), (run, journal[-2000:])
