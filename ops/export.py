"""`tatu export CKPT --format hf OUT`: a checkpoint as a transformers GPT-2 directory;
`tatu export CKPT --format peft OUT`: a LoRA run's adapter as a PEFT directory over its exported base.

    tatu export runs/trunk/final --format hf exported/trunk
    python -c "from transformers import AutoModelForCausalLM, AutoTokenizer; \
               AutoModelForCausalLM.from_pretrained('exported/trunk'); AutoTokenizer.from_pretrained('exported/trunk')"

The conversion itself (tatu.model.hf) needs neither transformers nor lm-eval; loading the result
does. A checkpoint GPT-2 cannot express exactly is refused (exit 65) with the reason.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from tatu.exitcodes import BAD_CONFIG, BAD_DATA, TatuExit

FORMATS = ("hf", "peft")


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", type=Path, help="tatu checkpoint directory (or legacy .pt, or a GPT-2 dir)")
    parser.add_argument("--format", choices=FORMATS, default="hf", help="hf: transformers GPT2LMHeadModel + fast tokenizer (a LoRA run's merged weights); "
                                                                      "peft: a LoRA run's adapter (OUT) over its seed (OUT/base)")
    parser.add_argument("out", type=Path, help="directory to create (must not exist)")


def main(args: argparse.Namespace) -> int:
    from tatu.model.checkpoint import CheckpointError, load_checkpoint
    from tatu.model.hf import export_hf
    from tatu.model.peft_format import export_peft

    if args.out.exists():
        raise TatuExit(BAD_CONFIG, f"{args.out}: already exists; give a new directory to export into")
    try:
        ckpt = load_checkpoint(args.checkpoint)
    except CheckpointError as exc:
        raise TatuExit(BAD_DATA, str(exc))
    try:
        out = export_peft(ckpt, args.out) if args.format == "peft" else export_hf(ckpt, args.out)
    except CheckpointError as exc:  # HFFormatError: a setting GPT-2's layout cannot express; a missing or changed base
        raise TatuExit(BAD_DATA, f"{args.checkpoint}: cannot export to {'GPT-2' if args.format == 'hf' else 'PEFT'}: {exc}")
    except OSError as exc:
        raise TatuExit(BAD_CONFIG, f"{args.out}: cannot write ({exc.strerror or exc})")
    cfg = ckpt.model_config
    if args.format == "peft":
        adapter = ckpt.meta["adapter"]
        print(f"exported {args.checkpoint} -> {out} (PEFT LoRA r={adapter['rank']} alpha={adapter['alpha']:g} on "
              f"{len(ckpt.extra_tensors['adapter']) // 2} modules) over its base {adapter['base']} -> {out / 'base'}")
        return 0
    print(f"exported {args.checkpoint} -> {out} (GPT2LMHeadModel, {cfg.n_layer} layers, n_embd {cfg.n_embd}, "
          f"context {cfg.block_size}, {ckpt.tokenizer.kind} tokenizer, vocab {cfg.vocab_size}, "
          f"tokenizer hash {ckpt.tokenizer.hash[:12]})")
    return 0
