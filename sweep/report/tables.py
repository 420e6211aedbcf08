"""The sweep report's tables, as text: the closing text `tatu sweep report` prints, and the rows
the HTML page (sweep/report/page.py) shows.

Per configuration across seeds: drift and sftHeld change (the mean over seeds with a CI that
carries seed and line variance: every CI header says `seeds x lines`), the seed SD beside the mean
within-run SE, the MDE of that CI, aborted seeds, outlier seeds (leave-one-out t, shown, never
dropped); paired by seed and line against the baseline with Holm-adjusted p-values; all of it at
the members' ends and again at the common step (each row prints its step); the seeds each judged
metric and comparison would need for the plan's stated MDE (sweep/judge/power.py); the locked rule's
verdict, where it judged, and what would change it.
With a tune stage, its table comes first.
"""
from __future__ import annotations

from tatu.evals.seeds.stats import OUTLIER_MIN_SEEDS
from tatu.formats import fmt_ci, fmt_p_formula as _p, fmt_share as _sd
from tatu.sweep.judge.power import SeedsFor, SeedsForEffect
from tatu.sweep.judge.common_step import sft_tokens_per_step
from tatu.sweep.judge.records import ConfigResult, ConfigStat, PairedDiff, SweepVerdict
from tatu.sweep.judge.sweep_report import SweepReport, TuneStage
from tatu.sweep.judge.vs_parent import VsParent
from tatu.sweep.plan.configs import describe_configs
from tatu.sweep.plan.lock import Tuned
from tatu.sweep.report.ends import baseline_of, common_title, ends_vs


def _ci(stats: ConfigStat | None) -> str:
    return "n/a" if not stats else stats.change.text()


def _step(c: ConfigResult, common: bool) -> str:
    """The step a row compares at: the common step, or the members' last eval steps."""
    if common:
        return str(c.common_step)
    return ",".join(str(s) for s in c.end_steps) or "-"


def config_rows(configs: list[ConfigResult], common: bool = False) -> list[list[str]]:
    rows = []
    for c in configs:
        where = c.stats_at(common)
        if where is None:
            continue
        d, s = where["drift"], where["sftHeld"]
        results = c.results
        aborted = sum(r.state == "aborted" for r in results)
        diverged = sum(r.state == "diverged" for r in results)
        waiting = sum(r.state not in ("done", "aborted", "diverged") for r in results)
        n_seeds = (d or s).n_seeds if (d or s) else 0
        rows.append([c.key + (" *" if c.is_baseline else ""), f"{n_seeds}/{len(results)}",
                     _step(c, common), _ci(d), _sd(d and d.seed_sd), _sd(d and d.within_se), _sd(d and d.mde), _ci(s),
                     _sd(s and s.seed_sd), _sd(s and s.within_se),
                     f"{aborted}" + (f" +{diverged} diverged" if diverged else "") + (f" ({waiting} not done)" if waiting else ""),
                     _outlier_cell(d, s, n_seeds)])
    return rows


def _outlier_cell(drift: ConfigStat | None, sft: ConfigStat | None, n_seeds: int) -> str:
    """The flagged seeds, each with the metric it is flagged on; n/a where a flag cannot be raised."""
    if 0 < n_seeds < OUTLIER_MIN_SEEDS:
        return f"n/a ({n_seeds} seed{'s' if n_seeds > 1 else ''})"
    flagged = [f"{name} s{o.seed} (t={o.t:+.1f})" for name, stat in (("drift", drift), ("sftHeld", sft)) if stat
               for o in stat.outliers]
    return ", ".join(flagged) or "-"


# "seeds x lines": every CI here is the crossed one (evals/seeds/stats.py), not one run's CI over its lines
CI = "[95% CI, seeds x lines]"
CONFIG_HEADER = ["config", "seeds", "step", f"drift {CI}", "seed SD", "within SE", "MDE", f"sftHeld change {CI}",
                 "seed SD", "within SE", "aborted", "outlier seeds"]
OUTLIER_NOTE = ("outlier seeds: leave-one-out t beyond a Bonferroni cut (normal seeds: at most 4% of "
                "config-metrics flagged), named with the metric it is flagged on; "
                f"n/a below {OUTLIER_MIN_SEEDS} seeds (the others' spread would have 1 df)")
