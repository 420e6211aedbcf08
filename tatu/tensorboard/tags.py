"""What TensorBoard shows of each events.jsonl record: its scalars and texts, by tag.

The records are the daemon's own (daemon/logs.py writes them; docs/metrics.md defines their
numbers), so a curve in TensorBoard is events.jsonl's numbers and nothing computed here. The tags
and what each record gives: docs/operations.md#tensorboard. A value that is missing, not a number
or not finite (JSON "inf") has no point: a curve never shows a number events.jsonl does not hold.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Scalar:
    tag: str
    step: int
    value: float


@dataclass(frozen=True)
class Text:
    tag: str
    step: int
    text: str


# step record field -> tag
STEP_TAGS = {"loss": "train/loss", "lr": "train/lr", "grad_norm": "train/grad_norm",
             "tokens_per_s": "train/tokens_per_s", "replay_fraction": "train/replay_fraction",
             # the retention terms' values (daemon/retention/, docs/forgetting.md), in the records of runs that have them
             "penalty": "train/penalty", "distill": "train/distill",
             "grad_norm_data": "train/grad_norm_data", "grad_norm_penalty": "train/grad_norm_penalty"}
BOUNDS = ("value", "lo", "hi")  # a change's estimate and its CI: three tags, so a band can be drawn


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value


def _points(step: int, pairs) -> list[Scalar]:
    out = []
    for tag, value in pairs:
        number = _number(value)
        if number is not None:
            out.append(Scalar(tag, step, number))
    return out


def _with_bounds(prefix: str, change: dict | None) -> list[tuple[str, object]]:
    return [(f"{prefix}/{key}", change.get(key)) for key in BOUNDS] if isinstance(change, dict) else []


def step_scalars(record: dict) -> list[Scalar]:
    return _points(record["step"], ((tag, record.get(field)) for field, tag in STEP_TAGS.items()))


def eval_scalars(record: dict) -> list[Scalar]:
    pairs: list[tuple[str, object]] = []
    for name, summary in (record.get("sets") or {}).items():
        pairs += [(f"eval/{name}/ppl", summary.get("ppl")), (f"eval/{name}/bpc", summary.get("bpc"))]
    pairs += _with_bounds("drift", record.get("drift"))
    pairs += _with_bounds("drift_tronco", record.get("drift_tronco"))
    for name, change in (record.get("changes") or {}).items():
        pairs += _with_bounds(f"change/{name}", change)
    for name, task in (record.get("tasks") or {}).items():
        pairs += [(f"task/{name}/{key}", (task.get(key) or {}).get("value")) for key in ("acc", "acc_norm")]
    for name, answer in (record.get("answers") or {}).items():  # answers right: the rate and its Wilson band
        if isinstance(answer, dict):
            pairs += [(f"exact/{name}/value", answer.get("rate")), (f"exact/{name}/lo", answer.get("lo")),
                      (f"exact/{name}/hi", answer.get("hi"))]
    forecast = record.get("forecast")
    if isinstance(forecast, dict):  # drift forecast at the last step, made at this eval: its value and interval
        pairs += [(f"forecast/drift_at_end/{key}", forecast.get(key)) for key in BOUNDS]
        crossing = forecast.get("crossing") or {}
        pairs.append(("forecast/crossing_step", crossing.get("step")))  # no point: not before the end
    return _points(record["step"], pairs)


def scalars(record: dict) -> list[Scalar]:
    """The record's points (none for a record kind without numbers to plot)."""
    kind = record.get("event")
    if kind == "step":
        return step_scalars(record)
    if kind == "eval":
        return eval_scalars(record)
    return []


def config_text(record: dict) -> str:
    """The configuration as the run printed it at its start (`NAME = VALUE [SOURCE]`), as a
    Markdown code block (indented four spaces) so TensorBoard keeps the columns."""
    origins = record.get("origins") or {}
    config = record.get("config") or {}
    width = max((len(name) for name in config), default=0)
    return "\n".join(f"    {name:<{width}} = {value} [{origins.get(name, 'default')}]" for name, value in config.items())


def texts(record: dict) -> list[Text]:
    kind, step = record.get("event"), record.get("step")
    if not isinstance(step, int):
        return []
    if kind == "config":
        return [Text("config", step, config_text(record))]
    if kind == "verdict" and record.get("line"):
        return [Text("verdict", step, record["line"])]
    if kind == "abort" and record.get("reason"):
        return [Text("abort", step, str(record["reason"]))]
    return []
