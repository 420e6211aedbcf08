"""One-sided error rates of the crossed CI (evals/seeds/stats.py) when the per-line changes are not
normal: each bound's miss rate measured separately, today's method against the candidates, on
simulated crossed sweeps (evals/seeds/simulate.py: seed effect + shared line effect + seed x line,
each part of its own shape) in the closed form the sequential bench uses (the two-way ANOVA
crossed_ci estimates; tests/evals/test_sequential_sim.py checks the two agree).

One line per cell (lines, seeds, the lines' share of Var(mean), which part is skewed and how):

    L=100 S=3 share=0.90 line=gamma4 today 0.054/0.007 t 0.054/0.007 hall 0.028/0.025 adopted 0.028/0.007 ...

each method's upper/lower miss: the share of sweeps whose upper bound is below the truth (a false
pass at the threshold) / whose lower bound is above it. Methods:
    today     tatu before issue 45: the seed part floored at 0 and dropped from Satterthwaite's df
              (the interaction's (S-1)(L-1) df in its place), mean +- t_df SE;
    t         the seed mean square unbiased at S - 1 df (evals/seeds/power.CrossedParts), mean +- t_df SE;
    hall      Hall's (1992) transformation with the shared lines' third cumulant, both bounds moved;
    hall_all  the same with the seeds' third cumulant added, each bound only moved outwards (the
              seeds' skewness is not estimable from 3-10 seeds: it widens);
    out1, out1.25, out2
              `hall` with each bound only moved outwards, the estimated skewness at 1, 1.25 and 2
              times its value;
    adopted   what tatu does: the same at 1.5 times (evals/seeds/skew.py SKEW_INFLATION), through
              the library's own fixed_pass / fixed_fail on the ANOVA estimates;
and with --bootstrap (slow) two bootstrap candidates on the crossed design: a bootstrap-t resampling
seeds and one shared draw of lines (its SE re-estimated on each replicate), and a BCa interval on
the lines' replicates (seeds fixed) scaled to the crossed SE.

    nice -n 10 .venv/bin/python bench/one_sided.py --reps 4000

The last lines give, per method, the largest miss on each side over the cells inside the range the
adopted method is held to (OUTSIDE below) and over all cells, with the Monte-Carlo SE of a 2.5% rate,
and how many bounds in the range miss more than 2.5% + 2 SEs (a method exactly at 2.5% would put 2.3%
of them there by chance).
"""
from __future__ import annotations

import argparse
import math
from statistics import NormalDist

import numpy as np
from scipy import stats as sp

from tatu.evals.seeds.sequential import fixed_fail, fixed_pass
from tatu.evals.seeds.simulate import Effects, Shape, anova_estimates, crossed_data

ALPHA = 0.05
N = Shape()
SHAPES = {
    "normal": Effects(),
    "line=gamma1": Effects(line=Shape("gamma", 1.0)),
    "line=gamma2": Effects(line=Shape("gamma", 2.0)),
    "line=gamma4": Effects(line=Shape("gamma", 4.0)),
    "line=lognormal1": Effects(line=Shape("lognormal", 1.0)),
    "line=t3": Effects(line=Shape("t", 3.0)),
    "interaction=gamma4": Effects(interaction=Shape("gamma", 4.0)),
    "interaction=t3": Effects(interaction=Shape("t", 3.0)),
    "seed=gamma0.5": Effects(seed=Shape("gamma", 0.5)),
    "seed=gamma1": Effects(seed=Shape("gamma", 1.0)),
    "seed=gamma2": Effects(seed=Shape("gamma", 2.0)),
    "seed=t3": Effects(seed=Shape("t", 3.0)),
    "all=gamma2": Effects(Shape("gamma", 2.0), Shape("gamma", 2.0), Shape("gamma", 2.0)),
}
# The range the adopted interval is held to (docs/sweeps.md): shared-line skewness up to 4 at any
# share (lognormal lines, skewness 6.2, where they are at most half of the variance), symmetric heavy
# tails (t3) in any part, seed x line skewness up to 4, and symmetric seed effects: the seeds' own
# skewness is not estimable from 3-10 seeds, and even 0.5 of it moved the upper miss to 2.9-3.2%.
# Outside it, measured and said.
OUTSIDE = {("seed=gamma0.5", None), ("seed=gamma1", None), ("seed=gamma2", None), ("all=gamma2", None),
           ("line=lognormal1", 0.9)}


def in_range(shape: str, share: float) -> bool:
    return (shape, share) not in OUTSIDE and (shape, None) not in OUTSIDE


def lines_for_share(share: float, n_seeds: int) -> float:
    """The simulator's `lines` (sigma_b^2 / L in seed variances) whose part of Var(mean at n_seeds) is `share`."""
    return share / (n_seeds * (1.0 - share))