# where every paired p comes from: the crossed CI's own SE and df (evals/seeds/stats.py crossed_p)
PAIRED_P = "p from the crossed CI's t, seeds x lines"
PAIRED_HEADER = ["config vs baseline", "seeds", "step", f"drift diff {CI}", "p", "p Holm", f"sftHeld diff {CI}", "p", "p Holm"]


def paired_rows(configs: list[ConfigResult], common: bool = False) -> list[list[str]]:
    """Each configuration vs the baseline; at the ends, a row whose ends differ prints both and why
    (sweep/report/ends.py): it sets unequal training against each other."""
    rows = []
    baseline = baseline_of(configs)
    for c in configs:
        paired = c.paired_at(common)
        if c.is_baseline or not paired:
            continue
        d, s = paired.get("drift"), paired.get("sftHeld")
        rows.append([c.key, str(d.n_seeds if d else 0), _paired_step(c, baseline, d or s, common),
                     *_paired_cells(d), *_paired_cells(s)])
    return rows


def _paired_step(c: ConfigResult, baseline: ConfigResult | None, p: PairedDiff | None, common: bool) -> str:
    """The step a paired row compares at, as the analysis stored it (common_step.compared_at); a
    report written before it was stored: from the ends."""
    if p and p.unequal:
        return f"{p.unequal}: unequal ends"
    if p and p.at:
        return p.at
    if p and p.step is not None:
        return str(p.step)
    return _step(c, common) if common or baseline is None else ends_vs(c, baseline)


def closing_paired_rows(configs: list[ConfigResult]) -> tuple[str, list[list[str]]]:
    """The paired table a closing output shows: at the common step where every member has its
    lines there (like with like), else at the ends (unequal ends printed as such); with its title."""
    if configs and configs[0].common_step is not None and any(c.paired_common for c in configs):
        title = common_title(configs)
        if not any(c.common_tokens for c in configs):
            title += f" (equal steps{_tokens_per_step(configs)})"
        return title, paired_rows(configs, common=True)
    return "at the members' ends", paired_rows(configs)


def _tokens_per_step(configs: list[ConfigResult]) -> str:
    """`; 8,192 SFT tokens per step in each` where the configurations' settings say so ('' where unknown)."""
    try:
        per_step = {sft_tokens_per_step(c.effective) for c in configs}
    except (KeyError, TypeError, ValueError):
        return ""
    return f"; {per_step.pop():,} SFT tokens per step in each" if len(per_step) == 1 else ""


def _paired_cells(p: PairedDiff | None) -> list[str]:
    """A paired comparison's difference with its CI, p and p Holm (n/a without one)."""
    if not p:
        return ["n/a"] * 3
    # a paired difference is held on the log scale: its text is the relative change, as every other CI's
    if p.unequal:  # unequal training side by side: the difference shown, no test of its direction
        return [p.change.relative().text(), "-", "-"]
    return [p.change.relative().text(), _p(p.p_value), _p(p.p_holm)]


def tune_rows(tune: TuneStage, tuned: Tuned | None) -> list[list[str]]:
    rows = []
    var = tune.var
    for c in tune.configs:
        s = c.stats["sftHeld"]
        chosen = tuned is not None and c.values.get(var) == tuned.value
        states = ", ".join(sorted({r.state for r in c.results}))
        rows.append([f"{var}={c.values.get(var)}" + (" <- chosen" if chosen else ""), f"{s.n_seeds if s else 0}/{len(c.results)}",
                     _ci(s), _sd(s and s.seed_sd), _ci(c.stats["drift"]), states])
    return rows


TUNE_HEADER = ["tune value", "seeds", f"sftHeld change, dev half {CI}", "seed SD", "drift (shown, not used)", "states"]


def text_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows]
    return "\n".join(line.rstrip() for line in lines)


