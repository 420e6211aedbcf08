"""`tatu status [RUN] [--json] [--watch [SECONDS]]`: a running daemon's state over its control socket;
with no daemon answering, what the run's directory says happened (ops/status_files.py), and with
no run named, every run tatu knows."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from tatu import exitcodes
from tatu.daemon.control.access import socket_path
from tatu.daemon.control.client import ControlError, answers, request, resolve_socket
from tatu.evals.forecast import Forecast
from tatu.formats import fmt_duration, fmt_interval, fmt_pct, fmt_share
from tatu.ops.status_files import known_status, run_status

# -- formatting ---------------------------------------------------------------------

def _pct(fraction) -> str:
    return fmt_pct(fraction)


def _num(value, digits: int = 4) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "n/a"
    return f"{value:.{digits}f}"


def _duration(seconds) -> str:
    return fmt_duration(seconds) if isinstance(seconds, (int, float)) and seconds >= 0 else "n/a"


def _interval(lo, hi, fmt) -> str:
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)):
        return f" {fmt_interval(lo, hi, fmt)}"
    return ""


def _answers_line(name: str, answer) -> str:
    """`answers sftHeld 3/64 right 4.7% [1.6%,12.9%]  vs step 0 +3.1% (2 gained, 0 lost, p 0.500)`."""
    if not isinstance(answer, dict):
        return f"answers {name} n/a"
    text = (f"answers {name} {answer.get('n_correct', '?')}/{answer.get('n', '?')} right {fmt_share(answer.get('rate'))}"
            f"{_interval(answer.get('lo'), answer.get('hi'), fmt_share)}")
    if answer.get("n_unfinished"):
        text += f"  {answer['n_unfinished']} unfinished"
    change = answer.get("change")
    if isinstance(change, dict):
        text += (f"  vs step 0 {fmt_pct(change.get('diff'))} ({change.get('only_now', '?')} gained, "
                 f"{change.get('only_then', '?')} lost, p {_num(change.get('p_value'), 3)})")
    return text


def _replay_line(sources: dict) -> str:
    """`replay  replay 1/2 drew 12 (50.0%)  ptReplay 1/2 drew 12 (50.0%)`: each source's share (of the
    replay micro-batches, REPLAY_SOURCES) beside the micro-batches the run has drawn from it."""
    drawn = sources.get("drawn") or {}
    total = sum(drawn.values())
    parts = [f"{name} {share} drew {drawn.get(name, 0)}" + (f" ({100 * drawn.get(name, 0) / total:.1f}%)" if total else "")
             for name, share in sources.get("shares") or []]
    return "replay  " + "  ".join(parts) + " micro-batches"


def _forecast_line(payload) -> str | None:
    """`forecast drift at step 200 +6.1% [+3.2%,+9.8%] (90%, 3 evals); crosses 8.0%: not before the end`."""
    if not isinstance(payload, dict):
        return None
    try:
        return Forecast.from_json(payload).describe()
    except (KeyError, TypeError, ValueError):  # a daemon of another version: said, never a crash
        return "forecast n/a (a reply this tatu cannot read)"


def format_status(status: dict) -> str:
    """A few readable lines from a status reply; missing fields show as n/a or are left out."""
    lines = []
    step, limit = status.get("step"), status.get("limit")
    progress = f"step {step if step is not None else '?'}/{limit if limit is not None else '?'}"
    if isinstance(step, int) and isinstance(limit, int) and limit > 0:
        progress += f" ({100 * step / limit:.0f}%)"
    lines.append(f"{status.get('run', '?')}  pid {status.get('pid', '?')}  phase {status.get('phase', '?')}  {progress}")
    speed = status.get("tokens_per_s")
    lines.append(f"speed   {_num(speed, 0)} tok/s  ETA {_duration(status.get('eta_s'))}")

    last = status.get("last_eval")
    if isinstance(last, dict):
        parts = []
        for name, metrics in (last.get("sets") or {}).items():
            if isinstance(metrics, dict):
                parts.append(f"{name} {_num(metrics.get('ppl'))}{_interval(metrics.get('lo'), metrics.get('hi'), _num)}")
        lines.append(f"eval    @ step {last.get('step', '?')}: " + ("  ".join(parts) or "no sets"))
        drift_line = f"        drift {_pct(last.get('drift'))}{_interval(last.get('drift_lo'), last.get('drift_hi'), _pct)}"
        drift_line += f"  drift_tronco {_pct(last.get('drift_tronco'))}"
        lines.append(drift_line)
        forecast = _forecast_line(last.get("forecast"))
        if forecast:
            lines.append(f"        {forecast}")
        for name, answer in (last.get("answers") or {}).items():
            lines.append(_answers_line(name, answer))
        covers = last.get("ci_covers")
        if isinstance(covers, dict) and covers.get("text"):  # the daemon's wording (tatu.daemon.ci_covers)
            lines.append(f"covers  {covers['text']}")
    else:
        lines.append("eval    none yet")

    best = status.get("best")
    if isinstance(best, dict):
        # by sftHeld in an SFT run, by ptVal in a trunk's pretraining
        metric = next((k for k in ("sftHeld", "ptVal") if k in best), "sftHeld")
        lines.append(f"best    step {best.get('step', '?')}  {metric} {_num(best.get(metric))}")
    if "drift" in status or "drift_tronco" in status:
        lines.append(f"drift   {_pct(status.get('drift'))}  drift_tronco {_pct(status.get('drift_tronco'))}")

    memory = status.get("memory")
    if isinstance(memory, dict):
        lines.append(f"memory  rss {_num(memory.get('rss_mb'), 0)} MB  available {_num(memory.get('available_mb'), 0)} MB"
                     f"  swap used {_num(memory.get('swap_used_mb'), 0)} MB")
    oom = status.get("oom_score_adj")
    if oom is not None:
        note = "" if isinstance(oom, int) and oom < 0 else "  (not protected from the OOM killer: see tatu doctor)"
        lines.append(f"oom_score_adj {oom}{note}")
    if status.get("trainable"):
        lines.append(f"trains  {status['trainable']}")
    sources = status.get("replay_sources")
    if isinstance(sources, dict):
        lines.append(_replay_line(sources))
    if status.get("warning"):
        lines.append(f"WARNING {status['warning']}")
    if status.get("config_hash"):
        lines.append(f"config  {status['config_hash']}")
    return "\n".join(lines)


# -- CLI ----------------------------------------------------------------------------

def add_status_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("run", nargs="?", help="run name or run directory (default: the only running run, else "
                        "every run tatu knows)")
    parser.add_argument("--json", action="store_true", help="print the raw status reply as JSON")
    parser.add_argument("--watch", nargs="?", type=float, const=2.0, default=None, metavar="SECONDS",
                        help="refresh every SECONDS (default 2) until Ctrl-C")
    parser.add_argument("--socket", help="control socket path (default: derived from RUN)")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for a reply")
    parser.add_argument("--out", type=Path, help="with no daemon answering: the runs directory (TATU_OUT) to look in "
                        "(default: $TATU_OUT, the units' runs, runs/, demo/runs/)")
    return parser


def status_main(args: argparse.Namespace, out=None) -> int:
    out = out or sys.stdout
    if args.watch is not None and not args.watch > 0:
        print(f"tatu status: --watch interval must be > 0, got {args.watch}", file=sys.stderr)
        return 2
    run = args.run
    try:
        if args.watch is None and args.socket is None:
            # no daemon answers for it: what the run directory says (ops/status_files.py)
            live = _answering(run)
            if run is not None and not live:
                return run_status(run, args.out, args.json, out, _socket_path_of(run))
            if run is None and len(live) != 1:
                return known_status(args.out, live, args.json, out)
            run = live[0]
        path = resolve_socket(run, args.socket)
    except (ControlError, ValueError) as exc:
        print(f"tatu status: {str(exc).removeprefix('tatu: ')}", file=sys.stderr)
        return 1
    except exitcodes.TatuExit as exc:
        print(f"tatu status: {exc.message}", file=sys.stderr)
        return exc.code
    try:
        return _status_loop(path, args, out)
    except KeyboardInterrupt:
        return 0 if args.watch is not None else exitcodes.INTERRUPTED


def _socket_path_of(run: str) -> Path | None:
    """The socket a daemon of `run` would listen at; None for a run given as a directory."""
    try:
        return socket_path(run)
    except ValueError:
        return None


def _answering(run: str | None) -> list[str]:
    """The runs whose daemon accepts a connection: `run`'s alone when named, else every socket's."""
    if run is not None:
        path = _socket_path_of(run)
        return [run] if path is not None and answers(path) else []
    directory = socket_path("any").parent
    return [p.stem for p in sorted(directory.glob("*.sock")) if answers(p)] if directory.is_dir() else []


def _status_loop(path: Path, args: argparse.Namespace, out) -> int:
    while True:
        try:
            status = request(path, "status", timeout=args.timeout)
            text = json.dumps(status, indent=2, sort_keys=True) if args.json else format_status(status)
            code = 0
        except ControlError as exc:
            if args.watch is None:
                print(exc, file=sys.stderr)
                return 1
            text, code = str(exc), 1  # keep watching: the unit may be restarting
        if args.watch is None:
            print(text, file=out)
            return code
        if out.isatty():
            out.write("\033[H\033[J")
        print(time.strftime("%H:%M:%S"), file=out)
        print(text, file=out, flush=True)
        time.sleep(args.watch)