def _anova(y: np.ndarray) -> dict:
    """Vectorized two-way ANOVA of (reps, seeds, lines): the mean squares of the mean and the k3s."""
    _, n_s, n_l = y.shape
    grand, rows, cols = y.mean(axis=(1, 2)), y.mean(axis=2), y.mean(axis=1)
    cells = n_s * n_l
    ms_s = n_l * ((rows - grand[:, None]) ** 2).sum(axis=1) / (n_s - 1) / cells
    ms_l = n_s * ((cols - grand[:, None]) ** 2).sum(axis=1) / (n_l - 1) / cells
    resid = y - rows[:, :, None] - cols[:, None, :] + grand[:, None, None]
    ms_e = (resid ** 2).sum(axis=(1, 2)) / ((n_s - 1) * (n_l - 1)) / cells

    def k3(x):
        n = x.shape[1]
        return ((x - x.mean(axis=1, keepdims=True)) ** 3).sum(axis=1) * n / ((n - 1) * (n - 2))
    return {"grand": grand, "ms_s": ms_s, "ms_l": ms_l, "ms_e": ms_e, "S": n_s, "L": n_l,
            "k3_lines": k3(cols) / n_l ** 2, "k3_seeds": k3(rows) / n_s ** 2 if n_s > 2 else 0.0 * grand}


def _satterthwaite(a: dict, old: bool) -> tuple[np.ndarray, np.ndarray]:
    """(variance, df) of the mean: today's (old) or the adopted one (CrossedParts)."""
    n_s, n_l = a["S"], a["L"]
    ms_s, ms_l, ms_e = a["ms_s"], a["ms_l"], a["ms_e"]
    line_part = np.maximum(0.0, ms_l - ms_e)
    c_line = (line_part > 0).astype(float)
    if old:
        seed_part = np.maximum(0.0, ms_s - ms_e)
        c_seed = (seed_part > 0).astype(float)
        variance = seed_part + line_part + ms_e
        seed_term = seed_part + ms_e
    else:
        c_seed = np.ones_like(ms_s)
        variance = ms_s + line_part
        seed_term = np.maximum(ms_s, ms_e)
    total = c_seed * seed_term + c_line * (line_part + ms_e) + (1 - c_seed - c_line) * ms_e
    spread = ((c_seed * seed_term) ** 2 / (n_s - 1) + (c_line * (line_part + ms_e)) ** 2 / (n_l - 1)
              + ((1 - c_seed - c_line) * ms_e) ** 2 / ((n_s - 1) * (n_l - 1)))
    return variance, total ** 2 / spread


def _hall_inverse(u, gamma):
    small = np.abs(gamma) < 1e-12
    with np.errstate(divide="ignore", invalid="ignore"):
        out = 3.0 / gamma * (np.cbrt(1.0 + gamma * (u - gamma / 6.0)) - 1.0)
    return np.where(small, u, out)


def _misses(lo, hi, truth: float) -> tuple[float, float]:
    return float(np.mean(hi < truth)), float(np.mean(lo > truth))


def closed_form_methods(y: np.ndarray, truth: float) -> dict[str, tuple[float, float]]:
    a = _anova(y)
    out = {}
    for name, old in (("today", True), ("t", False)):
        variance, df = _satterthwaite(a, old)
        half = sp.t.ppf(1 - ALPHA / 2, df) * np.sqrt(variance)
        out[name] = _misses(a["grand"] - half, a["grand"] + half, truth)
    variance, df = _satterthwaite(a, False)
    q, se = sp.t.ppf(1 - ALPHA / 2, df), np.sqrt(variance)
    for name, third in (("hall", a["k3_lines"]), ("hall_all", a["k3_lines"] + a["k3_seeds"]),
                        ("out1", a["k3_lines"]), ("out1.25", 1.25 * a["k3_lines"]), ("out2", 2 * a["k3_lines"])):
        gamma = third / variance ** 1.5
        if name == "hall":
            lo, hi = a["grand"] - _hall_inverse(q, gamma) * se, a["grand"] - _hall_inverse(-q, gamma) * se
        else:  # moved outwards only, as the adopted one
            lo = a["grand"] - np.maximum(q, _hall_inverse(q, gamma)) * se
            hi = a["grand"] + np.maximum(q, -_hall_inverse(-q, gamma)) * se
        out[name] = _misses(lo, hi, truth)
    estimates = anova_estimates(y, y.shape[1])
    out["adopted"] = (float(np.mean([fixed_pass(e, truth) for e in estimates])),
                      float(np.mean([fixed_fail(e, truth) for e in estimates])))
    return out


