"""TensorBoard event files from tatu's own records.

tags.py turns events.jsonl records into scalars and texts (pure, no tensorboard import);
writer.py writes them with torch.utils.tensorboard, each (tag, step) once, and never lets a
failure of its own reach the caller. The daemon feeds it live (daemon/tensorboard.py), the
sweep coordinator writes one HParams session per member (sweep/run/hparams.py), and
`tatu tensorboard` rebuilds both from the files a run or sweep already has (ops/tensorboard_cli.py).
"""
