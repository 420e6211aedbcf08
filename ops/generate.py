"""`tatu generate CKPT --prompt TEXT | --prompts FILE`: batched generation from a checkpoint."""
from __future__ import annotations

import argparse
from pathlib import Path

from tatu.exitcodes import BAD_DATA, TatuExit


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", type=Path, help="checkpoint directory or legacy .pt file")
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", action="append", help="a prompt (repeatable)")
    src.add_argument("--prompts", type=Path, help="file with one prompt per line (all generated in one batch)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chat", action="store_true", help="wrap each prompt in the SFT role markers")
    parser.add_argument("--device", default="cpu")


def main(args: argparse.Namespace) -> int:
    import torch

    from tatu.model.chat import encode_prompt
    from tatu.model.checkpoint import CheckpointError, load_checkpoint

    if args.prompts is not None:
        try:
            prompts = [line for line in args.prompts.read_text(encoding="utf-8").splitlines() if line.strip()]
        except (OSError, UnicodeDecodeError) as exc:
            raise TatuExit(BAD_DATA, f"{args.prompts}: cannot read prompts ({exc})")
    else:
        prompts = args.prompt
    try:
        ckpt = load_checkpoint(args.checkpoint)
    except CheckpointError as exc:
        raise TatuExit(BAD_DATA, str(exc))
    tok = ckpt.tokenizer
    model = ckpt.build_model(args.device).eval()
    encoded = []
    for p in prompts:
        ids = encode_prompt(tok, p) if args.chat else [tok.bos_id, *tok.encode(p)]
        encoded.append(ids)
    gen = torch.Generator(device=args.device).manual_seed(args.seed)
    outputs = model.generate(encoded, args.max_new_tokens, args.temperature, args.top_k, tok.eos_id, gen)
    for prompt, out in zip(prompts, outputs):
        print(f"{prompt} -> {tok.decode(out)}" if args.chat else prompt + tok.decode(out))
    return 0