def bootstrap_methods(y: np.ndarray, truth: float, resamples: int, rng: np.random.Generator) -> dict:
    """The bootstrap candidates, replicate by replicate (slow)."""
    z = NormalDist()
    reps, n_s, n_l = y.shape
    a = _anova(y)
    variance, df = _satterthwaite(a, False)
    boot_lo, boot_hi, bca_lo, bca_hi = (np.empty(reps) for _ in range(4))
    for r in range(reps):
        se, grand = math.sqrt(variance[r]), a["grand"][r]
        q = sp.t.ppf(1 - ALPHA / 2, df[r])
        lines = rng.integers(0, n_l, (resamples, n_l))
        seeds = rng.integers(0, n_s, (resamples, n_s))
        block = np.take_along_axis(y[r][:, lines].transpose(1, 0, 2), seeds[:, :, None], axis=1)
        star = _anova(block)
        star_var, _ = _satterthwaite(star, False)
        ok = star_var > 0
        t_star = (star["grand"][ok] - grand) / np.sqrt(star_var[ok])
        t_lo, t_hi = np.quantile(t_star, [ALPHA / 2, 1 - ALPHA / 2])
        boot_lo[r], boot_hi[r] = grand - t_hi * se, grand - t_lo * se
        # BCa on the lines' replicates (seeds fixed), standardized and put on the crossed SE at t_df
        cols = y[r].mean(axis=0)
        line_star = cols[lines].mean(axis=1)
        sd = line_star.std(ddof=1)
        below = float(np.mean(line_star < cols.mean()))
        z0 = z.inv_cdf(below) if 0 < below < 1 else 0.0
        centred = cols - cols.mean()
        accel = (centred ** 3).sum() / (6 * ((centred ** 2).sum()) ** 1.5) if centred.any() else 0.0
        zq = z.inv_cdf(1 - ALPHA / 2)
        ends = []
        for zz in (-zq, zq):
            level = z.cdf(z0 + (z0 + zz) / (1 - accel * (z0 + zz)))
            ends.append((np.quantile(line_star, level) - cols.mean()) / sd * q / zq if sd > 0 else zz * q / zq)
        bca_lo[r], bca_hi[r] = grand + ends[0] * se, grand + ends[1] * se
    return {"bootstrap_t": _misses(boot_lo, boot_hi, truth), "bca_lines": _misses(bca_lo, bca_hi, truth)}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lines", type=int, action="append", help="line counts (default 100 and 166)")
    parser.add_argument("--seeds", type=int, action="append", help="seed counts (default 3, 5, 10)")
    parser.add_argument("--shape", action="append", choices=sorted(SHAPES), help="only these shapes")
    parser.add_argument("--seed-share", type=float, default=0.7,
                        help="sigma_a^2 of one seed's variance (the rest its seed x line noise; default %(default)s)")
    parser.add_argument("--bootstrap", type=int, default=0, metavar="RESAMPLES",
                        help="also the bootstrap candidates, at this many resamples (slow)")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    worst: dict[str, list[float]] = {}
    worst_in: dict[str, list[float]] = {}
    over: dict[str, int] = {}
    sides = 0
    bar = 0.025 + 2 * math.sqrt(0.025 * 0.975 / args.reps)
    for n_lines in args.lines or [100, 166]:
        for n_seeds in args.seeds or [3, 5, 10]:
            for share in (0.05, 0.5, 0.9):
                for name in args.shape or list(SHAPES):
                    y = crossed_data(rng, args.reps, n_seeds, 0.0, lines_for_share(share, n_seeds), n_lines, SHAPES[name],
                                     args.seed_share)
                    got = closed_form_methods(y, 0.0)
                    if args.bootstrap:
                        got.update(bootstrap_methods(y, 0.0, args.bootstrap, rng))
                    sides += 2 * in_range(name, share)
                    for method, (up, down) in got.items():
                        over[method] = over.get(method, 0) + in_range(name, share) * ((up > bar) + (down > bar))
                        for table, keep in ((worst, True), (worst_in, in_range(name, share))):
                            if keep:
                                cell = table.setdefault(method, [0.0, 0.0])
                                cell[0], cell[1] = max(cell[0], up), max(cell[1], down)
                    print(f"L={n_lines} S={n_seeds} share={share:.2f} {name:18s} "
                          + " ".join(f"{m} {u:.3f}/{d:.3f}" for m, (u, d) in got.items())
                          + ("" if in_range(name, share) else "  (outside the range)"), flush=True)
    se = math.sqrt(0.025 * 0.975 / args.reps)
    print(f"largest upper/lower miss over the cells in the range (a 2.5% rate's MC SE {se:.4f}; "
          f"goal <= {0.025 + 2 * se:.3f}): " + " ".join(f"{m} {u:.3f}/{d:.3f}" for m, (u, d) in worst_in.items()))
    print("largest upper/lower miss over every cell: " + " ".join(f"{m} {u:.3f}/{d:.3f}" for m, (u, d) in worst.items()))
    # a method exactly at 2.5% on every side would put 2.3% of them over the bar by chance alone
    print(f"bounds over {bar:.4f} among the {sides} in the range (exactly 2.5% everywhere: {0.0228 * sides:.0f} "
          "by chance): " + " ".join(f"{m} {n}" for m, n in over.items()))


if __name__ == "__main__":
    main()
