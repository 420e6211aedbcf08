"""The Supervisor: the requests the loop acts on, the replies over the control socket, and one
daemon per run name."""
from __future__ import annotations

import json
import socket

import pytest

from tatu.daemon.config import ConfigError, load_config
from tatu.daemon.state import RunState
from tatu.daemon.supervisor import Supervisor


def test_supervisor_requests_replies_and_one_daemon_per_run():
    cfg, _ = load_config({"TATU_DATA": "d", "TATU_MODE": "pretrain", "TATU_RUN": "parts"})
    with Supervisor(cfg, {"TATU_RUN": "env"}) as supervisor:
        assert not (supervisor.stop_requested or supervisor.eval_requested or supervisor.checkpoint_requested)
        assert "queued" in supervisor.request_eval({}) and supervisor.eval_requested
        supervisor.clear_eval_request()
        assert not supervisor.eval_requested
        supervisor.request_checkpoint({})
        supervisor.request_stop({})
        assert supervisor.checkpoint_requested and supervisor.stop_requested
        supervisor.state = RunState(history=[{"step": 3, "generations": {"samples": []}, "drift": {}}])
        assert supervisor.reply_evals({}) == {"evals": [{"step": 3, "drift": {}}]}
        assert supervisor.reply_config({})["origins"] == {"TATU_RUN": "env"}
        # over the socket, as `tatu status` asks
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(str(supervisor._server.path))
            client.sendall(b'{"v":1,"cmd":"status"}\n')
            reply = json.loads(client.makefile().readline())
        assert reply["ok"] and reply["run"] == "parts" and reply["config_hash"] == cfg.hash
        with pytest.raises(ConfigError, match="TATU_RUN=parts: another daemon is already listening"):
            Supervisor(cfg, {}).__enter__()
