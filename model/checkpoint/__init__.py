"""Checkpoints: what every caller imports (`from tatu.model.checkpoint import ...`).

The package is cut by concern, and nothing in it imports a format it can be handed:
- contents.py: the Checkpoint a loader returns, CheckpointError (exit 65), the checks every
  format's reader makes (config, tokenizer, vocab, weights that fit), DirectoryFormat;
- directory.py: tatu's own directory, both ways: save_checkpoint (refusals, atomic write and
  swap) and load_directory (every byte verified against manifest.json);
- load.py: load_checkpoint, the one entry that reads any format (legacy .pt, a handed
  DirectoryFormat, tatu's directory).
"""
from tatu.model.checkpoint.contents import (TIED_KEYS, Checkpoint, CheckpointError, DirectoryFormat, load_model_state,
                                            model_state_for_saving)
from tatu.model.checkpoint.directory import NonFiniteTensorError, resolve_checkpoint, save_checkpoint
from tatu.model.checkpoint.load import load_checkpoint

__all__ = ["TIED_KEYS", "Checkpoint", "CheckpointError", "DirectoryFormat", "NonFiniteTensorError", "load_checkpoint",
           "load_model_state", "model_state_for_saving", "resolve_checkpoint", "save_checkpoint"]
