"""`tatu sweep report NAME`: the closing table in the terminal, report.json, PNG plots, one HTML page.

Per configuration across seeds: drift and sftHeld change (the mean over seeds with a CI that
carries seed and line variance), the seed SD beside the mean within-run SE, the MDE across
seeds, aborted seeds, outlier seeds (leave-one-out t, shown, never dropped); paired by seed and
line against the baseline with Holm-adjusted p-values; all of it at the members' ends and again
at the common step (each row prints its step); the locked rule's verdict, where it judged, and
what would change it.
With a tune stage, its table comes first.
"""
from __future__ import annotations

import html
import json
import math
from pathlib import Path

from tatu.atomic import write_json_atomic
from tatu.formats import fmt_p_formula as _p, fmt_pct as _pct, fmt_share as _sd


def _ci(stats) -> str:
    return "n/a" if not stats else f"{_pct(stats['value'])} [{_pct(stats['lo'])},{_pct(stats['hi'])}]"


def _log_pct(x) -> str:
    return _pct(None if x is None else math.expm1(x))


def _step(c: dict, common: bool) -> str:
    """The step a row compares at: the common step, or the members' last eval steps."""
    if common:
        return str(c.get("common_step"))
    return ",".join(str(s) for s in c.get("end_steps", [])) or "-"


def config_rows(configs: list[dict], common: bool = False) -> list[list[str]]:
    rows = []
    for c in configs:
        where = c.get("stats_common") if common else c["stats"]
        if where is None:
            continue
        d, s = where["drift"], where["sftHeld"]
        results = c["results"]
        aborted = sum(r["state"] == "aborted" for r in results)
        diverged = sum(r["state"] == "diverged" for r in results)
        waiting = sum(r["state"] not in ("done", "aborted", "diverged") for r in results)
        outl = [f"s{o['seed']} (t={o['t']:+.1f})" for o in (d or {}).get("outliers", []) + (s or {}).get("outliers", [])]
        rows.append([c["key"] + (" *" if c.get("is_baseline") else ""), f"{(d or s or {}).get('n_seeds', 0)}/{len(results)}",
                     _step(c, common), _ci(d), _sd(d and d["seed_sd"]), _sd(d and d["within_se"]), _sd(d and d["mde"]), _ci(s),
                     _sd(s and s["seed_sd"]), _sd(s and s["within_se"]),
                     f"{aborted}" + (f" +{diverged} diverged" if diverged else "") + (f" ({waiting} not done)" if waiting else ""),
                     ", ".join(sorted(set(outl))) or "-"])
    return rows


CONFIG_HEADER = ["config", "seeds", "step", "drift [95% CI]", "seed SD", "within SE", "MDE", "sftHeld change [95% CI]",
                 "seed SD", "within SE", "aborted", "outlier seeds"]
OUTLIER_NOTE = ("outlier seeds: leave-one-out t beyond a Bonferroni cut (normal seeds: at most 4% of "
                "config-metrics flagged); no flag below 3 seeds")
PAIRED_HEADER = ["config vs baseline", "seeds", "step", "drift diff [95% CI]", "p", "p Holm", "sftHeld diff [95% CI]", "p", "p Holm"]


def paired_rows(configs: list[dict], common: bool = False) -> list[list[str]]:
    rows = []
    for c in configs:
        paired = c.get("paired_common" if common else "paired")
        if c.get("is_baseline") or not paired:
            continue
        d, s = paired.get("drift"), paired.get("sftHeld")

        def diff(p):
            return "n/a" if not p else f"{_log_pct(p['diff'])} [{_log_pct(p['lo'])},{_log_pct(p['hi'])}]"

        rows.append([c["key"], str((d or {}).get("n_seeds", 0)), _step(c, common), diff(d), _p(d and d["p_value"]), _p(d and d.get("p_holm")),
                     diff(s), _p(s and s["p_value"]), _p(s and s.get("p_holm"))])
    return rows


def tune_rows(tune: dict, tuned: dict | None) -> list[list[str]]:
    rows = []
    var = tune["var"]
    for c in tune["configs"]:
        s = c["stats"]["sftHeld"]
        chosen = tuned is not None and c["values"].get(var) == tuned["value"]
        states = ", ".join(sorted({r["state"] for r in c["results"]}))
        rows.append([f"{var}={c['values'].get(var)}" + (" <- chosen" if chosen else ""), f"{(s or {}).get('n_seeds', 0)}/{len(c['results'])}",
                     _ci(s), _sd(s and s["seed_sd"]), _ci(c["stats"]["drift"]), states])
    return rows


