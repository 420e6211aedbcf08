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
