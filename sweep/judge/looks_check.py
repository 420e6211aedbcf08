"""`tatu sweep report` on a sequential sweep: every look recomputed from the run dirs (the same
config_looks_all the scheduler logged them with) and compared with sweeps/<name>/looks.jsonl. A
logged look the files recompute otherwise, one they do not allow, one logged twice, or (once no
member runs) one the files allow that was never logged: 65 and one line naming the file, the line
and the look. A decision nobody can reproduce from the files is not one to report. A look that pooled
the seed variance is recomputed on the members its line names as pooled, each of which must still
be finished at its logged step and the next of its configuration in seed order
(schedule.pool_source), or the look disagrees with the log."""
from __future__ import annotations

from pathlib import Path

from tatu.daemon.run.paths import SweepDir
from tatu.exitcodes import BAD_DATA
from tatu.sweep.errors import SweepError
from tatu.sweep.judge import looks_log
from tatu.sweep.judge.looks_log import LoggedLook, check_logged, look_key
from tatu.sweep.judge.records import ConfigResult
from tatu.sweep.judge.schedule import config_looks_all, grouped_members, pool_source, sequential_criteria
from tatu.sweep.plan.lock import LockedPlan


def _named(entry: LoggedLook) -> str:
    return f"{entry.config} {entry.criterion} at {entry.look.n_seeds} seeds"


def recompute(locked: LockedPlan, configs: list[ConfigResult], logged: list[LoggedLook] | None = None) -> list[LoggedLook]:
    """Every look the files allow. `configs`: sweep/judge/analysis.stage_table's comparison stage (its
    members' results with their per-line scores); `logged`: the looks log, whose pooled members a
    pooling design's looks are recomputed on (a look it lacks pools every other configuration's
    finished members)."""
    design = locked.plan.design
    criteria = sequential_criteria(locked.plan.rule)
    grouped = grouped_members(locked, design)
    every_result = {r.member: r for c in configs for r in c.results}

    def finished(member):
        result = every_result.get(member.run)
        return result if result is not None and result.has("end") else None

    out: list[LoggedLook] = []
    for config in configs:
        members = grouped.get(config.key)
        if not members or not criteria:  # an interpolated configuration is not scheduled: no looks
            continue
        by_name = {r.member: r for r in config.results}
        looks, _ = config_looks_all(design, config.key, criteria, config.effective,
                                    [by_name[m.run] for m in members], config.half,
                                    pool_source(grouped, config.key, logged or [], finished))
        out += looks
    return out


def check_looks(locked: LockedPlan, sweep_dir: Path, configs: list[ConfigResult]) -> list[LoggedLook]:
    """The logged looks, once they agree with the files (SweepError 65 otherwise)."""
    path = SweepDir(sweep_dir).looks_file
    logged = looks_log.read(sweep_dir)
    recomputed = {look_key(l): l for l in recompute(locked, configs, logged)}
    seen: dict[tuple, int] = {}
    for number, entry in enumerate(logged, 1):
        if look_key(entry) in seen:
            raise SweepError(BAD_DATA, f"{path}:{number}: {_named(entry)} is logged twice (first at line {seen[look_key(entry)]})")
        seen[look_key(entry)] = number
        if look_key(entry) not in recomputed:
            raise SweepError(BAD_DATA, f"{path}:{number}: {_named(entry)}: logged, but the run dirs allow no such look "
                                       f"(decision {entry.look.decision!r})")
    check_logged(path, logged, list(recomputed.values()))
    running = any(r.state == "running" for c in configs for r in c.results)
    missing = [l for key, l in recomputed.items() if key not in seen]
    if missing and not running:
        raise SweepError(BAD_DATA, f"{path}: {_named(missing[0])} ({missing[0].look.decision}): the run dirs allow it "
                                   "but it was never logged (`tatu sweep start` logs it, then the report)")
    return logged