TUNE_HEADER = ["tune value", "seeds", "sftHeld change, dev half [95% CI]", "seed SD", "drift (shown, not used)", "states"]


def text_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows]
    return "\n".join(line.rstrip() for line in lines)


def closing_text(data: dict) -> str:
    out = [f"sweep {data['name']} (plan {data['plan_portable_hash']}): {data['question']}".rstrip(": ")]
    if data.get("tune"):
        out += ["", f"tune stage: {data['tune']['var']}, chosen on the dev half of sftHeld (never the ruler, never the judge half)",
                text_table(TUNE_HEADER, tune_rows(data["tune"], data.get("tuned")))]
        if not data.get("tuned"):
            out.append("(the tune stage has not finished: the comparison stage has not started)")
    if data.get("compare"):
        cmp = data["compare"]
        half = " (sftHeld: judge half)" if data.get("tune") else ""
        out += configs_legend(data.get("configs"), cmp["configs"])
        out += ["", f"comparison stage{half}; * = baseline; CIs carry seed and line variance (crossed: seeds x shared lines)",
                text_table(CONFIG_HEADER, config_rows(cmp["configs"])), OUTLIER_NOTE]
        held = [(c["key"], name, st) for c in cmp["configs"] for name, st in c["stats"].items()
                if name not in ("drift", "sftHeld")]
        if held:  # the held-out sets the rule names, per configuration over seeds
            out += ["", "held-out sets the rule names (change from the seed checkpoint to the end, over seeds)",
                    text_table(["config", "set", "change [95% CI]", "seed SD"],
                               [[key, name, _ci(st), _sd(st and st["seed_sd"])] for key, name, st in held])]
        out += _paired_text(cmp["configs"], common=False)
        out += _common_text(cmp["configs"])
        verdict = data["verdict"]
        judged = (f" (judged at step {verdict.get('at_step')}, the common step)" if verdict.get("at") == "common"
                  else " (judged at the end)")
        out += ["", ("VERDICT (locked rule): " if cmp["complete"] else "PROVISIONAL (members still running): ") + verdict["line"]
                + judged]
        for check in verdict["checks"]:
            if check["failed"]:
                out.append(f"  {verdict['axis']}={check['value']} fails " + "; ".join(f"{f['condition']} ({f['shown']})" for f in check["failed"]))
        out += [f"  what would change it: {note}" for note in verdict["would_change"]]
    return "\n".join(out)


def configs_legend(named: list | None, configs: list[dict]) -> list[str]:
    """What each named configuration sets and what trained in it; for axes alone, only when what
    trained differs between configurations (a TATU_TRAIN axis), so other tables read as before."""
    from tatu.sweep.configs import describe_configs

    if not named and len({c.get("trainable") for c in configs}) < 2:
        return []
    sets = describe_configs(dict(named or []))
    rows = [[c["key"], sets.get(c["values"].get("config"), "-"), c.get("trainable") or "n/a"] for c in configs]
    return ["", "configurations (each over [base]) and what trains in each (the daemon's line)",
            text_table(["config", "sets", "trains"], rows)]


def _paired_text(configs: list[dict], common: bool) -> list[str]:
    rows = paired_rows(configs, common)
    if not rows:
        return []
    where = "paired_common" if common else "paired"
    n = max(((c.get(where) or {}).get("drift") or {}).get("n_compared", 0) for c in configs)
    return ["", f"paired by seed and line vs the baseline (log-ratio differences; paired t over seeds; Holm over {n} comparisons)",
            text_table(PAIRED_HEADER, rows)]


def _common_text(configs: list[dict]) -> list[str]:
    """The same comparisons at the last eval step every member reached (the ends may differ)."""
    if not configs:
        return []
    step, missing = configs[0].get("common_step"), configs[0].get("common_missing")
    if missing:
        return ["", f"at the common step: n/a ({missing})"]
    return ["", f"at step {step}, the last eval step every member reached (the daemon's per-line scores there)",
            text_table(CONFIG_HEADER, config_rows(configs, common=True))] + _paired_text(configs, common=True)


