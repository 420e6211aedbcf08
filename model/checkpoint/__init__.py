"""Checkpoints: what every caller imports (`from tatu.model.checkpoint import ...`).

The package is cut by concern, and nothing in it imports a format it can be handed:
- files.py (torch-free): CheckpointError (exit 65), which directory to read (resolve_checkpoint),
  the manifest and any file verified against it, and read_meta, a checkpoint's metadata verified
  without its weights (what the sweep and the run report read);
- contents.py: the Checkpoint a loader returns, the checks every format's reader makes (config, tokenizer, vocab, weights that fit), DirectoryFormat;
- directory.py: tatu's own directory, both ways: save_checkpoint (refusals, atomic write and
  swap) and load_directory (every byte verified against manifest.json);
- load.py: load_checkpoint, the one entry that reads any format (legacy .pt, a handed
  DirectoryFormat, tatu's directory).
"""
import importlib

# torch-free: a reader of a checkpoint's metadata (the sweep's coordinator) imports no torch through here
from tatu.model.checkpoint.files import CheckpointError, read_meta, resolve_checkpoint

# the rest is loaded when first asked for (PEP 562), so `import tatu.model.checkpoint.files` stays torch-free
_LAZY = {"TIED_KEYS": "contents", "Checkpoint": "contents", "DirectoryFormat": "contents",
         "load_model_state": "contents", "model_state_for_saving": "contents",
         "NonFiniteTensorError": "directory", "save_checkpoint": "directory", "load_checkpoint": "load"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f"tatu.model.checkpoint.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["TIED_KEYS", "Checkpoint", "CheckpointError", "DirectoryFormat", "NonFiniteTensorError", "load_checkpoint",
           "load_model_state", "model_state_for_saving", "read_meta", "resolve_checkpoint", "save_checkpoint"]
