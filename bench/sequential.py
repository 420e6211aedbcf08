"""The sequential design (evals/seeds/sequential.py) on simulated crossed sweeps, by tatu's own look
code (evals/seeds/simulate.py): one line per design and scenario,

    sequential obf scenario=mixed reps=20000 false_pass=0.034 (mc_se 0.0009) pass_at_minus1sd=0.78 runs_vs_fixed=0.59

false_pass: passes of configurations at or past the threshold (offset >= 0) over those
configurations, with its Monte-Carlo SE; pass_at_minus1sd: the pass rate of the configuration one
seed SD on the passing side (nan where the scenario has none); runs_vs_fixed: seeds run over the
fixed design's max_seeds x configurations. The fixed design (max_seeds, the 95% CI) and the naive
rule (a look per seed on the 95% CI, no spending) are printed beside them for comparison.

    nice -n 10 .venv/bin/python bench/sequential.py --reps 20000 [--record]

--record writes the at_threshold lines of the sequential designs it ran into
sweep/judge/measured_false_pass.txt (each in place of the line of the same design), where the
sequential verdict reads the false pass it quotes beside the design's own (sweep/judge/verdict.py).

With --min-seeds 2 the design pools the seed variance across the scenario's six configurations
(evals/seeds/simulate.py), labelled "pooled"; beside it the same design's looks on each
configuration's own seeds ("unpooled", 1 df at the first look) and the naive rule on the pooled CI.

--path real decides the same kind of data through what a sweep runs (per-line changes as run lines,
crossed_ci's bootstrap, estimate_of, look: slow, so by default only the at_threshold scenario and
the fixed design beside it), each line labelled "real" with the share of decisions the closed form
gives alike on the same data:

    nice -n 10 .venv/bin/python bench/sequential.py --path real --reps 1000 --max-seeds 6 --lines 166

--scenario NAME (repeatable) and --shape obf|pocock restrict what is run.
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

from tatu.evals.seeds.sequential import Design
from tatu.evals.seeds.simulate import N_LINES, SCENARIOS, run_scenario

MEASURED = Path(__file__).resolve().parents[1] / "sweep" / "judge" / "measured_false_pass.txt"


def line(label: str, scenario: str, summary) -> str:
    minus1 = "nan" if math.isnan(summary.pass_at_minus1sd) else f"{summary.pass_at_minus1sd:.2f}"
    agreement = "" if math.isnan(summary.agreement) else f" agrees_with_closed_form={summary.agreement:.3f}"
    return (f"{label} scenario={scenario} reps={summary.reps} false_pass={summary.false_pass:.3f} "
            f"(mc_se {summary.false_pass_se:.4f}) pass_at_minus1sd={minus1} runs_vs_fixed={summary.runs_vs_fixed:.2f}"
            f"{agreement}")


def record(lines: list[str], path: Path = MEASURED) -> None:
    """Each line in place of the file's line of the same design (its label, before " scenario="); a
    design the file lacks is appended. Comments and other designs' lines stay as they are."""
    new = {line.split(" scenario=")[0]: line for line in lines}
    kept = path.read_text(encoding="utf-8").splitlines()
    out = [new.pop(old.split(" scenario=")[0], old) if not old.startswith("#") else old for old in kept]
    path.write_text("\n".join(out + list(new.values())) + "\n", encoding="utf-8")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2000)
    parser.add_argument("--min-seeds", type=int, default=3)
    parser.add_argument("--max-seeds", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--path", choices=("closed", "real"), default="closed")
    parser.add_argument("--lines", type=int, default=N_LINES, help="lines per eval set (default %(default)s)")
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS),
                        help="run only this scenario (repeatable; default: all, or at_threshold with --path real)")
    parser.add_argument("--shape", action="append", choices=("obf", "pocock"), help="only this spending shape")
    parser.add_argument("--record", action="store_true", help=f"write the designs' at_threshold lines into {MEASURED}")
    args = parser.parse_args(argv)
    measured = []
    real = args.path == "real"
    pooled = Design("obf", args.min_seeds, args.max_seeds).pools_seed_variance
    tag = (" pooled" if pooled else "") + (" real" if real else "")
    names = args.scenario or (["at_threshold"] if real else list(SCENARIOS))
    shapes = args.shape or ["obf", "pocock"]
    if pooled:
        comparisons = ("unpooled", "fixed", "naive")
    else:
        comparisons = ("fixed",) if real else ("fixed", "naive")
    where = f" lines={args.lines} seeds={args.min_seeds}..{args.max_seeds}" if real or args.lines != N_LINES else ""

    def run(design, scenario, rule):
        return run_scenario(design, scenario, args.reps, args.seed, rule, path=args.path, n_lines=args.lines)

    for name in names:
        scenario = SCENARIOS[name]
        for shape in shapes:
            design = Design(shape, args.min_seeds, args.max_seeds)
            shown = line(f"sequential {shape}{tag}", scenario.name, run(design, scenario, "sequential")) + where
            print(shown, flush=True)
            if scenario.name == "at_threshold" and not real:
                measured.append(shown)
        design = Design("obf", args.min_seeds, args.max_seeds)
        for rule in comparisons:
            label = ("sequential obf unpooled" if rule == "unpooled" else
                     f"{rule}{tag if rule == 'naive' else (' real' if real else '')}")
            print(line(label, scenario.name, run(design, scenario, rule)) + where, flush=True)
    if args.record:
        record(measured)
        print(f"recorded in {MEASURED}: {len(measured)} lines", flush=True)


if __name__ == "__main__":
    main()
