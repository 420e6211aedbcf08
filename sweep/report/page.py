"""The sweep report's HTML page, in the run report's look (tatu.pages): the question and its locked
rule first, then the verdict (wrapped to the page), what it says and the plots, then the same tables
as the closing text (sweep/report/tables.py)."""
from __future__ import annotations

from pathlib import Path

from tatu.pages.figures import PlotFile
from tatu.pages.markup import esc, figures, page, plain_table
from tatu.sweep.report import tables
from tatu.sweep.judge.records import ConfigResult
from tatu.sweep.judge.sweep_report import SweepReport


def _comparison(configs: list[ConfigResult]) -> list[str]:
    parts = ["<h2>Comparison stage</h2><p>* = baseline; CIs carry seed and line variance (crossed: seeds x shared "
             f"lines, not one run's CI over its lines). {esc(tables.OUTLIER_NOTE)}.</p>",
             plain_table(tables.CONFIG_HEADER, tables.config_rows(configs), "configs")]
    parts += _sets(configs, common=False)
    # like with like first: the paired table the closing output shows (at the common step where it exists)
    where, like = tables.closing_paired_rows(configs)
    if like:
        parts += [f"<h2>Paired by seed and line vs the baseline (Holm), {esc(where)}</h2>",
                  plain_table(tables.PAIRED_HEADER, like, "paired-like")]
    step, missing = (configs[0].common_step, configs[0].common_missing) if configs else (None, None)
    if missing:
        parts.append(f"<h2>At the common step</h2><p>n/a ({esc(missing)})</p>")
    elif configs:
        title = tables.common_title(configs)
        parts += [f"<h2>{esc(title[0].upper() + title[1:])}</h2>",
                  plain_table(tables.CONFIG_HEADER, tables.config_rows(configs, common=True), "configs-common")]
        parts += _sets(configs, common=True)
    paired = tables.paired_rows(configs)
    if paired and not missing and configs:  # the ends' table, beside the like-with-like one above
        unequal = any("unequal ends" in row[2] for row in paired)
        parts += ["<h2>Paired at the members' ends</h2>"
                  + (f"<p>{esc(tables.UNEQUAL_NOTE.removeprefix('; '))}.</p>" if unequal else ""),
                  plain_table(tables.PAIRED_HEADER, paired, "paired")]
    return parts


def _sets(configs: list[ConfigResult], common: bool) -> list[str]:
    """The held-out sets' and the word categories' changes vs step 0 (at the end, or the common step)."""
    parts, where = [], "-common" if common else ""
    held, categories = tables.held_out_rows(configs, common), tables.category_rows(configs, common)
    if held:
        parts += [f"<h3>Held-out sets</h3><p>{esc(tables.HELD_OUT_NOTE)}.</p>",
                  plain_table(tables.HELD_OUT_HEADER, held, f"held-out{where}")]
    if categories:
        parts += [f"<h3>Word categories</h3><p>{esc(tables.CATEGORY_NOTE)}.</p>",
                  plain_table(tables.CATEGORY_HEADER, categories, f"categories{where}")]
    elif common and tables.categories_missing(configs):
        parts.append("<p>Word categories at this step: n/a (the members' per-line eval files hold none: written "
                     "before the daemon kept them).</p>")
    return parts


def write_page(data: SweepReport, closing: str, plots: list[PlotFile], out_dir: Path) -> Path:
    """index.html in out_dir: the question and the locked rule, the verdict and the plots first, then
    every table of the closing text."""
    verdict = "\n".join(tables.verdict_lines(data.verdict, data.compare.complete)) if data.compare else None
    asked = [f'<p id="question">{esc(data.question)}</p>',
             f"<p>Locked rule: <code>{esc(data.rule)}</code> (plan {esc(data.plan_portable_hash)}; "
             f"with this checkout's absolute paths {esc(data.plan_hash)})</p>"]
    lead = asked + ([f'<pre class="verdict" id="verdict">{esc(verdict)}</pre>'] if verdict is not None else [])
    if data.compare and data.verdict:
        from tatu.sweep.report.prose import what_it_says  # one sentence per conclusion, from these numbers

        lead.append('<div id="what-it-says"><h2>What it says</h2>'
                    + "".join(f'<p data-states="{esc(s.states)}">{esc(s.text)}</p>' for s in what_it_says(data)) + "</div>")
    lead += [figures(plots, out_dir)] if plots else []
    sections = ['<section id="lead">\n' + "\n".join(lead) + "\n</section>"]
    if data.tune:
        sections += ["<h2>Tune stage</h2>", plain_table(tables.TUNE_HEADER, tables.tune_rows(data.tune, data.tuned), "tune")]
        if not data.tuned:
            sections.append(f"<p>{esc(tables.TUNE_PENDING)}</p>")
    if data.compare:
        configs = list(data.compare.configs)
        legend = tables.configs_rows(data.configs, configs)
        if legend:
            sections += [f"<h2>Configurations</h2><p>{esc(tables.CONFIGS_TITLE)}.</p>",
                         plain_table(tables.CONFIGS_HEADER, legend, "configurations")]
        sections += _comparison(configs)
        if data.answers:
            sections += [f"<h2>Answers right</h2><p>{esc(tables.ANSWERS_NOTE)}.</p>",
                         plain_table(tables.ANSWERS_HEADER, tables.answers_rows(data), "answers")]
        if data.answers_paired:
            sections += [f"<p>{esc(tables.PAIRED_ANSWERS_NOTE)}.</p>",
                         plain_table(tables.PAIRED_ANSWERS_HEADER, tables.paired_answers_rows(data), "answers-paired")]
        header, vs_parent = tables.vs_parent_table(data.compare.vs_parent)
        if vs_parent:
            sections += [f"<h2>Interpolated vs its parent</h2><p>{esc(tables.VS_PARENT_TITLE)}.</p>",
                         plain_table(header, vs_parent, "vs-parent")]
        power = tables.power_lines(data.seeds_for)
        if power:
            rows = [line.strip() for line in power[1:] if line.strip() != tables.FLOOR_NOTE]
            sections += [f"<h2>How many seeds are enough</h2><p>{esc(power[0])}.</p>",
                         '<ul id="seeds-for">' + "".join(f"<li>{esc(line)}</li>" for line in rows) + "</ul>"]
            if len(rows) < len(power) - 1:  # said once, under the rows it explains
                sections.append(f"<p>{esc(tables.FLOOR_NOTE)}</p>")
    index = Path(out_dir) / "index.html"
    index.write_text(page(f"sweep {data.name}", sections), encoding="utf-8")
    return index
