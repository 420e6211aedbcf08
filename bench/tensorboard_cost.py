"""What the daemon's TensorBoard sink costs a run: the time to write one step record and one eval
record (tatu.tensorboard's writer, flushed per record as the daemon does), beside the step and eval
times the same run measured (its events.jsonl's `seconds`), as a share of each.

The records are the run's own, written again and again into a fresh temporary dir (each copy at a
new step, so none is skipped as already there). Then what a restart pays before its first step:
reading a dir of --resume-steps step records (each tag's last step) and skipping them all again.

    .venv/bin/python -u bench/tensorboard_cost.py RUN_DIR [--copies 200 --resume-steps 20000]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tatu.daemon.logs import read_events
from tatu.tensorboard.writer import TensorBoardWriter, last_steps


def seconds_per_record(records: list[dict], copies: int, log_dir: Path) -> float:
    writer = TensorBoardWriter(log_dir, lambda line: sys.exit(line))
    started = time.perf_counter()
    for n in range(copies):
        for i, record in enumerate(records):
            writer.write({**record, "step": n * len(records) + i + 1})
    elapsed = time.perf_counter() - started
    writer.close()
    return elapsed / (copies * len(records))


def restart_seconds(step: dict, n: int, log_dir: Path) -> tuple[float, float]:
    """(reading a dir of n step records, skipping all n again) as a restart's writer does."""
    records = [{**step, "step": i} for i in range(1, n + 1)]
    writer = TensorBoardWriter(log_dir, lambda line: sys.exit(line))
    writer.catch_up(records)
    writer.close()
    started = time.perf_counter()
    last_steps(log_dir)
    read = time.perf_counter() - started
    writer = TensorBoardWriter(log_dir, lambda line: sys.exit(line))
    started = time.perf_counter()
    writer.catch_up(records)
    return read, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--copies", type=int, default=200)
    parser.add_argument("--resume-steps", type=int, default=20000)
    args = parser.parse_args()
    events = read_events(args.run_dir / "events.jsonl")
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("step", "eval"):
            records = [e for e in events if e["event"] == kind and e["step"] > 0]
            cost = seconds_per_record(records, args.copies, Path(tmp) / kind)
            took = statistics.median(e["seconds"] for e in records)
            print(f"{kind}: {cost * 1e6:.0f} us per record written; the run's median {kind} took {took * 1e3:.1f} ms: "
                  f"{cost / took:.2%} of it ({len(records)} records x {args.copies})")
        step = next(e for e in events if e["event"] == "step")
        read, skip = restart_seconds(step, args.resume_steps, Path(tmp) / "restart")
        print(f"a restart over {args.resume_steps} steps: {read:.2f} s to read the dir's last steps, "
              f"{skip:.2f} s to skip them all in events.jsonl's records")


if __name__ == "__main__":
    main()
