"""TensorBoard's files read back with TensorBoard's own reader (EventAccumulator), for the tests of
tatu.tensorboard, the daemon's sink, the sweep's HParams sessions and `tatu tensorboard`.

What a reader sees is what the tests assert on: every point of every tag, duplicates included
(a (tag, step) written twice reads back twice), and the HParams session records."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from strict import cannot_run


def require_tensorboard() -> None:
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        cannot_run("the tensorboard package is not installed (the project's [dev] extra installs it)")


@dataclass
class ReadBack:
    scalars: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # tag -> [(step, value)] in file order
    texts: dict[str, list[tuple[int, str]]] = field(default_factory=dict)  # "config", "verdict", ...
    hparams: dict | None = None  # the session's hparams (name -> value), when the dir holds a session
    session_ended: bool = False

    def points(self) -> set[tuple[str, int]]:
        return {(tag, step) for tag, points in self.scalars.items() for step, _ in points}


def read_back(log_dir: Path) -> ReadBack:
    """Every point under `log_dir` (its event files, not its subdirs)."""
    require_tensorboard()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import metadata
    from tensorboard.util import tensor_util

    acc = EventAccumulator(str(log_dir), size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    out = ReadBack()
    assert not acc.Tags()["scalars"], "tatu writes float64 tensors, never float32 simple values"
    for tag in acc.Tags()["tensors"]:
        events = acc.Tensors(tag)
        values = [tensor_util.make_ndarray(e.tensor_proto) for e in events]
        if tag.endswith("/text_summary"):
            out.texts[tag.removesuffix("/text_summary")] = [(e.step, v.item().decode()) for e, v in zip(events, values)]
        else:
            out.scalars[tag] = [(e.step, v.item()) for e, v in zip(events, values)]
    try:
        content = acc.PluginTagToContent(metadata.PLUGIN_NAME)
    except KeyError:  # no HParams record in this dir
        content = {}
    if metadata.SESSION_START_INFO_TAG in content:
        start = metadata.parse_session_start_info_plugin_data(content[metadata.SESSION_START_INFO_TAG])
        out.hparams = {name: _value(v) for name, v in start.hparams.items()}
    out.session_ended = metadata.SESSION_END_INFO_TAG in content
    return out


def _value(proto):
    kind = proto.WhichOneof("kind")
    return {"number_value": proto.number_value, "string_value": proto.string_value,
            "bool_value": proto.bool_value}[kind]


def expected_points(events: list[dict]) -> dict[tuple[str, int], float]:
    """(tag, step) -> value, picked out of events.jsonl by hand: every number TensorBoard must show,
    from the first record of each step (a restart redoes the steps after its resume state; the
    first copy is the one kept)."""
    out: dict[tuple[str, int], float] = {}

    def put(tag: str, step: int, value) -> None:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out.setdefault((tag, step), value)

    for e in events:
        step = e.get("step")
        if e["event"] == "step":
            for field in ("loss", "lr", "grad_norm", "tokens_per_s", "replay_fraction", "penalty", "distill",
                          "grad_norm_data", "grad_norm_penalty"):
                put(f"train/{field}", step, e.get(field))
        if e["event"] == "eval":
            for name, numbers in e["sets"].items():
                put(f"eval/{name}/ppl", step, numbers["ppl"])
                put(f"eval/{name}/bpc", step, numbers["bpc"])
            bounded = {"drift": e["drift"], "drift_tronco": e["drift_tronco"],
                       **{f"change/{name}": c for name, c in e["changes"].items()}}
            for prefix, change in bounded.items():
                for key in ("value", "lo", "hi"):
                    put(f"{prefix}/{key}", step, (change or {}).get(key))
            for name, task in e["tasks"].items():
                put(f"task/{name}/acc", step, task["acc"]["value"])
                put(f"task/{name}/acc_norm", step, task["acc_norm"]["value"])
            for name, answer in (e.get("answers") or {}).items():  # answers right: the rate and its band
                put(f"exact/{name}/value", step, answer["rate"])
                put(f"exact/{name}/lo", step, answer["lo"])
                put(f"exact/{name}/hi", step, answer["hi"])
            forecast = e.get("forecast") or {}  # drift at the last step, from an SFT run's third eval on
            for key in ("value", "lo", "hi"):
                put(f"forecast/drift_at_end/{key}", step, forecast.get(key))
            put("forecast/crossing_step", step, (forecast.get("crossing") or {}).get("step"))
    return out


def assert_curves_equal_events(back: ReadBack, events: list[dict]) -> None:
    """Every point once, at its step, equal to events.jsonl's number to the last bit; no point more."""
    for tag, points in back.scalars.items():
        steps = [step for step, _ in points]
        assert steps == sorted(set(steps)), f"{tag}: steps {steps} (a step twice, or out of order)"
    got = {(tag, step): value for tag, points in back.scalars.items() for step, value in points}
    assert got == expected_points(events)


@dataclass
class SessionGroup:
    hparams: dict
    metrics: dict[str, float]  # metric tag -> the value the HParams view shows


def hparams_view(logdir: Path) -> dict[str, SessionGroup]:
    """What TensorBoard's HParams dashboard lists for `tensorboard --logdir LOGDIR`, from its own
    backend (the plugin's get_experiment and list_session_groups handlers over the data provider
    the server would use), in this process, without a server: session group name -> its values.
    Every hparam named by the experiment and every metric it finds must be shown for each group."""
    require_tensorboard()
    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.hparams import api_pb2, backend_context, get_experiment, list_session_groups

    mux = plugin_event_multiplexer.EventMultiplexer()
    mux.AddRunsFromDirectory(str(logdir))
    mux.Reload()
    tb = base_plugin.TBContext(logdir=str(logdir), multiplexer=mux,
                               data_provider=data_provider.MultiplexerDataProvider(mux, str(logdir)))
    ctx, backend = context.RequestContext(), backend_context.Context(tb)
    experiment = get_experiment.Handler(ctx, backend, "", api_pb2.GetExperimentRequest()).run()
    request = api_pb2.ListSessionGroupsRequest(start_index=0, slice_size=1000, allowed_statuses=[
        api_pb2.STATUS_UNKNOWN, api_pb2.STATUS_SUCCESS, api_pb2.STATUS_FAILURE, api_pb2.STATUS_RUNNING])
    groups = list_session_groups.Handler(ctx, backend, "", request).run().session_groups
    names = {h.name for h in experiment.hparam_infos}
    metrics = {m.name.tag for m in experiment.metric_infos}
    out = {}
    for group in groups:
        values = {name: _value(v) for name, v in group.hparams.items()}
        assert set(values) == names, (group.name, set(values) ^ names)
        out[group.name] = SessionGroup(values, {m.name.tag: m.value for m in group.metric_values})
        assert set(out[group.name].metrics) == metrics, (group.name, set(out[group.name].metrics) ^ metrics)
    return out
