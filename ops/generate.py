"""`tatu generate CKPT --prompt TEXT | --prompts FILE`: batched generation from a checkpoint.

Bad arguments (numbers out of range, an unusable --device, a --prompt too long for the model)
exit USAGE; a bad prompts file or checkpoint exits BAD_DATA; either way with one line naming it.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from tatu.exitcodes import BAD_DATA, USAGE, TatuExit


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", type=Path, help="checkpoint directory or legacy .pt file")
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", action="append", help="a prompt (repeatable)")
    src.add_argument("--prompts", type=Path, help="file with one prompt per line (all generated in one batch)")
    parser.add_argument("--max-new-tokens", type=int, default=64, help=">= 1; each row also stops at block_size")
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    parser.add_argument("--top-k", type=int, default=None, help=">= 1; sample among the k most likely tokens")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chat", action="store_true", help="wrap each prompt in the SFT role markers")
    parser.add_argument("--device", default="cpu")


def check_numbers(args: argparse.Namespace) -> None:
    if args.max_new_tokens < 1:
        raise TatuExit(USAGE, f"--max-new-tokens must be >= 1, not {args.max_new_tokens}")
    if args.top_k is not None and args.top_k < 1:
        raise TatuExit(USAGE, f"--top-k must be >= 1, not {args.top_k}")
    if args.temperature < 0:
        raise TatuExit(USAGE, f"--temperature must be >= 0 (0 = greedy), not {args.temperature}")


def usable_device(name: str):
    from tatu.model.device import DeviceError, resolve_device

    try:
        return resolve_device(name)
    except DeviceError as exc:
        raise TatuExit(USAGE, f"--device {exc}")


def read_prompts(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(where, text) per prompt: `where` names it in errors (FILE:LINE or --prompt N)."""
    if args.prompts is None:
        return [(f"--prompt {i}", text) for i, text in enumerate(args.prompt, 1)]
    try:
        lines = args.prompts.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise TatuExit(BAD_DATA, f"{args.prompts}: cannot read prompts ({exc})")
    prompts = [(f"{args.prompts}:{n}", line) for n, line in enumerate(lines, 1) if line.strip()]
    if not prompts:
        raise TatuExit(BAD_DATA, f"{args.prompts}: no prompts (the file has no non-blank line)")
    return prompts


def main(args: argparse.Namespace) -> int:
    import torch

    from tatu.model.chat import encode_prompt
    from tatu.model.checkpoint import CheckpointError
    from tatu.model.hf import load_checkpoint_or_gpt2

    check_numbers(args)
    device = usable_device(args.device)
    prompts = read_prompts(args)
    try:
        ckpt = load_checkpoint_or_gpt2(args.checkpoint)
        model = ckpt.build_model(device).eval()
    except CheckpointError as exc:
        raise TatuExit(BAD_DATA, str(exc))
    tok = ckpt.tokenizer
    block_size = model.config.block_size
    # A prompt from the command line is a bad argument; one from the prompts file is bad data.
    too_long_code = USAGE if args.prompts is None else BAD_DATA
    encoded = []
    for where, text in prompts:
        ids = encode_prompt(tok, text) if args.chat else [tok.bos_id, *tok.encode(text)]
        if len(ids) >= block_size:
            raise TatuExit(
                too_long_code,
                f"{where}: prompt is {len(ids)} tokens, block_size {block_size} leaves no room for new tokens",
            )
        encoded.append(ids)
    gen = torch.Generator(device=device).manual_seed(args.seed)
    outputs = model.generate(encoded, args.max_new_tokens, args.temperature, args.top_k, tok.eos_id, gen)
    for (_, text), out in zip(prompts, outputs):
        print(f"{text} -> {tok.decode(out)}" if args.chat else text + tok.decode(out))
    return 0
