"""Candidate df rules for the crossed CI (evals/seeds/stats.py) at few seeds: each bound's miss rate and
the upper half-width against today's, on simulated crossed sweeps in the closed form (the two-way
ANOVA's mean squares, vectorised; Hall's skew correction as evals/seeds/skew.py applies it). Rules:
    current   Satterthwaite's df from the estimated mean squares (the seed one at least the interaction's)
    uclP      the same with the seed mean square at its upper confidence limit k / chi2_P(k) x itself
              (P the lower-tail chi-square probability: ucl0.35 is the 65% limit)
    bothP     the smaller of current's df and uclP's (both0.35: what tatu adopted)
    capP      Satterthwaite's df, no more than S - 1 where the seeds' ucl could exceed the rest
    min       containment: df = S - 1 always
    ub        Satterthwaite with each squared mean square by its unbiased estimate
The regimes are tests/evals/test_seeds_crossed.py's (in one seed's variance units) and two more
(seed-dom166, seeds-half); --grid scans seed shares 0.7-0.99 x line shares 1-60% at --seeds.

    nice -n 10 .venv/bin/python bench/df_rules.py current,ucl0.5,ucl0.35,ucl0.25,ucl0.05,cap0.05,min,ub --reps 20000
    nice -n 10 .venv/bin/python bench/df_rules.py current,ucl0.5,ucl0.35,ucl0.25 --reps 20000 --grid --seeds 3

Each cell prints rule:upper/lower miss (! past 2.5% + 2 MC SEs) and w, the mean upper half-width over
the first rule's. About 10 s a run (Intel Xeon with AMX, 2 cores).
"""
from __future__ import annotations

import argparse
import math

import numpy as np
from scipy import stats as sp
from scipy.special import stdtrit

from tatu.evals.seeds.simulate import Effects, Shape, crossed_data
from tatu.evals.seeds.skew import SKEW_INFLATION

# (seed_share, lines, L, effects) from the test's regimes (sa, sb, se)
def regime(sa, sb, se, L, eff=Effects()):
    seedv = sa**2 + se**2 / L
    return (sa**2 / seedv if seedv else 0.0, (sb**2 / L) / seedv if seedv else 0.0, L, eff, seedv)
REG = {
    "seed-dom": regime(.10, .05, .05, 40),
    "line-dom": regime(.005, .5, .1, 40),
    "both": regime(.10, .4, .2, 40),
    "neither": regime(0.0, 0.0, .3, 40),
    "skewed": regime(.02, .5, .1, 166, Effects(line=Shape("gamma", 2.0))),
    "seed-dom166": regime(.10, .05, .05, 166),
    "seeds-half": regime(.10, .1, .05, 40),
}

def ms(y):
    S, L = y.shape[1], y.shape[2]
    sm, lm = y.mean(2), y.mean(1)
    g = sm.mean(1)
    r = y - sm[:, :, None] - lm[:, None, :] + g[:, None, None]
    inter = (r**2).sum((1, 2)) / ((S-1)*(L-1)) / (S*L)
    seed = sm.var(1, ddof=1) / S
    line = lm.var(1, ddof=1) / L
    c = lm - lm.mean(1, keepdims=True)
    k3 = (c**3).sum(1) * L / ((L-1)*(L-2)) / L**2
    return g, seed, line, inter, k3

def satt(terms, total):
    spread = sum(v**2 / d for v, d in terms)
    return total**2 / spread

