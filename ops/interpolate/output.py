"""What `tatu interpolate` shows and writes: the table, path.json (every number), path.png (the
path in tatu/pages' look) and, for a --pick, the chosen alpha's checkpoint."""
from __future__ import annotations

from pathlib import Path

from tatu.atomic import write_json_atomic
from tatu.formats import fmt_ci, fmt_pct, fmt_ppl
from tatu.model.checkpoint import save_checkpoint
from tatu.model.interpolation import interpolate_state, interpolated_config, plain_weights
from tatu.ops.interpolate.path import RULER, SFT_HELD, AlphaPoint, Change, Parent, held_out_names
from tatu.pages.figures import PlotFile, colour, new_axes, save

FORMAT = "tatu-interpolate-1"


def _ci(change: Change) -> str:
    return fmt_ci(change.value, change.lo, change.hi)


def table(points: list[AlphaPoint]) -> str:
    """One row per alpha: the sftHeld change and drift with their CIs, each held-out set's change,
    ptVal's perplexity (shown, not judged); every change against alpha 0."""
    held = held_out_names(points[0].results)
    header = f"{'alpha':>6}  {'sftHeld change [95% CI]':<30} {'drift [95% CI]':<30}"
    header += "".join(f" {name + ' change':>16}" for name in held)
    header += f" {'ptVal':>9}" if "ptVal" in points[0].results else ""
    rows = [header]
    for p in points:
        row = f"{p.alpha:>6g}  {_ci(p.changes[SFT_HELD]):<30} {_ci(p.changes[RULER]):<30}"
        row += "".join(f" {fmt_pct(p.changes[name].value):>16}" for name in held)
        row += f" {fmt_ppl(p.results['ptVal'].ppl, 'ptVal'):>9}" if "ptVal" in p.results else ""
        rows.append(row)
    return "\n".join(rows)


def payload(seed: Parent, finetuned: Parent, points: list[AlphaPoint], bootstrap: dict, choice: dict | None) -> dict:
    """path.json: the parents, the bootstrap, and per alpha every set's result (per-line sums
    included, so every CI can be recomputed) and its change vs alpha 0."""
    return {
        "format": FORMAT,
        "seed": {"path": str(seed.path), "sha256": seed.sha256},
        "finetuned": {"path": str(finetuned.path), "sha256": finetuned.sha256},
        "bootstrap": bootstrap,
        "pick": choice,
        "alphas": [{"alpha": p.alpha, "metrics": p.metrics(),
                    "changes": {name: c.to_json() for name, c in p.changes.items()},
                    "sets": {name: r.to_json() for name, r in p.results.items()}} for p in points],
    }


def plot(points: list[AlphaPoint], path: Path, chosen: float | None) -> PlotFile:
    """x = drift, y = learning (-sftHeld change: up is better), one point per alpha with both
    95% CIs as error bars, each labelled with its alpha; the picked alpha ringed."""
    fig, ax = new_axes()
    xs = [p.changes[RULER].value * 100 for p in points]
    ys = [-p.changes[SFT_HELD].value * 100 for p in points]
    xerr = [[(p.changes[RULER].value - p.changes[RULER].lo) * 100 for p in points],
            [(p.changes[RULER].hi - p.changes[RULER].value) * 100 for p in points]]
    # learning is -change: its CI flips, the upper end of the change is the lower end of learning
    yerr = [[(p.changes[SFT_HELD].hi - p.changes[SFT_HELD].value) * 100 for p in points],
            [(p.changes[SFT_HELD].value - p.changes[SFT_HELD].lo) * 100 for p in points]]
    ax.plot(xs, ys, color=colour(0), linewidth=1, alpha=0.5, zorder=1)
    ax.errorbar(xs, ys, xerr=xerr, yerr=yerr, fmt="o", color=colour(0), capsize=3, zorder=2,
                label="alpha (0 = seed, 1 = fine-tune), 95% CIs")
    for p, x, y in zip(points, xs, ys):
        ax.annotate(f"{p.alpha:g}", (x, y), textcoords="offset points", xytext=(5, 5), fontsize=7)
    if chosen is not None:
        i = [p.alpha for p in points].index(chosen)
        ax.plot([xs[i]], [ys[i]], marker="o", markersize=14, markerfacecolor="none", markeredgecolor=colour(1),
                linestyle="none", zorder=3, label=f"picked: alpha {chosen:g}")
    ax.axhline(0, color="0.6", linewidth=0.8)
    ax.axvline(0, color="0.6", linewidth=0.8)
    ax.set_xlabel("forgetting: enRuler drift vs alpha 0 (%)")
    ax.set_ylabel("learning: -(sftHeld change) vs alpha 0 (%)")
    ax.set_title("interpolation path: learning against forgetting")
    ax.grid(True, alpha=0.3)
    return save(fig, ax, path, "learning (-sftHeld change) against forgetting (drift), one point per alpha")


def write_report(report: Path, document: dict, points: list[AlphaPoint], chosen: float | None) -> None:
    report.mkdir(parents=True, exist_ok=True)
    write_json_atomic(report / "path.json", document)
    tmp = report / ".path.png.tmp"
    plot(points, tmp, chosen)
    tmp.rename(report / "path.png")  # a reader sees the old plot or the new one, never half of one
    print(f"wrote {report / 'path.json'} and {report / 'path.png'}")


def write_checkpoint(out: Path, seed: Parent, finetuned: Parent, alpha: float, provenance: dict) -> Path:
    """The chosen alpha as an ordinary tatu checkpoint (save_checkpoint: a temporary sibling
    renamed into place, every file in a sha256 manifest), its meta naming both parents and alpha.
    The fine-tune's trunk reference is carried, so a run seeded from it still has drift_tronco."""
    state = interpolate_state(plain_weights(seed.ckpt), plain_weights(finetuned.ckpt), alpha)
    said = (f"interpolated at alpha={alpha:g} between {seed.path.absolute()} (sha256 {seed.sha256[:12]}..) and "
            f"{finetuned.path.absolute()} (sha256 {finetuned.sha256[:12]}..)")
    meta = {"interpolation": {
        "alpha": alpha, "seed": {"path": str(seed.path.absolute()), "sha256": seed.sha256},
        "finetuned": {"path": str(finetuned.path.absolute()), "sha256": finetuned.sha256}, "said": said, **provenance}}
    if "trunk_reference" in finetuned.ckpt.meta:
        meta["trunk_reference"] = finetuned.ckpt.meta["trunk_reference"]
    return save_checkpoint(out, model_state=state, model_config=interpolated_config(seed.ckpt),
                           tokenizer=seed.ckpt.tokenizer, meta=meta)
