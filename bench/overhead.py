"""What does the daemon cost per step? Daemon steps/s vs a bare loop, and RSS over a long run.

1. Throughput. The same model (from one seed checkpoint), the same batches (MixedStream with
   the same seed and mix), the same AdamW settings and clipping (read from the daemon's own
   RunConfig), in the same process, on the same machine:
     - bare:   a plain loop, forward per micro-batch, token-weighted loss, backward, clip, step;
               no evals, no logging, no socket, no memory sampling;
     - daemon: `tatu.daemon.main.main(env)` in-process with EVAL_EVERY beyond the run, so only
               the step-0 baseline and the final eval run, both outside the timed steps.
   The daemon's step time is the gap between consecutive "step" events in its events.jsonl:
   a whole loop iteration, bookkeeping included (psutil sample, event write, status,
   checkpoint test). Its own "seconds" field covers only the compute, so the difference of
   the two is the bookkeeping per step; their ratio over the same steps is immune to the
   host's load, where bare-vs-daemon is not. Rounds alternate bare/daemon and the ratio is
   taken from medians, because the 2-core hosts this runs on are shared; both loops run with
   --threads torch threads (default 1: with 2 threads on a loaded 2-core host every op waits
   at an OpenMP barrier for a descheduled thread, and step times swing 10x).
   The bare loop reproduces the daemon's arithmetic exactly, so its per-step losses must
   equal the daemon's: printed as evidence that both did the same work.
2. Memory. `python -m tatu.daemon` in a fresh process on a tiny model for --rss-steps steps;
   the RSS the daemon itself reports in its step events at step 50 vs the last step.

Prints ratios; asserts nothing about timing (exit 0 unless a run fails).

    .venv/bin/python bench/overhead.py [--steps 100] [--rounds 3] [--rss-steps 500] [--threads 1] [--quick]
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # tiny_world: the synthetic data the daemon tests use
sys.path.insert(0, str(ROOT / "bench"))  # bare_loop

from bare_loop import bare_loop  # noqa: E402
from tiny_world import base_env, write_sources  # noqa: E402

from tatu.daemon import memory  # noqa: E402
from tatu.daemon.config import load_config  # noqa: E402
from tatu.daemon.logs import RunLog, read_events  # noqa: E402
from tatu.daemon.main import main as daemon_main  # noqa: E402
from tatu.model.checkpoint import load_model_state, save_checkpoint  # noqa: E402
from tatu.model.hf import load_checkpoint_or_gpt2  # noqa: E402
from tatu.model.gpt import GPT, GPTConfig  # noqa: E402
from tatu.model.tokenizer_json import load_tokenizer  # noqa: E402
from tatu.ops.demo import prepare_data  # noqa: E402

SEQ_LEN = 128
DEMO_MODEL = {"TATU_N_LAYER": 4, "TATU_N_HEAD": 4, "TATU_N_EMBD": 128, "TATU_BLOCK_SIZE": SEQ_LEN}
TINY_MODEL = {"TATU_N_LAYER": 1, "TATU_N_HEAD": 2, "TATU_N_EMBD": 32, "TATU_BLOCK_SIZE": SEQ_LEN}
RSS_EARLY_STEP = 50


def build_seed(path: Path, tokenizer_path: Path, shape: dict, seed: int) -> Path:
    """A freshly initialised model saved as a seed checkpoint (the SFT mode needs one)."""
    tokenizer = load_tokenizer(tokenizer_path)
    config = GPTConfig(vocab_size=tokenizer.vocab_size, block_size=shape["TATU_BLOCK_SIZE"],
                       n_layer=shape["TATU_N_LAYER"], n_head=shape["TATU_N_HEAD"], n_embd=shape["TATU_N_EMBD"])
    torch.manual_seed(seed)
    save_checkpoint(path, model=GPT(config), model_config=config, tokenizer=tokenizer, meta={})
    return path


def run_env(data: Path, out: Path, seed_ckpt: Path, run: str, steps: int, shape: dict) -> dict[str, str]:
    """A run whose timed steps contain no eval and no checkpoint (both only after the last step)."""
    beyond = str(steps + 1)
    return base_env(data, out, TATU_RUN=run, TATU_SEED_CKPT=seed_ckpt, SFT_GE=2, REPLAY_N=1,
                    MIX_STEPS_LIMIT=steps, EVAL_EVERY=beyond, TATU_CKPT_EVERY=beyond, TATU_SEQ_LEN=SEQ_LEN,
                    TATU_MICRO_BATCH=8, TATU_GEN_PROMPTS=0, TATU_MEM_FLOOR_MB=0, **shape)


def bare_run(env: dict[str, str], steps: int) -> tuple[list[float], list[float]]:
    """(seconds per step, loss per step) of bench/bare_loop.py's plain loop from the run's seed."""
    config, _ = load_config(env)
    seed = load_checkpoint_or_gpt2(config.seed_ckpt)
    model_config = GPTConfig(**{**seed.model_config.to_dict(), "dropout": config.dropout, "attn": "sdpa"})
    torch.manual_seed(config.seed)
    model = GPT(model_config)
    load_model_state(model, seed.plain_state(), str(config.seed_ckpt))
    return bare_loop(model, config, steps, torch.device("cpu"))


def daemon_run(env: dict[str, str]) -> list[dict]:
    """Run the daemon in this process (its console output swallowed); its step events."""
    with contextlib.redirect_stdout(io.StringIO()) as console:
        code = daemon_main(env)
    if code != 0:
        sys.exit(f"overhead: daemon run {env['TATU_RUN']} exited {code}:\n{console.getvalue()[-2000:]}")
    return [e for e in read_events(Path(env["TATU_OUT"]) / env["TATU_RUN"] / "events.jsonl") if e["event"] == "step"]


def iteration_seconds(steps: list[dict]) -> list[float]:
    """Whole loop iterations: the gap between consecutive step events (event times are in ms)."""
    return [b["time"] - a["time"] for a, b in zip(steps, steps[1:])]


def per_call_ms(fn, calls: int = 300) -> float:
    fn()
    started = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - started) / calls * 1000


def bookkeeping_costs(work: Path, sample_event: dict) -> dict[str, float]:
    """Per-step costs of what the daemon adds around a step, measured on their own (ms)."""
    log = RunLog(work / "costs", stream=io.StringIO())
    fields = {k: v for k, v in sample_event.items() if k not in ("event", "time")}
    try:
        return {
            "memory.sample() (psutil: rss, virtual_memory, swap)": per_call_ms(memory.sample),
            "log.event('step', ...) (json + line-buffered write)": per_call_ms(lambda: log.event("step", **fields)),
        }
    finally:
        log.close()


def throughput(work: Path, data: Path, tokenizer: Path, steps: int, rounds: int, warmup: int) -> dict:
    seed_ckpt = build_seed(work / "seed-demo", tokenizer, DEMO_MODEL, seed=0)
    tag = f"ovh{os.getpid()}"  # the control socket path is per run name; other runs may share the host
    bare_all, daemon_all, inner_all, per_round, loss_gap = [], [], [], [], 0.0
    paired_compute = paired_whole = 0.0
    for r in range(rounds):
        env = run_env(data, work / "runs", seed_ckpt, f"{tag}-{r}", steps, DEMO_MODEL)
        order = ("bare", "daemon") if r % 2 == 0 else ("daemon", "bare")  # neither always goes first
        for kind in order:
            if kind == "bare":
                bare_seconds, bare_losses = bare_run(env, steps)
            else:
                events = daemon_run(env)
        if len(events) != steps:
            sys.exit(f"overhead: expected {steps} step events in round {r}, found {len(events)}")
        loss_gap = max(loss_gap, max(abs(e["loss"] - b) for e, b in zip(events, bare_losses)))
        bare = bare_seconds[warmup:]
        gaps = iteration_seconds(events)[max(warmup - 1, 0):]  # gap i ends at step i + 2
        inner = [e["seconds"] for e in events[warmup:]]
        bare_all += bare
        daemon_all += gaps
        inner_all += inner
        paired_compute += sum(e["seconds"] for e in events[warmup:])
        paired_whole += sum(gaps)
        per_round.append(statistics.median(bare) / statistics.median(gaps))
        print(f"  round {r + 1}/{rounds} ({' then '.join(order)}): bare {1 / statistics.median(bare):6.2f} steps/s, "
              f"daemon {1 / statistics.median(gaps):6.2f} steps/s, ratio {per_round[-1]:.3f}")
    return {"bare_s": statistics.median(bare_all), "daemon_s": statistics.median(daemon_all),
            "inner_s": statistics.median(inner_all), "per_round": per_round, "loss_gap": loss_gap,
            "paired": paired_compute / paired_whole,
            "sample_event": events[-1]}


def rss_growth(work: Path, data: Path, tokenizer: Path, steps: int) -> tuple[float, float]:
    """RSS (MB) at step 50 and at the last step of a fresh `python -m tatu.daemon` process."""
    seed_ckpt = build_seed(work / "seed-tiny", tokenizer, TINY_MODEL, seed=0)
    env = run_env(data, work / "runs", seed_ckpt, f"rss{os.getpid()}", steps, TINY_MODEL)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SFT_", "REPLAY_", "MIX_", "EVAL_", "TATU_"))}
    proc = subprocess.run([sys.executable, "-m", "tatu.daemon"], env={**clean, **env}, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"overhead: RSS run exited {proc.returncode}:\n{(proc.stdout + proc.stderr)[-2000:]}")
    events = read_events(work / "runs" / env["TATU_RUN"] / "events.jsonl")
    rss = {e["step"]: e["memory"]["rss_mb"] for e in events if e["event"] == "step"}
    return rss[RSS_EARLY_STEP], rss[steps]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=100, help="optimizer steps per timed run (bare and daemon)")
    parser.add_argument("--rounds", type=int, default=3, help="bare/daemon pairs, alternating which goes first")
    parser.add_argument("--rss-steps", type=int, default=500, help="steps of the RSS run (compared with step 50)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads for both loops; 1 keeps a shared host's load from stalling OpenMP barriers")
    parser.add_argument("--quick", action="store_true", help="30 steps x 2 rounds, RSS over 200 steps")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.rounds, args.rss_steps = 30, 2, 200
    if args.steps < 12 or args.rounds < 1 or args.rss_steps <= RSS_EARLY_STEP:
        parser.error(f"--steps must be >= 12, --rounds >= 1, --rss-steps > {RSS_EARLY_STEP}")
    warmup = max(2, args.steps // 20)  # first steps allocate; both loops drop the same number
    torch.set_num_threads(args.threads)

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs; "
          f"mix SFT_GE=2 REPLAY_N=1 x micro-batch 8 x seq 128; demo model {DEMO_MODEL}")
    with tempfile.TemporaryDirectory(prefix="tatu-overhead-") as tmp:
        work = Path(tmp)
        started = time.perf_counter()
        data = prepare_data(write_sources(work / "sources"), work, "char", 0, SEQ_LEN)
        tokenizer = work / "tokenizer.json"
        print(f"data: tiny world, char tokenizer ({time.perf_counter() - started:.1f}s)")

        print(f"throughput: {args.rounds} rounds x {args.steps} steps, first {warmup} steps dropped")
        t = throughput(work, data, tokenizer, args.steps, args.rounds, warmup)
        bare_rate, daemon_rate = 1 / t["bare_s"], 1 / t["daemon_s"]
        ratio = t["bare_s"] / t["daemon_s"]
        print(f"  same work: max |daemon loss - bare loss| over all steps = {t['loss_gap']:.2e}")
        print(f"  median step: bare {t['bare_s'] * 1000:.1f} ms; daemon {t['daemon_s'] * 1000:.1f} ms per iteration, "
              f"of which compute ('seconds') {t['inner_s'] * 1000:.1f} ms -> bookkeeping "
              f"{(t['daemon_s'] - t['inner_s']) * 1000:+.1f} ms/step")
        print(f"  within the daemon's own steps (same steps, same load): compute / whole iteration = "
              f"{t['paired']:.4f}")
        print(f"  per-round ratios: {', '.join(f'{x:.3f}' for x in t['per_round'])}")
        for what, ms in bookkeeping_costs(work, t["sample_event"]).items():
            print(f"  cost of {what}: {ms:.3f} ms/step = {ms / (t['bare_s'] * 1000):.2%} of a bare step")

        print(f"memory: tiny model {TINY_MODEL}, {args.rss_steps} steps in a fresh `python -m tatu.daemon`")
        early, late = rss_growth(work, data, tokenizer, args.rss_steps)

    growth = late / early - 1
    print(f"  target: ratio >= 0.97 {'met' if ratio >= 0.97 else 'NOT met'}; "
          f"RSS growth within 2% {'met' if abs(growth) <= 0.02 else 'NOT met'}")
    print(f"overhead: daemon {daemon_rate:.2f} steps/s vs bare {bare_rate:.2f} steps/s, ratio {ratio:.3f} (eval excluded); "
          f"RSS step {RSS_EARLY_STEP} {early:.1f} MB, step {args.rss_steps} {late:.1f} MB ({growth:+.2%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
