"""How an instruction pair becomes tokens, and which of them are targets.

    BOS <|user|> prompt <|assistant|> response EOS
    targets:                          ^^^^^^^^ ^^^   (the response and the EOS that ends it)

One function shared by the SFT data builder, the sftHeld evaluator and generation, so the
model is trained, scored and prompted on exactly the same layout.
"""
from __future__ import annotations

from tatu.model.tokenizer import Tokenizer

ROLES = ("user", "assistant", "system")


def encode_prompt(tok: Tokenizer, prompt: str) -> list[int]:
    """The tokens a generation starts from: everything up to and including <|assistant|>."""
    return [tok.bos_id, tok.user_id, *tok.encode(prompt), tok.assistant_id]


def encode_pair(tok: Tokenizer, prompt: str, response: str) -> tuple[list[int], list[bool]]:
    """(ids, is_target): is_target[i] says ids[i] is predicted and counted in the loss."""
    head = encode_prompt(tok, prompt)
    body = tok.encode(response) + [tok.eos_id]
    return head + body, [False] * len(head) + [True] * len(body)


def encode_messages(tok: Tokenizer, messages: list[dict]) -> tuple[list[int], list[bool]]:
    """The chat form: user turns are context, every assistant turn (and its EOS) is a target.

    A system message is context, placed like a user turn.
    """
    ids, mask = [tok.bos_id], [False]
    for i, message in enumerate(messages):
        role, content = message["role"], message["content"]
        if role == "assistant":
            piece = [tok.assistant_id] if not ids or ids[-1] != tok.assistant_id else []
            ids += piece
            mask += [False] * len(piece)
            body = tok.encode(content) + [tok.eos_id]
            ids += body
            mask += [True] * len(body)
        elif role in ("user", "system"):
            piece = [tok.user_id, *tok.encode(content)]
            following_assistant = i + 1 < len(messages) and messages[i + 1]["role"] == "assistant"
            if following_assistant:
                piece.append(tok.assistant_id)
            ids += piece
            mask += [False] * len(piece)
        else:
            raise ValueError(f"unknown role {role!r} (expected one of {ROLES})")
    return ids, mask
