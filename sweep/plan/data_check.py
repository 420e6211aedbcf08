"""What a plan asks of its members' data, checked when the plan is read, before anything runs (78):
every eval set the decision rule names (`ptVal_change_hi`, `sftHeld_exact_change_lo`: a set with
answers for the latter) and every replay source a member reads (REPLAY_SOURCES, a text channel) is
in that member's data; a name the data lacks is refused naming the nearest one it has.

A data dir with no manifest yet is not read here: a plan may be written before its data is built,
and each member's run refuses data it cannot read (65). A sweep reads its plan again at every
`tatu sweep start`, so a plan locked before its data was built is checked once the data is there.
"""
from __future__ import annotations

from pathlib import Path

from tatu.data.manifest import MANIFEST, DataError, load_manifest
from tatu.data.replay import ReplaySources, source_problem
from tatu.names import nearest
from tatu.sweep.plan.member import Member
from tatu.sweep.plan.rule import EXACT_METRIC, Rule, named_sets, plan_error


def _set_problem(name: str, evals: dict, exact: bool) -> str | None:
    if name not in evals:
        meant = nearest(name, evals)
        return (f"names the eval set {name}, which the data lacks" + (f" (did you mean {meant}?)" if meant else "")
                + f"; its eval sets: {', '.join(sorted(evals)) or 'none'}")
    if exact and not evals[name].get("answers"):
        with_answers = sorted(n for n, entry in evals.items() if entry.get("answers"))
        return (f"names {name}'s answers right ({name}_exact_change), but its pairs carry no answers; "
                f"sets with answers: {', '.join(with_answers) or 'none'}")
    return None


def check_members_data(path: Path, rule: Rule, members: list[Member]) -> None:
    """Refuse (78) the first set or replay source a member's data lacks, naming the data dir."""
    exact_sets = {m.group(1) for m in (EXACT_METRIC.match(c.metric) for c in rule.conditions) if m}
    checked: set[tuple[str, str | None]] = set()
    for member in members:
        data, sources = member.env.get("TATU_DATA"), member.env.get("REPLAY_SOURCES") or None
        if not data or (data, sources) in checked:
            continue
        checked.add((data, sources))
        if not (Path(data) / MANIFEST).is_file():
            continue
        try:
            manifest = load_manifest(data)
        except DataError:
            continue  # the member's run says what is wrong with it (65)
        where = f"{Path(data) / MANIFEST}"
        for name in named_sets(rule):
            problem = _set_problem(name, manifest.get("evals") or {}, name in exact_sets)
            if problem:
                raise plan_error(path, "[decision] rule", f"{problem} ({where})")
        for name in ReplaySources.parse(sources).names if sources else ():
            problem = source_problem(name, manifest.get("channels") or {})
            if problem:
                raise plan_error(path, f"member {member.name}: REPLAY_SOURCES", f"{problem} ({where})")