def closing_text(data: SweepReport) -> str:
    out = [f"sweep {data.name} (plan {data.plan_portable_hash}): {data.question}".rstrip(": ")]
    if data.tune:
        out += ["", f"tune stage: {data.tune.var}, chosen on the dev half of sftHeld (never the ruler, never the judge half)",
                text_table(TUNE_HEADER, tune_rows(data.tune, data.tuned))]
        if not data.tuned:
            out.append(TUNE_PENDING)
    if data.compare:
        configs = list(data.compare.configs)
        half = " (sftHeld: judge half)" if data.tune else ""
        out += configs_legend(data.configs, configs)
        out += ["", f"comparison stage{half}; * = baseline; CIs carry seed and line variance (crossed: seeds x shared lines)",
                text_table(CONFIG_HEADER, config_rows(configs)), OUTLIER_NOTE]
        out += _sets_text(configs, common=False)
        out += _paired_text(configs, common=False)
        out += _vs_parent_text(data.compare.vs_parent)
        out += _common_text(configs)
        out += answers_text(data)
        power = power_lines(data.seeds_for)
        out += ["", *power] if power else []
        out += ["", *verdict_lines(data.verdict, data.compare.complete)]
    return "\n".join(out)


CONFIGS_TITLE = "configurations (each over [base]) and what trains in each (the daemon's line)"
CONFIGS_HEADER = ["config", "sets", "trains"]


def configs_rows(named: dict[str, dict[str, str]] | None, configs: list[ConfigResult]) -> list[list[str]]:
    """What each named configuration sets and what trained in it; for axes alone, only when what
    trained differs between configurations (a TATU_TRAIN axis), so other tables read as before."""
    if not named and len({c.trainable for c in configs}) < 2:
        return []
    sets = describe_configs(named or {})
    return [[c.key, sets.get(c.values.get("config"), "-"), c.trainable or "n/a"] for c in configs]


def configs_legend(named: dict[str, dict[str, str]] | None, configs: list[ConfigResult]) -> list[str]:
    rows = configs_rows(named, configs)
    return ["", CONFIGS_TITLE, text_table(CONFIGS_HEADER, rows)] if rows else []


def verdict_lines(verdict: SweepVerdict, complete: bool) -> list[str]:
    """The verdict line, the failed checks, what would change it (the text's last block, the page's
    verdict); `complete`: every member the verdict waits for has finished (else it is provisional)."""
    judged = verdict.judged_where()
    lines = [("VERDICT (locked rule): " if complete else "PROVISIONAL (members still running): ")
             + verdict.line + judged]
    for check in verdict.checks:
        if check.failed:
            lines.append(f"  {verdict.axis}={check.label} fails "
                         + "; ".join(f"{f.condition} ({f.shown})" for f in check.failed))
        if check.missing:  # never a silent pass: what it lacks, and why for an interpolated configuration
            why = " (interpolated: no daemon run, so no evals during training)" if check.interpolated else ""
            lines.append(f"  {verdict.axis}={check.label} is not judged: no value for {', '.join(check.missing)}{why}")
    return lines + [f"  {note}" for note in verdict.notes] + [f"  what would change it: {note}" for note in verdict.would_change] + [
        f"  {line}" for line in verdict.looks]  # a sequential design's looks (sweep/judge/verdict.py)


TUNE_PENDING = "(the tune stage has not finished: the comparison stage has not started)"
METRIC_NAMES = {"drift": "drift", "sftHeld": "sftHeld change"}  # else a held-out set's: "<SET> change"


def _effect(fraction: float) -> str:
    """The stated effect as the plan writes it: 0.02 -> "2%", 0.025 -> "2.5%"."""
    return f"{fraction * 100:g}%"


def power_title(seeds_for: SeedsForEffect) -> str:
    where = "at the common step" if seeds_for.at == "common" else "at the end"
    return (f"seeds for MDE {_effect(seeds_for.effect)} ({seeds_for.power:.0%} power: the 95% CI, seeds x lines, "
            f"excludes a true change of {_effect(seeds_for.effect)}; {where}, where the rule judges; "
            "MDE: what the seeds run resolve now)")


