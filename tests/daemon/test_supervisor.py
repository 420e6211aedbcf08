"""The Supervisor: the requests the loop acts on, the replies over the control socket, and one
daemon per run name."""
from __future__ import annotations

import json
import socket

import pytest

from tatu.daemon.config import load_config
from tatu.daemon.run.lock import RunDirBusy
from tatu.daemon.run.state import RunState

from run_records import eval_record
from tatu.daemon.supervisor import Requests, Supervisor


def test_supervisor_requests_replies_and_one_daemon_per_run():
    cfg, _ = load_config({"TATU_DATA": "d", "TATU_MODE": "pretrain", "TATU_RUN": "parts"})
    with Supervisor(cfg, {"TATU_RUN": "env"}) as supervisor:
        assert supervisor.requests == Requests()
        assert "queued" in supervisor.request_eval({}) and supervisor.requests.eval
        supervisor.served("eval")
        assert not supervisor.requests.eval
        supervisor.request_checkpoint({})
        supervisor.request_stop({})
        assert supervisor.requests == Requests(stop=True, checkpoint=True)
        record = eval_record(3, generations={"samples": []})
        supervisor.state = RunState(history=[record])
        expected = {k: v for k, v in record.to_json().items() if k != "generations"}
        assert supervisor.reply_evals({}) == {"evals": [expected]} and "drift" in expected
        assert supervisor.reply_config({})["origins"] == {"TATU_RUN": "env"}
        # over the socket, as `tatu status` asks
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(str(supervisor._server.path))
            client.sendall(b'{"v":1,"cmd":"status"}\n')
            reply = json.loads(client.makefile().readline())
        assert reply["ok"] and reply["run"] == "parts" and reply["config_hash"] == cfg.hash
        with pytest.raises(RunDirBusy, match="TATU_RUN=parts: another daemon is already listening"):  # 75
            Supervisor(cfg, {}).__enter__()


def test_ranks_act_on_the_boundary_snapshot_of_every_request():
    """Under torchrun the loop reads only what the ranks agreed at the last step boundary. The
    all-reduce is stood in for by a function that ORs this rank's flags with another rank's
    (the real collective runs in tests/daemon/test_ddp.py)."""
    cfg, _ = load_config({"TATU_DATA": "d", "TATU_MODE": "pretrain", "TATU_RUN": "agreed"})
    with Supervisor(cfg, {}) as supervisor:
        supervisor.act_on_agreed_requests()
        supervisor.request_stop({})
        assert supervisor.requests == Requests()  # before the first boundary: every rank runs the baseline
        other_rank = Requests(checkpoint=True)
        supervisor.request_eval({})
        supervisor.agree(lambda flags: [a or b for a, b in zip(flags, vars(other_rank).values())])
        assert supervisor.requests == Requests(stop=True, eval=True, checkpoint=True)
        supervisor.request_eval({})  # arrives mid-step: it belongs to the next boundary
        supervisor.served("eval")
        assert supervisor.requests == Requests(stop=True, checkpoint=True)
        supervisor.agree(lambda flags: flags)
        assert supervisor.requests.eval and not supervisor.requests.checkpoint
        with pytest.raises(ValueError, match="one-shot"):
            supervisor.served("stop")
