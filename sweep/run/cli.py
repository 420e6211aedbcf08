"""`tatu sweep plan|start|status|stop|report`: pre-registered sweeps of daemon runs.

    tatu sweep plan FILE                      members, effective configs, plan hash, cost estimate
    tatu sweep start FILE [--foreground] [-K N]   lock the plan, then run it (tatu-sweep@NAME by default)
    tatu sweep start FILE --wait              under systemd, return when the coordinator unit ends (its status)
    tatu sweep start FILE --backend ray [--address ADDR]   members as Ray tasks on a cluster
    tatu sweep start FILE --replace           a locked sweep whose members trained no step takes this plan
    tatu sweep plan|start --env-file RUN.env --seeds N [--name NAME]   instead of FILE: that run's exact
                                              configuration at N seeds by its own criteria (sweep/plan/env_seeds.py)
    tatu sweep status NAME                    each member's state, and the coordinator's summary
    tatu sweep stop NAME                      stop the coordinator and its members (they save; start continues)
    tatu sweep report NAME                    the closing table, report.json, PNG plots, an HTML page
    tatu sweep coordinate                     the coordinator itself (what tatu-sweep@NAME runs; SWEEP_DIR from its env file)

Sweeps live in sweeps/<name>/ under the current directory (--sweeps DIR elsewhere).
"""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import sys
from pathlib import Path

from tatu import exitcodes
from tatu.daemon.run.paths import SweepDir
from tatu.sweep.errors import SweepError
from tatu.sweep.run.printed import sweep_command

