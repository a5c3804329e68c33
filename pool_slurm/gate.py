"""The prolog's question, answered by the running bridge over a Unix socket
(`[bridge] socket`, default /run/pool-slurm/gate.sock, mode 0600).

PrologSlurmctld runs once per job start while Slurm holds the job's nodes
(CONFIGURING), so it must be quick: a hook that imports gRPC and opens a TLS
channel costs ~1 s of CPU before it asks anything, and a burst of starts (an
array) runs many at once. The bridge already holds a channel to Pool: the
hook sends it the job and the GPUs Slurm chose, the bridge asks Pool exactly
what the hook would (hooks.may_start: every claim admitted on those nodes,
then bound to those GPUs) and answers. One JSON line each way. When the
bridge does not answer, the hook asks Pool itself (slower, same answer).

TaskEpilog's request, on a socket of its own (`[bridge] finish_socket`, mode
0666: the hook runs as the job's user): finish job N, whose batch script has
just ended while Slurm still has the job RUNNING (Bridge.finish). The bridge
trusts the kernel's word on who asks (SO_PEERCRED), not the request: the
caller is root or the job's user, and its parent is the job's batch step
(`slurmstepd: [N.batch]`)."""

from __future__ import annotations

import json
import logging
import os
import socket
import socketserver
import struct
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


def finish(config, key: str) -> tuple[bool, str] | None:
    """(finished, what) from the bridge for job `key`'s end; None when no bridge answers."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(config.final_wait_ms / 1000 + 4 * config.timeout_s + 5)
            s.connect(str(config.finish_socket))
            s.sendall(json.dumps({"finish": key}).encode() + b"\n")   # who asks: the kernel says (SO_PEERCRED)
            line = s.makefile("rb").readline()
        answer = json.loads(line)
        return bool(answer["ok"]), str(answer.get("why", ""))
    except (OSError, ValueError, KeyError):
        return None


def peer(connection: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of a Unix socket, as the kernel knows it."""
    pid, uid, _ = struct.unpack("3i", connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                            struct.calcsize("3i")))
    return pid, uid


def batch_step_of(pid: int) -> str | None:
    """The job id N when process `pid`'s parent is slurmstepd's batch step `[N.batch]`, else None."""
    try:
        ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        title = Path(f"/proc/{ppid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except (OSError, ValueError, IndexError):
        return None
    if title.startswith("slurmstepd: [") and title.endswith(".batch]"):
        return title[len("slurmstepd: ["):-len(".batch]")]
    return None


class _Served:
    """A Unix socket served by a thread, a line of JSON each way: the Gate's and the Finisher's."""

    def _serve(self, where: str, handler: type, name: str, mode: int) -> None:
        path = Path(where)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            path.unlink()
        old = os.umask(0o177)   # made owner-only, then opened as far as `mode` says
        try:
            self.server = socketserver.ThreadingUnixStreamServer(str(path), handler)
        finally:
            os.umask(old)
        path.chmod(mode)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name=name, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Finisher(_Served):
    """The bridge's side of TaskEpilog's request: a thread serving `finish_socket` (bridge.finish)."""

    def __init__(self, config, bridge) -> None:
        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                key = "?"
                try:
                    request = json.loads(self.rfile.readline())
                    key = str(request["finish"])
                    pid, uid = peer(self.connection)
                    ok, why = bridge.finish(key, uid, batch_step_of(pid))
                except (ValueError, KeyError, TypeError) as exc:
                    ok, why = False, f"a request the bridge cannot read ({exc})"
                except Exception as exc:   # Pool or Slurm failed: the job ends as before, EpilogSlurmctld releases
                    ok, why = False, f"{type(exc).__name__}: {exc}"
                log.info("end of job %s: %s", key, why)
                self.wfile.write(json.dumps({"ok": ok, "why": why}).encode() + b"\n")

        self._serve(config.finish_socket, Handler, "finish", 0o666)   # every job's user asks (bridge.finish checks who)


class Gate(_Served):
    """The bridge's side: a thread serving the socket with the bridge's Pool connection."""

    def __init__(self, config, pool) -> None:
        from pool_slurm.hooks import may_start
        from pool_slurm.pool import PoolError, unreachable

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

        self._serve(config.socket, Handler, "gate", 0o600)   # slurmctld's user only