def power_row(row: SeedsFor, effect: float) -> str:
    """`replay-n2 vs replay-n0 drift diff: MDE 4.1% at 3 seeds; seeds for MDE 2%: 9` (or why no number)."""
    name = METRIC_NAMES.get(row.metric, f"{row.metric} change")
    who = f"{row.config} vs {row.vs} {name.removesuffix(' change')} diff" if row.vs else f"{row.config} {name}"
    label = f"seeds for MDE {_effect(effect)}"
    if not row.known:
        return f"{who}: {label}: n/a ({row.n_seeds} seed: its seed-to-seed part is not measured)"
    if row.seeds is None:
        answer = f"none with these {row.n_lines} lines (floor {_sd(row.line_floor)})"  # FLOOR_NOTE says it once
    else:
        answer = str(row.seeds)
    return f"{who}: MDE {_sd(row.mde_now)} at {row.n_seeds} seeds; {label}: {answer}"


def power_lines(seeds_for: SeedsForEffect | None) -> list[str]:
    """The power block of the closing text and the page: its title, then one line per metric."""
    if not seeds_for:
        return []
    floored = any(r.known and r.seeds is None for r in seeds_for.rows)
    return [power_title(seeds_for), *(f"  {power_row(r, seeds_for.effect)}" for r in seeds_for.rows),
            *([f"  {FLOOR_NOTE}"] if floored else [])]


# Said once under the power block, not on each row it explains.
FLOOR_NOTE = "(floor: what the shared lines alone allow at any seed count; more lines would lower it)"


def _n_compared(p: PairedDiff | None) -> int:
    return (p.n_compared or 0) if p else 0


def _paired_text(configs: list[ConfigResult], common: bool) -> list[str]:
    rows = paired_rows(configs, common)
    if not rows:
        return []
    n = max(_n_compared((c.paired_at(common) or {}).get("drift")) for c in configs)
    return ["", f"paired by seed and line vs the baseline (log-ratio differences; {PAIRED_P}; Holm over {n} "
                f"comparisons{UNEQUAL_NOTE if _any_unequal(configs, common) else ''})",
            text_table(PAIRED_HEADER, rows)]


# said under a paired table with a row at unequal ends (its p cells are "-")
UNEQUAL_NOTE = "; a row at unequal ends sets unequal training side by side: no p, in no Holm family, no direction"


def _any_unequal(configs: list[ConfigResult], common: bool) -> bool:
    return any(p and p.unequal for c in configs for p in (c.paired_at(common) or {}).values())


VS_PARENT_TITLE = ("interpolated vs its parent, paired by seed and line, each seed at its parent's end (an alpha's "
                   "member is that end walked back: equal training; log-ratio differences; "
                   f"{PAIRED_P}; Holm over the alphas)")


def _vs_parent_step(row: VsParent) -> str:
    """`24`; `8,24 (each seed at its own end)` where the parent's seeds ended at different steps."""
    if row.steps is None:
        return "n/a"
    if len(row.steps) > 1:
        return ",".join(map(str, row.steps)) + " (each seed at its own end)"
    return ",".join(map(str, row.steps)) or "-"


def vs_parent_table(rows: tuple[VsParent, ...]) -> tuple[list[str], list[list[str]]]:
    """Each interpolated configuration vs its parent (sweep/judge/vs_parent.py): header, rows."""
    if not rows:
        return [], []
    header = ["config vs parent", "seeds", "step"] + [h for m in rows[0].paired for h in (f"{m} diff {CI}", "p", "p Holm")]
    table = []
    for row in rows:
        cells = [f"{row.config} vs {row.parent}", str(max(p.n_seeds if p else 0 for p in row.paired.values())),
                 _vs_parent_step(row)]
        for p in row.paired.values():
            cells += _paired_cells(p)
        table.append(cells)
    return header, table


def _vs_parent_text(rows: tuple[VsParent, ...]) -> list[str]:
    header, table = vs_parent_table(rows)
    return ["", VS_PARENT_TITLE, text_table(header, table)] if table else []


def _common_text(configs: list[ConfigResult]) -> list[str]:
    """The same comparisons at the last eval step every member reached (the ends may differ)."""
    if not configs:
        return []
    missing = configs[0].common_missing
    if missing:
        return ["", f"at the common step: n/a ({missing})"]
    return (["", f"{common_title(configs)} (the daemon's per-line scores there)",
             text_table(CONFIG_HEADER, config_rows(configs, common=True))] + _sets_text(configs, common=True)
            + _paired_text(configs, common=True))