def add_args(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    p = sub.add_parser("plan", help="print the members, their effective configs, the hash and a cost estimate")
    _plan_source_args(p)
    p.add_argument("--full", action="store_true", help="every variable of every member, defaults included")
    p.add_argument("--sweeps", type=Path, default=Path("sweeps"))
    p = sub.add_parser("start", help="lock the plan (sweeps/NAME/plan.lock.json) and run it unattended")
    _plan_source_args(p)
    p.add_argument("--foreground", action="store_true", help="members as child processes of this command, no systemd")
    p.add_argument("--backend", choices=("systemd", "foreground", "ray"),
                   help="where members run (default systemd; ray: Ray tasks, the coordinator in this terminal)")
    p.add_argument("--address", help="--backend ray: the cluster to join (auto, HOST:PORT; default RAY_ADDRESS or a local one)")
    p.add_argument("--ray-cpus", type=int, default=1, help="--backend ray: CPUs per member on a cluster without GPUs")
    p.add_argument("-K", type=int, default=None, help="members running at once (default: the GPUs the members use, else 1; ray: what the cluster holds at once)")
    p.add_argument("--poll", type=float, default=2.0, help="seconds between the coordinator's passes (--foreground, --backend ray)")
    p.add_argument("--wait", action="store_true", help="systemd: return when the coordinator unit has ended, with its exit status "
                                                         "(the other backends always wait)")
    p.add_argument("--replace", action="store_true", help="a locked sweep none of whose members trained a step "
                                                          "takes this plan (says what it discards; 78 if any trained)")
    p.add_argument("--sweeps", type=Path, default=Path("sweeps"))
    for action, text in (("status", "each member's state"), ("stop", "stop the coordinator and the members"),
                         ("report", "the closing table, plots and an HTML page")):
        p = sub.add_parser(action, help=text)
        p.add_argument("name")
        p.add_argument("--sweeps", type=Path, default=Path("sweeps"))
        if action == "report":
            p.add_argument("--out", type=Path, help="report directory (default: sweeps/NAME/report)")
    sub.add_parser("coordinate", help="the coordinator of the sweep in $SWEEP_DIR: what the unit tatu-sweep@NAME runs")


def _plan_source_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("plan", type=Path, nargs="?", help="the plan file (or --env-file and --seeds)")
    p.add_argument("--env-file", type=Path, help="instead of a plan: this run's env file, at --seeds N seeds")
    p.add_argument("--seeds", type=int, help="with --env-file: how many seeds (at least 2; the run's TATU_SEED first)")
    p.add_argument("--name", help="with --env-file: the sweep's name (default <TATU_RUN>-seeds, <TATU_RUN>-seq)")
    p.add_argument("--sequential", action="store_true", help="with --env-file: a group-sequential decision (obf, looks "
                                                            "from 3 seeds to --seeds N): stop at the first decisive look")


def main(args: argparse.Namespace) -> int:
    return {"plan": plan_main, "start": start_main, "status": status_main, "stop": stop_main,
            "report": report_main, "coordinate": coordinate_main}[args.action](args)


def coordinate_main(args) -> int:
    """The unit's entry point: a tatu subcommand, so an installed unit outlives the module's moves."""
    from tatu.sweep.run.coordinator import main as coordinator_main

    return coordinator_main()


def _sweep_dir(args, name: str) -> Path:
    return (args.sweeps / name).absolute()


# --- plan ------------------------------------------------------------------------------------------

def plan_main(args) -> int:
    from tatu.daemon.config import describe, load_config
    from tatu.formats import fmt_duration
    from tatu.sweep.plan.configs import describe_configs
    from tatu.sweep.run.cost import estimate
    from tatu.sweep.plan.env_seeds import plan_or_env_file
    from tatu.sweep.plan.inputs import check_member_inputs

    plan, generated = plan_or_env_file(args)
    out = SweepDir(_sweep_dir(args, plan.name)).runs
    tune = plan.tune_members(out)
    # With a tune stage the comparison members exist once the value is chosen: shown with the first.
    compare = plan.compare_members(out, {plan.tune_var: plan.tune_values[0]} if plan.tune_var else None)
    shown = tune + compare
    check_member_inputs(plan.path, shown)  # before a line is printed: what every member reads is there
    print(f"sweep {plan.name}  plan hash {plan.portable_hash}  ({plan.path}; with this checkout's absolute paths: {plan.hash})")
    if generated:
        print(f"generated from {args.env_file}: {'as' if generated.written() else '`tatu sweep start` writes it to'} {generated.path}")
        if generated.derived:
            print(generated.derived)
    if plan.question:
        print(f"question: {plan.question}")
    print(f"decision rule: {plan.rule.text}")
    for name, sets in describe_configs(plan.configs).items():
        print(f"configuration {name}: {sets}")
    for alpha, key in zip(plan.interpolate.alphas, plan.interpolate.keys()) if plan.interpolate else ():
        print(f"configuration {key}: interpolated, (1-{alpha:g}) seed + {alpha:g} {plan.interpolate.config}'s end "
              f"per seed (no daemon run: one checkpoint per seed in the sweep dir's interpolated/)")
    print(f"baseline: {', '.join(f'{k}={v}' for k, v in plan.baseline.items())}   seeds: {plan.seeds}")
    if plan.design:
        from tatu.sweep.report.status import plan_line

        print(plan_line(plan.design, len(plan.configurations())))
    if plan.tune_var:
        print(f"tune stage: {plan.tune_var} in {plan.tune_values}, seeds {plan.tune_seeds}, chosen on the dev half "
              f"of sftHeld (even line indices); the comparison judges on the odd ones")
    print(f"members: {len(tune)} tune + {len(compare)} comparison: {', '.join(m.name for m in shown)}")
    for member in shown:
        config, sources = load_config(member.env)
        label = "tune" if member.stage == "tune" else "compare"
        tuned_note = f"  ({plan.tune_var} = the tuned value)" if plan.tune_var and member.stage == "compare" else ""
        print(f"\n[{label}] {member.name}  run {member.run}  config {config.hash}{tuned_note}")
        for line in describe(config, sources):
            if args.full or sources.get(line.split()[0]) != "default":
                print(line)
    if not args.full:
        print("\n(every other variable at its default; --full lists them all; the lock holds each member's full config)")
    from tatu.sweep.run.cost import wall_estimate

    cost, total = estimate(plan, out, shown)
    print()
    if cost is None:
        print("cost: unknown (no run with measured step times: run `tatu smoke` with the base config first)")
    else:
        walls = {k: wall_estimate(plan, out, shown, k) for k in (1, 2)}
        print(f"cost: {len(shown)} members, {fmt_duration(total)} of runs in all (measured by {cost.source} at "
              f"{cost.threads} threads: {cost.seconds_per_slot * 1e6:.2f} us per token slot, {cost.eval_seconds:.1f} s per "
              f"eval); K=1 -> {fmt_duration(walls[1])}, K=2 -> {fmt_duration(walls[2])} wall (each member at its own "
              f"threads, at most cores / K: sweep/run/cost.py)")
        if any(m.env.get("TATU_TRAIN", "all") != "all" for m in shown):
            print("  (members with TATU_TRAIN=top:K or lora are counted at a full step's cost: an upper bound on "
                  "their step cost, measured no slower in docs/benchmarks.md)")
    return 0


# --- start -----------------------------------------------------------------------------------------

def finished(sweep_dir: Path, backend) -> tuple[bool, str]:
    from tatu.sweep.run.coordinator import Coordinator
    from tatu.sweep.judge.outcome import TERMINAL
    from tatu.sweep.run.members import summary

    coordinator = Coordinator(sweep_dir, backend, 1, out=open(os.devnull, "w"))
    locked, stage, members = coordinator.stage_members()
    statuses = coordinator.statuses(members)
    if locked.plan.design and stage != "tune":  # sequential: the members its looks let run (from the log)
        from tatu.sweep.judge import looks_log
        from tatu.sweep.judge.schedule import schedule

        plan = schedule(locked, {s.member.run: s.state for s in statuses}, looks_log.read(sweep_dir), None)
        if not plan.decided:  # members still to run, or a look the coordinator has yet to log
            return False, summary(statuses, None, stage)
        statuses = [s for s in statuses if s.member.run in plan.allowed]
    done = stage != "tune" and all(s.state in TERMINAL for s in statuses)
    return done, summary(statuses, None, stage)


def threads_note(base_env: dict, kind: str) -> str:
    """CPU float sums follow the thread count: whether this plan's bits depend on the backend."""
    if base_env.get("TATU_THREADS"):
        return f"threads: TATU_THREADS={base_env['TATU_THREADS']} for every member (the plan): the same bits on any backend"
    own = "OMP_NUM_THREADS = --ray-cpus, Ray's" if kind == "ray" else "torch's default"
    return (f"threads: not fixed by the plan, so each member takes its backend's count ({own}): another backend "
            f"may differ in the last bits; set TATU_THREADS in [base] vars to fix it")


def start_main(args) -> int:
    from tatu.sweep.run.coordinator import SETTINGS_FILE, STOP_FILE, Coordinator, backend_for, devices_for
    from tatu.sweep.run.cost import unfinished_estimate
    from tatu.atomic import write_json_atomic
    from tatu.sweep.plan.env_seeds import plan_or_env_file, write as write_generated
    from tatu.sweep.plan.inputs import check_member_inputs
    from tatu.sweep.plan.lock import reconcile

    plan, generated = plan_or_env_file(args)
    sweep_dir = _sweep_dir(args, plan.name)
    if generated and generated.derived:
        print(generated.derived)
    kind = args.backend or ("foreground" if args.foreground else "systemd")
    if kind == "ray":  # before anything is written: a missing extra or an unreachable cluster is one line
        from tatu.sweep.run.ray import connect

        connect(args.address)
    # What every member reads, before the name is locked: a wrong path is the plan's problem (78), not
    # a sweep whose members all fail and whose name is then used up.
    runs = SweepDir(sweep_dir).runs
    check_member_inputs(plan.path, plan.tune_members(runs) + plan.compare_members(
        runs, {plan.tune_var: plan.tune_values[0]} if plan.tune_var else None))
    if getattr(args, "replace", False):
        from tatu.sweep.run.replace import discard_unstarted

        said = discard_unstarted(sweep_dir)
        if said:
            print(said)
    locked, what = reconcile(plan, sweep_dir)
    if generated:  # once the lock accepts it: a changed env file leaves the locked sweep's plan file as it was
        write_generated(generated)
        print(f"plan file: {generated.path} (from {args.env_file}; `{sweep_command('plan', sweep_dir, shlex.quote(str(generated.path)))}` shows it)")
    print(f"sweep {plan.name}: plan {what} ({SweepDir(sweep_dir).lock_file}, hash {plan.portable_hash}; "
          f"with this checkout's paths {locked.plan_hash})")
    print(threads_note(plan.base_env, kind))
    backend = backend_for(kind, sweep_dir, args.ray_cpus)
    from tatu.systemctl import SystemctlError

    try:
        done, text = finished(sweep_dir, backend)
    except SystemctlError as exc:
        raise SweepError(1, f"{exc} (no user manager: `tatu sweep start --foreground` runs it without systemd)")
    if done:
        print(f"sweep {plan.name} already finished ({text}); nothing to do. `{sweep_command('report', sweep_dir)}`")
        return 0
    if args.K is not None and args.K < 1:
        raise SweepError(exitcodes.USAGE, f"-K {args.K}: at least 1 member at a time")
    base_device = plan.base_env.get("TATU_DEVICE", "auto")
    if kind == "ray":  # Ray places members and gives each its GPU; K is what the cluster holds at once
        from tatu.sweep.run.ray import slots

        k = args.K or slots(base_device, args.ray_cpus)
        devices = [None] * k
    else:
        k = args.K or max(1, _gpu_count() if base_device in ("auto", "cuda") else 0)
        devices = devices_for(k, base_device)
    stop_path = sweep_dir / STOP_FILE
    if stop_path.exists():
        print(f"continuing a stopped sweep ({stop_path.read_text().strip()})")
        stop_path.unlink()
    write_json_atomic(sweep_dir / SETTINGS_FILE, {"k": k, "backend": kind, "devices": devices,
                                                  "estimate_s": unfinished_estimate(plan, sweep_dir, k)}, sort_keys=True)
    if kind != "systemd":
        coordinator = Coordinator(sweep_dir, backend, k, devices, poll_seconds=args.poll)
        previous = signal.signal(signal.SIGINT, lambda *_: setattr(coordinator, "stopping", True))
        try:
            return coordinator.run()
        finally:
            signal.signal(signal.SIGINT, previous)
    from tatu.sweep.run.unit import start_unit

    return start_unit(plan.name, sweep_dir, k, args.wait)


def _gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:
        return 0


# --- status / stop / report --------------------------------------------------------------------------

def status_main(args) -> int:
    from tatu.daemon.run.view import read_run
    from tatu.sweep.run.coordinator import STOP_FILE, Coordinator, backend_for, settings
    from tatu.sweep.run.members import forecast_cell, summary

    sweep_dir = _sweep_dir(args, args.name)
    conf = settings(sweep_dir)
    backend = backend_for(conf.get("backend", "systemd"), sweep_dir)
    coordinator = Coordinator(sweep_dir, backend, int(conf.get("k", 1)), out=open(os.devnull, "w"))
    locked, stage, members = coordinator.stage_members()
    statuses = coordinator.statuses(members)
    sequential = []
    if locked.plan.design and stage != "tune":  # the members the looks let run, and the looks
        from tatu.sweep.report.status import sweep_status

        plan, sequential = sweep_status(locked, sweep_dir, {s.member.run: s.state for s in statuses})
        statuses = [s for s in statuses if s.member.run in plan.allowed]
    print(f"sweep {args.name} ({conf.get('backend', 'systemd')}, K={conf.get('k', 1)}): "
          f"{summary(statuses, coordinator.eta(statuses), stage)}")
    stop = sweep_dir / STOP_FILE
    if stop.exists():
        print(f"stopped: {stop.read_text().strip()}")
    for s in statuses:
        limit = s.member.env.get("MIX_STEPS_LIMIT", "?")
        forecast = forecast_cell(s)
        print(f"  {s.member.run:<32} {s.state:<9} {s.verdict or '':<13} step {read_run(s.member.run_dir).step}/{limit}"
              + (f"  {forecast}" if forecast else "") + (f"  {s.detail}" if s.detail else ""))
    for line in sequential:
        print(line)
    return 0


def stop_main(args) -> int:
    from tatu.sweep.run.coordinator import STOP_FILE, Coordinator, backend_for, settings
    from tatu.atomic import write_json_atomic
    from tatu.systemctl import SystemctlError, systemctl_user

    sweep_dir = _sweep_dir(args, args.name)
    conf = settings(sweep_dir)
    write_json_atomic(sweep_dir / STOP_FILE, {"reason": "stopped by the operator (tatu sweep stop)", "code": 0}, sort_keys=True)
    kind = conf.get("backend", "systemd")
    if kind == "systemd" and shutil.which("systemctl"):
        from tatu.sweep.run.unit import COORDINATOR_UNIT

        unit = COORDINATOR_UNIT.format(args.name)
        try:
            systemctl_user("stop", unit)
            systemctl_user("disable", unit)
        except SystemctlError as exc:
            print(f"note: {exc}", file=sys.stderr)
    backend = backend_for(kind, sweep_dir)
    coordinator = Coordinator(sweep_dir, backend, 1, out=open(os.devnull, "w"))
    _, _, members = coordinator.stage_members()
    stopped = 0
    for status in coordinator.statuses(members):
        if status.state == "running":
            backend.stop(status.member)
            stopped += 1
    print(f"sweep {args.name}: stop requested; {stopped} running members asked to save and stop. "
          f"`{sweep_command('start', sweep_dir, 'PLAN')}` continues it")
    return 0


def report_main(args) -> int:
    from tatu.sweep.report.write import write_report

    data, text, page = write_report(_sweep_dir(args, args.name), args.out)
    print(text)
    print(f"\nreport: {page}  (report.json and plots beside it)")
    return 0
