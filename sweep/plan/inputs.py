"""What every member of a plan will read, checked before anything is locked or started: its data
directory (a `tatu data build` manifest), its seed and trunk checkpoints, and that the seed's
tokenizer is the one the data was built with. A member that would fail before its first step
(exit 65 or 78 in its own log) is refused here instead, as the plan's problem (78), naming the
member, the variable and the fix: a locked name is not used up by a wrong path.

Light on purpose: reads JSON files only (no torch), so `tatu sweep plan` stays quick."""
from __future__ import annotations

import json
from pathlib import Path

from tatu.sweep.plan.member import Member
from tatu.sweep.plan.rule import plan_error


def check_member_inputs(path: Path, members: list[Member]) -> None:
    """Refuse (SweepError 78 naming the plan file) the first member whose inputs are missing or
    disagree. Members sharing their inputs are checked once."""
    seen: set[tuple] = set()
    for member in members:
        key = tuple(member.env.get(v) for v in ("TATU_DATA", "TATU_SEED_CKPT", "TATU_TRUNK_CKPT"))
        if key in seen:
            continue
        seen.add(key)
        problem = member_input_problem(member.env)
        if problem:
            raise plan_error(path, f"member {member.name}", f"{problem} (nothing locked or started)")


def member_input_problem(env: dict[str, str]) -> str | None:
    """What a member with this environment would fail on before its first step, or None."""
    from tatu.data.manifest import DataError, load_manifest

    data = Path(env.get("TATU_DATA") or "")
    if not env.get("TATU_DATA"):
        return "TATU_DATA is not set: the data directory `tatu data build` wrote"
    if not data.is_dir():
        return f"TATU_DATA={data}: no such data directory (`tatu data build --out {data}` writes one)"
    try:
        manifest = load_manifest(data)
    except DataError as exc:
        return f"TATU_DATA={data}: {exc}"
    for variable in ("TATU_SEED_CKPT", "TATU_TRUNK_CKPT"):
        value = env.get(variable)
        if value and not Path(value).exists():
            return f"{variable}={value}: no such checkpoint (a run's final/ or best/ directory)"
    seed = env.get("TATU_SEED_CKPT")
    built_with = manifest.get("tokenizer_hash")
    seed_hash = tokenizer_hash(Path(seed)) if seed else None
    if seed_hash is not None and built_with and seed_hash != built_with:
        return (f"TATU_SEED_CKPT={seed}: its tokenizer ({seed_hash[:12]}) is not the one TATU_DATA={data} was built "
                f"with ({str(built_with)[:12]}): rebuild the data with the seed's tokenizer.json")
    return None


def tokenizer_hash(checkpoint: Path) -> str | None:
    """The hash of a tatu checkpoint's tokenizer (what a data manifest must agree with); None where
    the seed is not a tatu checkpoint directory (a GPT-2 seed, a file): its own loader judges it."""
    from tatu.model.tokenizer import TokenizerError
    from tatu.model.tokenizer_json import tokenizer_from_dict

    document = checkpoint / "tokenizer.json"
    if not document.is_file():
        return None
    try:
        return tokenizer_from_dict(json.loads(document.read_text(encoding="utf-8")), str(document)).hash
    except (OSError, ValueError, KeyError, TokenizerError):
        return None  # unreadable: the daemon's verified load says exactly why