def _plots(data: dict, out_dir: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    cmp = data.get("compare")
    if not cmp:
        return made
    axis = data["verdict"]["axis"]
    configs = [c for c in cmp["configs"] if c["stats"]["drift"]]
    if not configs:
        return made
    fig, ax = plt.subplots(figsize=(6, 4))
    try:
        xs = [float(c["values"][axis]) for c in configs]
    except ValueError:
        xs = list(range(len(configs)))
    for x, c in zip(xs, configs):
        d = c["stats"]["drift"]
        per_seed = list(d["per_seed"].values())
        ax.scatter([x] * len(per_seed), [v * 100 for v in per_seed], color="0.6", s=14, zorder=2)
        ax.errorbar([x], [d["value"] * 100], yerr=[[(d["value"] - d["lo"]) * 100], [(d["hi"] - d["value"]) * 100]],
                    fmt="o", color="C0", capsize=4, zorder=3)
    limit = configs[0]["effective"].get("MIX_FORGET_LIMIT")
    if limit is not None:
        ax.axhline(limit * 100, color="C3", linestyle="--", label=f"MIX_FORGET_LIMIT {limit * 100:.0f}%")
        ax.legend(loc="best")
    ax.set_xticks(xs, [c["values"][axis] for c in configs])
    ax.set_xlabel(axis)
    ax.set_ylabel("enRuler drift at the end (%)")
    ax.set_title(f"{data['name']}: drift vs {axis} (grey: seeds; blue: mean, 95% CI)")
    fig.tight_layout()
    fig.savefig(out_dir / "drift_vs_axis.png", dpi=110)
    plt.close(fig)
    made.append("drift_vs_axis.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    for i, c in enumerate(configs):
        d, s = c["stats"]["drift"], c["stats"]["sftHeld"]
        if not s:
            continue
        seeds = [k for k in d["per_seed"] if k in s["per_seed"]]
        ax.scatter([d["per_seed"][k] * 100 for k in seeds], [s["per_seed"][k] * 100 for k in seeds], color=f"C{i}",
                   label=c["key"], s=22)
    ax.set_xlabel("enRuler drift (%)")
    ax.set_ylabel("sftHeld change (%)")
    ax.set_title("the trade-off: one point per member")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / "tradeoff.png", dpi=110)
    plt.close(fig)
    made.append("tradeoff.png")
    return made


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def write_report(sweep_dir: Path, out_dir: Path | None = None) -> tuple[dict, str, Path]:
    from tatu.sweep.analysis import analyze

    data = analyze(sweep_dir)
    out_dir = Path(out_dir or Path(sweep_dir) / "report")
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out_dir / "report.json", data, sort_keys=True)
    text = closing_text(data)
    plots = _plots(data, out_dir)
    parts = [f"<h1>sweep {html.escape(data['name'])}</h1><p>{html.escape(data['question'])}</p>",
             f"<p>locked rule: <code>{html.escape(data['rule'])}</code> (plan {data['plan_portable_hash']}; "
             f"with this checkout's absolute paths {data['plan_hash']})</p>"]
    if data.get("tune"):
        parts += ["<h2>tune stage</h2>", _html_table(TUNE_HEADER, tune_rows(data["tune"], data.get("tuned")))]
    if data.get("compare"):
        parts += ["<h2>comparison stage</h2>", _html_table(CONFIG_HEADER, config_rows(data["compare"]["configs"])),
                  "<h2>paired by seed vs the baseline (Holm)</h2>", _html_table(PAIRED_HEADER, paired_rows(data["compare"]["configs"])),
                  "<h2>at the common step</h2>", _html_table(CONFIG_HEADER, config_rows(data["compare"]["configs"], common=True)),
                  _html_table(PAIRED_HEADER, paired_rows(data["compare"]["configs"], common=True))]
        parts.append(f"<h2>verdict</h2><pre>{html.escape(text.split(chr(10) + chr(10))[-1])}</pre>")
    parts += [f'<p><img src="{p}" alt="{p}"></p>' for p in plots]
    page = out_dir / "index.html"
    page.write_text("<!doctype html><meta charset='utf-8'><title>tatu sweep</title>"
                    "<style>table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;font:13px monospace}</style>"
                    + "".join(parts), encoding="utf-8")
    return data, text, page


def dumps(data: dict) -> str:
    return json.dumps(data, sort_keys=True)
