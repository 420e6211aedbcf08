"""The report's generations section: every run's sample generations at the last eval that
produced them, as numbers (accuracy, invented words: one table, a row per run) and as text (one
table, a row per prompt, one column per run's output, so each prompt is written once and the runs'
answers to it side by side). The model's outputs carry class "generated": quoted, not the page's words."""
from __future__ import annotations

from tatu.ops.report.cells import cell, row
from tatu.ops.report.runs import RunRecord
from tatu.pages.markup import esc, table, text_cell

HEADER = ["run", "step", "accuracy", "CI lo", "CI hi", "n", "invented-word rate", "rate CI lo", "rate CI hi",
          "invented", "words", "examples"]


def _numbers(run: RunRecord) -> str:
    record = run.last_generations
    step, gen = record.step, record.generations
    accuracy = gen.get("accuracy") or {}
    prefix = f"eval/{step}/generations"
    cells = (cell(step, "int", f"eval/{step}/step")
             + cell(accuracy.get("value"), "rate", f"{prefix}/accuracy/value")
             + cell(accuracy.get("lo"), "rate", f"{prefix}/accuracy/lo")
             + cell(accuracy.get("hi"), "rate", f"{prefix}/accuracy/hi")
             + cell(accuracy.get("n"), "int", f"{prefix}/accuracy/n"))
    invented = gen.get("invented")
    if invented:
        cells += (cell(invented.get("rate"), "rate", f"{prefix}/invented/rate")
                  + "".join(cell(invented[k], "rate", f"{prefix}/invented/{k}") if k in invented else "<td>n/a</td>"
                            for k in ("lo", "hi"))
                  + cell(invented.get("n_invented"), "int", f"{prefix}/invented/n_invented")
                  + cell(invented.get("n_words"), "int", f"{prefix}/invented/n_words")
                  + text_cell(", ".join(map(str, invented.get("examples") or []))))
    else:
        cells += '<td colspan="6">n/a (no dictionary)</td>'
    return row(text_cell(run.name) + cells, run.name)


def _samples(runs: list[RunRecord]) -> str:
    """A row per (prompt, reference), in the order the runs list them; a run that did not answer it: empty."""
    answers: dict[tuple[str, str], dict[str, str]] = {}
    for run in runs:
        for sample in run.last_generations.generations.get("samples") or []:
            asked = (str(sample.get("prompt", "")), str(sample.get("reference", "")))
            answers.setdefault(asked, {})[run.name] = str(sample.get("output", ""))
    rows = [row(text_cell(prompt) + text_cell(reference)
                + "".join(f'<td class="generated">{esc(said.get(run.name, ""))}</td>' for run in runs))
            for (prompt, reference), said in answers.items()]
    return table(["prompt", "reference"] + [f"{run.name} (step {run.last_generations.step})" for run in runs],
                 rows, "gen-samples")


def generations_section(runs: list[RunRecord]) -> str:
    with_samples = [run for run in runs if run.last_generations is not None]
    without = [run.name for run in runs if run.last_generations is None]
    parts = ["<h2>Generations at the last eval that produced them</h2>"]
    if with_samples:
        parts.append(table(HEADER, [_numbers(run) for run in with_samples], "gen-summary"))
        parts.append("<details><summary>Each prompt with its reference and every run's greedy output</summary>"
                     f'<div class="scroll">{_samples(with_samples)}</div></details>')
    if without:
        parts.append(f"<p>No generations in the events of {esc(', '.join(without))} "
                     "(TATU_GEN_PROMPTS=0, or no eval yet).</p>")
    return "\n".join(parts)