HELD_OUT_HEADER = ["config", "set", "step", f"change {CI}", "seed SD", "within SE", "MDE"]
HELD_OUT_NOTE = ("ptVal (shown, never judged) and the held-out sets (every eval set beyond the three roles): ppl change vs "
                 "step 0, over seeds (crossed CIs)")
CATEGORY_HEADER = ["config", "set", "category", "step", f"change {CI}", "seed SD", "within SE"]
CATEGORY_NOTE = ("word categories (Apertium's tags, stored at data build): ppl change vs step 0 on the target tokens "
                 "of each category, over the lines that have one, over seeds (crossed CIs)")


def held_out_rows(configs: list[ConfigResult], common: bool = False) -> list[list[str]]:
    rows = []
    for c in configs:
        for name, st in (c.stats_at(common) or {}).items():
            if name not in ("drift", "sftHeld"):
                rows.append([c.key, name, _step(c, common), _ci(st), _sd(st and st.seed_sd),
                             _sd(st and st.within_se), _sd(st and st.mde)])
    return rows


def category_rows(configs: list[ConfigResult], common: bool = False) -> list[list[str]]:
    """One row per set, category and configuration, in that order (the configurations of one
    category side by side)."""
    pairs = list(dict.fromkeys((s, cat) for c in configs for s, per in (c.categories_at(common) or {}).items()
                               for cat in per))
    rows = []
    for set_name, category in pairs:
        for c in configs:
            st = ((c.categories_at(common) or {}).get(set_name) or {}).get(category)
            if st:
                rows.append([c.key, set_name, category, _step(c, common), _ci(st), _sd(st.seed_sd),
                             _sd(st.within_se)])
    return rows


def categories_missing(configs: list[ConfigResult]) -> bool:
    """Categories at the end but none at the common step: the members' eval files predate them."""
    return any(c.categories for c in configs) and not any(c.categories_common for c in configs)


def _sets_text(configs: list[ConfigResult], common: bool) -> list[str]:
    out = []
    held, categories = held_out_rows(configs, common), category_rows(configs, common)
    if held:
        out += ["", HELD_OUT_NOTE, text_table(HELD_OUT_HEADER, held)]
    if categories:
        out += ["", CATEGORY_NOTE, text_table(CATEGORY_HEADER, categories)]
    elif common and categories_missing(configs):
        out += ["", "word categories at this step: n/a (the members' per-line eval files hold none: written before "
                    "the daemon kept them)"]
    return out


# answers right (exact match): per configuration vs its step 0, and vs the baseline paired by seed and pair
XCI = "[95% CI, seeds x pairs]"
ANSWERS_HEADER = ["config", "set", "step", f"right at step 0 {XCI}", f"right at the end {XCI}", f"change {XCI}", "p"]
ANSWERS_NOTE = ("answers right (exact match of the greedy answer, every held-out pair with one; sets without answers "
                "have none, never 0): the share at step 0 and at the members' ends, crossed over seeds x pairs")
PAIRED_ANSWERS_HEADER = ["config vs baseline", "set", "at", f"right diff {XCI}", "p"]
PAIRED_ANSWERS_NOTE = "answers right vs the baseline, paired by seed and pair at the common step (like with like)"


def answers_rows(data: SweepReport) -> list[list[str]]:
    return [[a.config, a.set_name, ",".join(map(str, a.end_steps)), a.start.text(), a.end.text(), fmt_ci(a.change.value, a.change.lo, a.change.hi), _p(a.p_value)]
            for a in data.answers]


def paired_answers_rows(data: SweepReport) -> list[list[str]]:
    return [[f"{a.config} vs {a.baseline}", a.set_name, a.at, fmt_ci(a.diff.value, a.diff.lo, a.diff.hi), _p(a.p_value)]
            for a in data.answers_paired]


def answers_text(data: SweepReport) -> list[str]:
    out = []
    if data.answers:
        out += ["", ANSWERS_NOTE, text_table(ANSWERS_HEADER, answers_rows(data))]
    if data.answers_paired:
        out += ["", PAIRED_ANSWERS_NOTE, text_table(PAIRED_ANSWERS_HEADER, paired_answers_rows(data))]
    return out