def df_rule(rule, S, L, seed, line, inter):
    k = S - 1
    c_line = (line > inter).astype(float)
    seed_c = np.maximum(seed, inter)  # current: expected seed MS >= inter
    if rule == "current":
        s = seed_c
    elif rule.startswith("ucl") or rule.startswith("both"):  # both: the smaller df of the estimate and the ucl (adopted)
        p = float(rule[4:] if rule.startswith("both") else rule[3:])
        s = np.maximum(seed * k / sp.chi2.ppf(p, k), inter)
        if rule.startswith("both"):
            at = lambda m: satt([(m, k), (c_line*line, L-1), (c_line*inter, k*(L-1))], m + c_line*(line-inter))
            return np.minimum(at(s), at(seed_c))
    elif rule == "ub":  # each squared mean square by its unbiased estimate
        total = seed_c + c_line * (line - inter)
        K = [(seed_c, k), (c_line*line, L-1), (c_line*inter, k*(L-1))]
        num = total**2 - sum(2 * v**2 / (d + 2) for v, d in K)
        den = sum(v**2 / (d + 2) for v, d in K)
        return np.maximum(num / den, 1.0)
    elif rule == "min":
        return np.full(seed.shape, float(k))
    elif rule.startswith("cap"):  # df <= S-1 when the seed UCL is at least the rest
        p = float(rule[3:])
        sU = seed * k / sp.chi2.ppf(p, k)
        d = satt([(seed_c, k), (c_line*line, L-1), (c_line*inter, k*(L-1))], seed_c + c_line*(line-inter))
        return np.where(sU >= c_line*(line-inter), np.minimum(d, k), d)
    total = s + c_line * (line - inter)
    return satt([(s, k), (c_line*line, L-1), (c_line*inter, k*(L-1))], total)

def hall_inv(u, g):
    small = np.abs(g) < 1e-12
    gg = np.where(small, 1.0, g)
    x = 1 + gg * (u - gg / 6)
    v = 3 / gg * (np.cbrt(x) - 1)
    return np.where(small, u, v)

def run(name, S, rules, reps=20000, seed=1):
    share, lines, L, eff, _ = REG[name]
    rng = np.random.default_rng([seed, S, L, int(share*1000)])
    out = {r: [0, 0, 0.0] for r in rules}
    n = 0
    for start in range(0, reps, 2000):
        m = min(2000, reps - start)
        y = crossed_data(rng, m, S, 0.0, lines, L, eff, seed_share=share) if share + lines > 0 else \
            crossed_data(rng, m, S, 0.0, 0.0, L, eff, seed_share=0.0)
        g, seed_, line, inter, k3 = ms(y)
        var = seed_ + np.maximum(0, line - inter)
        se = np.sqrt(var)
        gam = SKEW_INFLATION * k3 / var**1.5
        for r in rules:
            df = df_rule(r, S, L, seed_, line, inter)
            q = stdtrit(df, 0.975)
            up = np.maximum(q, -hall_inv(-q, gam))
            lo = np.maximum(q, hall_inv(q, gam))
            out[r][0] += np.sum(g + up*se < 0)
            out[r][1] += np.sum(g - lo*se > 0)
            out[r][2] += np.sum(up*se)
        n += m
    return {r: (a/n, b/n, w/n) for r, (a, b, w) in out.items()}



def _show(label: str, res: dict, rules: list[str], bar: float) -> None:
    base = res[rules[0]][2]
    print(f"{label} " + " ".join(f"{r}:{u:.4f}/{l:.4f}{'!' if max(u, l) > bar else ' '}w{w / base:.2f}"
                                  for r, (u, l, w) in res.items()), flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rules", help="comma-separated: current, uclP, capP, min, ub")
    parser.add_argument("--reps", type=int, default=20000)
    parser.add_argument("--grid", action="store_true", help="seed share x line share instead of the regimes")
    parser.add_argument("--seeds", type=int, default=3, help="with --grid: the seed count")
    args = parser.parse_args(argv)
    rules = args.rules.split(",")
    bar = 0.025 + 2 * math.sqrt(0.025 * 0.975 / args.reps)
    print(f"reps {args.reps}: bar {bar:.4f}")
    if args.grid:
        for seed_share in (0.99, 0.9, 0.7):
            for share in (0.01, 0.03, 0.07, 0.15, 0.3, 0.6):
                REG["grid"] = (seed_share, share / (1 - share) / args.seeds, 40, Effects(), 1.0)
                _show(f"seed_share={seed_share} line_share={share:.2f} S={args.seeds}",
                      run("grid", args.seeds, rules, args.reps), rules, bar)
        return
    for name in [n for n in REG if n != "grid"]:
        for n_seeds in (3, 5, 10):
            _show(f"{name:12s} S={n_seeds:2d}", run(name, n_seeds, rules, args.reps), rules, bar)


if __name__ == "__main__":
    main()
