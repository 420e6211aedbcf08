"""`tatu eval|compare --task NAME=FILE` (and a --data dir's tasks): multiple-choice tasks scored
by log-likelihood (tatu.evals.choice), printed, and compared with an exact McNemar test."""
from __future__ import annotations

import argparse
from pathlib import Path

from tatu.data.manifest import DataError, load_manifest
from tatu.exitcodes import BAD_DATA, TatuExit
from tatu.formats import fmt_interval, fmt_pct

_RATE = "{:.3f}".format  # an accuracy and its CI's ends


def task_specs(args: argparse.Namespace) -> dict[str, tuple[Path, str | None]]:
    """name -> (task file, the manifest's sha256 of it): --data's tasks, then every --task (no hash)."""
    tasks: dict[str, tuple[Path, str | None]] = {}
    if args.data is not None:
        try:
            manifest = load_manifest(args.data)
            tasks.update({name: (args.data / entry["file"], entry["sha256"]) for name, entry in manifest.get("tasks", {}).items()})
        except (DataError, KeyError, TypeError, AttributeError):
            pass  # set_specs names the unreadable manifest
    for spec in args.tasks:
        name, sep, file = spec.partition("=")
        if not sep or not name or not file:
            raise TatuExit(BAD_DATA, f"--task {spec!r}: expected NAME=FILE")
        tasks[name] = (Path(file), None)
    return tasks


def score_tasks(model, tokenizer, args) -> dict:
    from tatu.evals.choice import read_task, score_task

    try:
        return {name: score_task(model, read_task(path, sha256), tokenizer, name, args.device)
                for name, (path, sha256) in task_specs(args).items()}
    except (DataError, ValueError) as exc:
        raise TatuExit(BAD_DATA, str(exc)) from None


def print_tasks(tasks: dict) -> None:
    if tasks:
        print(f"{'task':<22} {'items':>9} {'acc':>7} {'95% CI':>17} {'acc_norm':>9} {'95% CI':>17}")
    for name, result in tasks.items():
        s = result.summary()
        a, n = s["acc"], s["acc_norm"]
        ci_a, ci_n = fmt_interval(a["lo"], a["hi"], _RATE), fmt_interval(n["lo"], n["hi"], _RATE)
        print(f"{name:<22} {s['n']:>9} {a['value']:>7.3f} {ci_a:>17} {n['value']:>9.3f} {ci_n:>17}")


def compare_tasks(tasks_a: dict, tasks_b: dict) -> dict:
    """acc and acc_norm of A and B on the same items, an exact McNemar test of each."""
    from tatu.evals.choice import mcnemar_exact

    rows = {}
    if tasks_a:
        print(f"{'task':<22} {'metric':>9} {'A':>7} {'B':>7} {'B-A':>8} {'only A':>7} {'only B':>7} {'p (McNemar)':>12}")
    for name, a in tasks_a.items():
        b = tasks_b[name]
        rows[name] = {}
        for key, ca, cb in (("acc", a.correct, b.correct), ("acc_norm", a.correct_norm, b.correct_norm)):
            test = mcnemar_exact(ca, cb)
            rows[name][key] = {"a": float(ca.mean()), "b": float(cb.mean()), **test}
            print(f"{name:<22} {key:>9} {ca.mean():>7.3f} {cb.mean():>7.3f} {fmt_pct(test['diff']):>8} "
                  f"{test['only_a']:>7} {test['only_b']:>7} {test['p_value']:>12.4f}")
    return rows
