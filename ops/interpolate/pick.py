"""What `tatu interpolate` is asked before it scores anything: the alphas (`--alphas 0:1:0.1` or
`0,0.5,1`) and the pick rule (`--pick "largest alpha such that drift_hi < 0.08"`, parsed by the
sweeps' own rule grammar, tatu.sweep.plan.rule), and the pick itself over the measured path."""
from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

from tatu.exitcodes import BAD_CONFIG, TatuExit
from tatu.sweep.plan.rule import ALPHA, RULE, Rule, held_out_set, parse_rule

MAX_ALPHAS = 1001  # a typo such as 0:1:0.0001 would score 10,001 models
# the sweep's metrics an interpolation has no value for: it trains nothing, so nothing aborts or has evals over time
NOT_MEASURED = ("every_eval_drift", "every_eval_drift_hi", "aborted")


def _number(text: str, spec: str) -> Decimal:
    try:
        value = Decimal(text.strip())
    except InvalidOperation:
        raise TatuExit(BAD_CONFIG, f"--alphas {spec!r}: {text.strip()!r} is not a number") from None
    if not value.is_finite():
        raise TatuExit(BAD_CONFIG, f"--alphas {spec!r}: {text.strip()!r} is not a number")
    return value


def _walk(spec: str) -> list[Decimal]:
    start, stop, step = (_number(part, spec) for part in spec.split(":"))
    if step <= 0 or stop < start:
        raise TatuExit(BAD_CONFIG, f"--alphas {spec!r}: START:STOP:STEP needs STEP > 0 and STOP >= START")
    count = (stop - start) / step
    if count + 1 > MAX_ALPHAS:
        raise TatuExit(BAD_CONFIG, f"--alphas {spec!r}: {int(count) + 1} alphas, more than {MAX_ALPHAS}")
    if count != count.to_integral_value():  # decimal arithmetic: 0:1:0.1 is exactly 10 steps
        raise TatuExit(BAD_CONFIG, f"--alphas {spec!r}: STEP {step} does not reach STOP {stop} from START {start}")
    return [start + i * step for i in range(int(count) + 1)]


def parse_alphas(spec: str) -> list[float]:
    """`START:STOP:STEP` (both ends included, decimal steps: 0:1:0.1 gives 0.3, not
    0.30000000000000004) or `A,B,C`; each in [0, 1]. Sorted, without repeats, and always with 0:
    every change is paired against alpha 0, the seed itself."""
    parts = spec.split(":")
    if len(parts) == 3:
        values = _walk(spec)
    elif len(parts) == 1 and spec.strip():
        values = [_number(part, spec) for part in spec.split(",")]
    else:
        raise TatuExit(BAD_CONFIG, f"--alphas {spec!r}: expected START:STOP:STEP (0:1:0.1) or a list (0,0.5,1)")
    outside = [str(v) for v in values if not 0 <= v <= 1]
    if outside:
        raise TatuExit(BAD_CONFIG, f"--alphas {spec!r}: {', '.join(outside)} outside [0, 1] (0 is the seed, 1 the fine-tune)")
    return sorted({0.0, *(float(v) for v in values)})


@dataclass(frozen=True)
class Pick:
    """A parsed --pick rule and the run variables its thresholds may name (the fine-tune's config)."""
    rule: Rule
    variables: dict

    def conditions_text(self) -> str:
        return self.rule.text.split("such that", 1)[1].strip()


def parse_pick(text: str, held_out: tuple[str, ...], variables: dict, source: Path) -> Pick:
    """The rule, checked against what an interpolation measures: the alpha axis, metrics of sets the
    data dir has, thresholds that are numbers or variables recorded in `source`'s config."""
    match = RULE.match(text)
    if match and match.group(2) != ALPHA:
        raise TatuExit(BAD_CONFIG, f"--pick {text!r}: it chooses an alpha: write 'smallest|largest alpha such that ...'")
    rule = parse_rule(text, {ALPHA: ()}, Path("--pick"), where=repr(text))  # a SweepError (78) names what is wrong
    if rule.at != "end":
        raise TatuExit(BAD_CONFIG, f"--pick {text!r}: an interpolation has no common step; drop 'at the common step'")
    for cond in rule.conditions:
        if cond.metric in NOT_MEASURED:
            raise TatuExit(BAD_CONFIG, f"--pick {text!r}: {cond.metric} is a training run's; an interpolation measures "
                                       "drift, sftHeld_change and each held-out set's SET_change (with _lo, _hi)")
        named = held_out_set(cond.metric)
        if named is not None and named not in held_out:
            raise TatuExit(BAD_CONFIG, f"--pick {text!r}: {named} is not a held-out set of the data dir "
                                       f"(held-out sets: {', '.join(held_out) or 'none'})")
        if cond.value[0].isalpha() and cond.value not in variables:
            raise TatuExit(BAD_CONFIG, f"--pick {text!r}: {cond.value} is not recorded in {source}'s config; "
                                       "give the threshold as a number")
    return Pick(rule, variables)


@dataclass(frozen=True)
class Choice:
    """The pick over the path: the chosen alpha (None: none satisfies the rule) and, per alpha in
    the order judged, the conditions that failed there."""
    alpha: float | None
    failed: dict[float, list[str]]
    line: str


def choose(pick: Pick, metrics: dict[float, dict[str, float]]) -> Choice:
    """The smallest or largest alpha whose metrics satisfy every condition (Condition.holds, the
    sweep's own judgement)."""
    rule = pick.rule
    failed: dict[float, list[str]] = {}
    for alpha in sorted(metrics, reverse=rule.choose == "largest"):
        failed[alpha] = [f"{c.text()} (measured {metrics[alpha][c.metric]:+.2%})" for c in rule.conditions
                         if not c.holds(metrics[alpha][c.metric], pick.variables)]
        if not failed[alpha]:
            return Choice(alpha, failed, f"alpha={alpha:g}: the {rule.choose} alpha such that {pick.conditions_text()}")
    return Choice(None, failed, f"no alpha satisfies the rule ({rule.text})")
