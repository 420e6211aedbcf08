"""TATU_PRECISION: what auto resolves to and why, the run keeping its precision across restarts,
and evals scored in fp32 whatever the run trained in.

bf16 runs here set TATU_PRECISION=bf16 explicitly, so they run on any CPU (emulated where the
flags lack amx_bf16 and avx512_bf16); the kill -9 resume under bf16 is in tests/daemon/test_daemon.py,
2 ranks = 1 under bf16 in tests/daemon/test_ddp.py.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

from strict import cannot_run
from tiny_world import base_env

from tatu.daemon.config import ConfigError, load_config
from tatu.daemon.logs import read_events
from tatu.daemon.main import main as daemon_main
from tatu.evals.scoring import evaluate
from tatu.data.manifest import load_manifest
from tatu.evals.sets import load_eval_set
from tatu.model.checkpoint import load_checkpoint
from tatu.model.precision import CPU_BF16_FLAGS, Precision, PrecisionError, cpu_flags, native_bf16, resolve_precision
from tatu.ops.cli import main as tatu

CPU = torch.device("cpu")


def test_auto_is_bf16_exactly_where_the_cpu_flags_have_it():
    assert str(resolve_precision("auto", CPU, frozenset({"sse2", "amx_bf16"}))) == "bf16 [auto: cpu has amx_bf16]"
    assert str(resolve_precision("auto", CPU, frozenset({"avx512_bf16"}))) == "bf16 [auto: cpu has avx512_bf16]"
    assert str(resolve_precision("auto", CPU, frozenset({"avx2", "avx512f"}))) == \
        "fp32 [auto: cpu lacks amx_bf16 and avx512_bf16]"
    assert str(resolve_precision("fp32", CPU, frozenset({"amx_bf16"}))) == "fp32 [TATU_PRECISION=fp32]"
    assert str(resolve_precision("bf16", CPU, frozenset({"amx_bf16"}))) == "bf16 [TATU_PRECISION=bf16]"
    emulated = resolve_precision("bf16", CPU, frozenset())
    assert emulated.name == "bf16" and "emulated, slower than fp32" in emulated.reason
    with pytest.raises(PrecisionError, match="TATU_PRECISION=fp16: expected one of auto, fp32, bf16"):
        resolve_precision("fp16", CPU)


def test_a_bad_value_is_a_configuration_error_naming_the_variable():
    with pytest.raises(ConfigError, match="TATU_PRECISION"):
        load_config({"TATU_DATA": "d", "TATU_MODE": "pretrain", "TATU_PRECISION": "half"})
    config, origins = load_config({"TATU_DATA": "d", "TATU_MODE": "pretrain"})
    assert config.precision == "auto" and origins["TATU_PRECISION"] == "default"


def test_cpu_flags_are_the_ones_grep_finds_in_proc_cpuinfo():
    text = "processor\t: 0\nflags\t\t: fpu sse2 amx_bf16\n\nprocessor\t: 1\nflags\t\t: fpu sse2 amx_bf16\n"
    assert cpu_flags(text) == {"fpu", "sse2", "amx_bf16"}
    assert cpu_flags("processor : 0\nFeatures : fp asimd bf16\n") == {"fp", "asimd", "bf16"}  # arm's spelling
    if not Path("/proc/cpuinfo").is_file():
        cannot_run("no /proc/cpuinfo on this machine")
    pattern = "|".join(CPU_BF16_FLAGS)
    grep = subprocess.run(["grep", "-o", "-w", "-m1", "-E", pattern, "/proc/cpuinfo"], capture_output=True, text=True)
    native, why = native_bf16(CPU)
    assert native == (grep.returncode == 0), (grep.stdout, why)
    if native:
        assert why == f"cpu has {sorted(set(grep.stdout.split()), key=CPU_BF16_FLAGS.index)[0]}"


def test_the_autocast_computes_in_the_precision_it_names():
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    with Precision("bf16", "test").autocast(CPU):
        assert (a @ b).dtype == torch.bfloat16
    with Precision("fp32", "test").autocast(CPU):
        assert (a @ b).dtype == torch.float32


# --- through the daemon ------------------------------------------------------------------------

def sft_env(world, out: Path, **extra) -> dict[str, str]:
    settings = dict(TATU_RUN="run", TATU_SEED_CKPT=world["trunk"], SFT_GE=2, REPLAY_N=1, MIX_STEPS_LIMIT=2,
                    EVAL_EVERY=2, TATU_LR="1e-3", TATU_CKPT_EVERY=2, TATU_GEN_PROMPTS=0)
    settings.update(extra)
    return base_env(world["data"], out, **settings)


@pytest.fixture(scope="module")
def bf16_and_fp32(tiny_trunk, tmp_path_factory):
    """The same 2-step run in bf16 and in fp32."""
    root = tmp_path_factory.mktemp("precision")
    for precision in ("bf16", "fp32"):
        assert daemon_main(sft_env(tiny_trunk, root / precision, TATU_PRECISION=precision)) == 0
    return {"world": tiny_trunk, "bf16": root / "bf16" / "run", "fp32": root / "fp32" / "run"}


def test_a_bf16_run_trains_in_bf16_and_says_so(bf16_and_fp32):
    runs = bf16_and_fp32
    line = next(line for line in (runs["bf16"] / "run.log").read_text().splitlines() if " precision " in line)
    assert line.endswith("precision bf16 [env: TATU_PRECISION=bf16" + ("]" if native_bf16(CPU)[0] else
                                                                       line[line.index(";"):]))
    assert [e["precision"] for e in read_events(runs["bf16"] / "events.jsonl") if e["event"] == "ready"] == ["bf16"]
    bf16, fp32 = (load_checkpoint(runs[p] / "final") for p in ("bf16", "fp32"))
    assert bf16.meta["precision"] == "bf16" and fp32.meta["precision"] == "fp32"
    assert all(v.dtype == torch.float32 for v in bf16.model_state.values())  # the weights stay fp32
    difference = max(float((bf16.model_state[k] - fp32.model_state[k]).abs().max()) for k in bf16.model_state)
    assert difference > 1e-6  # the steps really ran in another precision


def test_the_evals_of_a_bf16_run_score_in_fp32(bf16_and_fp32, tmp_path):
    """`tatu eval` (no autocast anywhere) of the final weights gives the daemon's last eval to 1e-12,
    while the same weights scored under bf16 autocast give other numbers: the daemon scored in fp32."""
    runs, data = bf16_and_fp32, bf16_and_fp32["world"]["data"]
    last = [e for e in read_events(runs["bf16"] / "events.jsonl") if e["event"] == "eval"][-1]
    out = tmp_path / "eval.json"
    assert tatu(["eval", str(runs["bf16"] / "final"), "--data", str(data), "--json", str(out)]) == 0
    sets = json.loads(out.read_text())["sets"]
    for name, logged in last["sets"].items():
        assert sets[name][0]["ppl"] == pytest.approx(logged["ppl"], rel=1e-12), name
    final = load_checkpoint(runs["bf16"] / "final")
    model = final.build_model(CPU).eval()
    ruler = load_eval_set(data / load_manifest(data)["evals"]["enRuler"]["file"], final.tokenizer, name="enRuler")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        in_bf16 = evaluate(model, ruler, n_resamples=100).ppl
    assert in_bf16 != pytest.approx(last["sets"]["enRuler"]["ppl"], rel=1e-6)


def test_a_restart_continues_only_in_the_precision_the_run_trained_in(bf16_and_fp32, tmp_path, capsys):
    world = bf16_and_fp32["world"]
    assert daemon_main(sft_env(world, tmp_path, TATU_PRECISION="bf16", MIX_STEPS_LIMIT=1, TATU_CKPT_EVERY=1)) == 0
    state = tmp_path / "run" / "state" / "resume.json"
    before = state.read_bytes()
    capsys.readouterr()
    assert daemon_main(sft_env(world, tmp_path, TATU_PRECISION="fp32", MIX_STEPS_LIMIT=2)) == 78
    printed = capsys.readouterr()
    assert ("run run trained in bf16, this start would train in fp32 [TATU_PRECISION=fp32]; "
            "set TATU_PRECISION=bf16 to continue it, or start a new TATU_RUN") in printed.out + printed.err
    assert state.read_bytes() == before  # refused before anything was written
    # auto continues it exactly where auto resolves to bf16 on this CPU
    code = daemon_main(sft_env(world, tmp_path, TATU_PRECISION="", MIX_STEPS_LIMIT=2))
    assert code == (0 if native_bf16(CPU)[0] else 78)
    if code == 0:
        assert "resumed from step 1" in capsys.readouterr().out
