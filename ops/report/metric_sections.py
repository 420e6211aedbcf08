"""The report's per-category and multiple-choice task sections (docs/metrics.md): each metric
at the last eval with its change vs step 0, a table per run, folded (`folded`): at 3 seeds x 2
configurations they are some 200 rows, below the answer, opened for the run a reader wants."""
from __future__ import annotations

from tatu.ops.report.cells import cell, row
from tatu.ops.report.runs import RunRecord
from tatu.pages.markup import esc, folded, table, text_cell


def categories_section(runs: list[RunRecord]) -> str:
    """Per-category (part-of-speech) perplexity and bpc of every set at the last eval, each with
    its paired change vs step 0 (docs/metrics.md); a run without tags says why."""
    tables, absent = [], {}
    header = ["set", "category", "step", "ppl", "bpc", "tokens", "change vs step 0", "CI lo", "CI hi", "p-value"]
    for run in runs:
        rows = []
        final = run.final_eval
        # an eval that says nothing of categories (written before they existed) has neither them nor a note
        if final is None or not (final.categories or final.categories_note):
            continue
        step, categories = final.step, final.categories
        if not categories:
            absent.setdefault(_why_absent(final.categories_note), []).append(run.name)
        for set_name, per in categories.items():
            for category, point in per.items():
                prefix, summary, change = f"eval/{step}/categories/{set_name}/{category}", point.summary, point.change
                cells = (cell(step, "int", f"eval/{step}/step") + cell(summary.ppl, "ppl", f"{prefix}/ppl", set_name)
                         + cell(summary.bpc, "bpc", f"{prefix}/bpc") + cell(summary.n_tokens, "int", f"{prefix}/n_tokens")
                         + cell(change.value if change else None, "pct", f"{prefix}/change/value")
                         + cell(change.lo if change else None, "pct", f"{prefix}/change/lo")
                         + cell(change.hi if change else None, "pct", f"{prefix}/change/hi")
                         + cell(change.p_value if change else None, "p", f"{prefix}/change/p_value"))
                rows.append(row(f"{text_cell(set_name)}{text_cell(category)}{cells}", run.name))
        if rows:
            tables.append(folded(f"{run.name}, step {final.step}: {len(rows)} rows",
                                 table(header, rows, f"categories-{esc(run.name)}")))
    lines = "".join(f'<p class="absent" id="categories-absent">Word categories: none for {esc(", ".join(names))} '
                    f"({esc(why)}; docs/metrics.md says how to get them).</p>" for why, names in absent.items())
    if not tables:
        return lines
    return ("<h2>Word categories at the last eval</h2>\n<p>Perplexity and bits per character on the tokens of each "
            "part of speech (Apertium's tags, built once at data build), paired with the run's step 0.</p>\n"
            + "\n".join(tables) + lines)


def _why_absent(note: str | None) -> str:
    """The reason in the daemon's note (tatu.data.tags.untagged_line), without its install hint:
    the page says it once, not once per run."""
    reason = (note or "no tags").removeprefix("no category metrics: ")
    return reason.split("; install the taggers", 1)[0]


def tasks_section(runs: list[RunRecord]) -> str:
    """acc and acc_norm of every multiple-choice task at the last eval, each with its Wilson CI
    and its exact McNemar test against step 0 (docs/metrics.md)."""
    tables = []
    header = ["task", "metric", "step", "accuracy", "CI lo", "CI hi", "change vs step 0", "p (McNemar)"]
    for run in runs:
        final, rows = run.final_eval, []
        for task, point in (final.tasks if final else {}).items():
            step = final.step
            for key in ("acc", "acc_norm"):
                metric, prefix = point[key], f"eval/{step}/tasks/{task}/{key}"
                change = metric.get("change") or {}
                cells = (cell(step, "int", f"eval/{step}/step") + cell(metric.get("value"), "rate", f"{prefix}/value")
                         + cell(metric.get("lo"), "rate", f"{prefix}/lo") + cell(metric.get("hi"), "rate", f"{prefix}/hi")
                         + cell(change.get("diff"), "pct", f"{prefix}/change/diff")
                         + cell(change.get("p_value"), "p", f"{prefix}/change/p_value"))
                rows.append(row(f"{text_cell(task)}{text_cell(key)}{cells}", run.name))
        if rows:
            tables.append(folded(f"{run.name}, step {final.step}: {len(final.tasks)} tasks",
                                 table(header, rows, f"tasks-{esc(run.name)}")))
    if not tables:
        return ""
    return ("<h2>Multiple-choice tasks at the last eval</h2>\n<p>Accuracy by log-likelihood (as lm-evaluation-harness "
            "scores multiple_choice), Wilson 95% CI, exact McNemar test vs the run's step 0 over the same items.</p>\n"
            + "\n".join(tables))
