"""The prolog's question, answered by the running bridge over a Unix socket
(`[bridge] socket`, default /run/pool-slurm/gate.sock, mode 0600).

PrologSlurmctld runs once per job start while Slurm holds the job's nodes
(CONFIGURING), so it must be quick: a hook that imports gRPC and opens a TLS
channel costs ~1 s of CPU before it asks anything, and a burst of starts (an
array) runs many at once. The bridge already holds a channel to Pool: the
hook sends it the job and the GPUs Slurm chose, the bridge asks Pool exactly
what the hook would (hooks.may_start: every claim admitted on those nodes,
then bound to those GPUs) and answers. One JSON line each way. When the
bridge does not answer, the hook asks Pool itself (slower, same answer)."""

from __future__ import annotations

import json
import logging
import os
import socket
import socketserver
import threading
from pathlib import Path

log = logging.getLogger("pool_slurm.gate")
DEFAULT_SOCKET = Path("/run/pool-slurm/gate.sock")


def ask(config, key: str, nodes: dict, admin_comment: str, account: str = "",
        timeout: float = 30) -> tuple[bool, str] | None:
    """(may start, why not) from the bridge; None when no bridge answers."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(config.socket))
            s.sendall(json.dumps({"job": key, "nodes": {n: list(i) for n, i in nodes.items()},
                                  "admin_comment": admin_comment, "account": account}).encode() + b"\n")
            line = s.makefile("rb").readline()
        answer = json.loads(line)
        return bool(answer["ok"]), str(answer.get("why", ""))
    except (OSError, ValueError, KeyError):
        return None


class Gate:
    """The bridge's side: a thread serving the socket with the bridge's Pool connection."""

    def __init__(self, config, pool) -> None:
        from pool_slurm.hooks import may_start
        from pool_slurm.pool import PoolError, unreachable
        path = Path(config.socket)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            path.unlink()

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                try:
                    request = json.loads(self.rfile.readline())
                    nodes = {n: tuple(i) for n, i in request["nodes"].items()}
                    why = may_start(pool, config, request["job"], nodes, request.get("admin_comment", ""),
                                    request.get("account", ""))
                    answer = {"ok": why is None, "why": why or ""}
                except PoolError as exc:
                    answer = {"ok": False, "why": f"UNREACHABLE: {exc}" if unreachable(exc)
                              else f"Pool could not confirm an admission ({exc})"}
                except (ValueError, KeyError, TypeError) as exc:
                    answer = {"ok": False, "why": f"a request the bridge cannot read ({exc})"}
                log.info("start of job %s: %s", request.get("job") if isinstance(request, dict) else "?",
                         "admitted" if answer["ok"] else answer["why"])
                self.wfile.write(json.dumps(answer).encode() + b"\n")

        old = os.umask(0o177)
        try:
            self.server = socketserver.ThreadingUnixStreamServer(str(path), Handler)
        finally:
            os.umask(old)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="gate", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
