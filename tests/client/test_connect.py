"""poolctl fails fast and says why, in one line, through a real scheduler over
real TLS: nothing listening, plaintext against TLS, TLS against plaintext, a
server certificate the CA does not trust, one that does not name the address
dialled, our certificate refused, a principal unknown. No gRPC core log line
reaches stderr, and the connect timeout (--timeout) bounds the wait."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pool_client.failover import addresses
from scheduler.ctl import certs

BIN = Path(sys.executable).parent


def poolctl(env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    done = subprocess.run([str(BIN / "poolctl"), *args], capture_output=True, text=True, timeout=60, env=env)
    return done, time.monotonic() - started


def one_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 1, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr   # no gRPC core log lines, no traceback
    return lines[0]


def other_pki(directory: Path, name: str = "other") -> Path:
    """A second CA with its own server and client certificates (same names as the real ones)."""
    other = directory / name
    other.mkdir()
    certs.make_ca(other)
    certs.make_server(other, ("127.0.0.1",))
    certs.make_client(other, "operator")
    return other


def test_each_failure_to_connect_is_one_line_naming_its_cause(cluster, tmp_path):
    s = cluster()
    env = s.env()
    other = other_pki(tmp_path)
    from e2e.conftest import free_port

    done, took = poolctl({**env, "POOL_SCHEDULER": f"127.0.0.1:{free_port()}"}, "claims", "--timeout", "1")
    assert "nothing is listening" in one_line(done) and "connection refused" in done.stderr
    assert took < 10   # the connect timeout, not the 30 s call budget

    done, took = poolctl({k: v for k, v in env.items() if k not in ("POOL_CA", "POOL_CERT", "POOL_KEY")}, "claims")
    assert "the scheduler speaks TLS" in one_line(done) and took < 10

    done, _ = poolctl({**env, "POOL_CA": str(other / "ca.pem")}, "claims")
    line = one_line(done)
    assert "not trusted by the CA given" in line and "issued by" in line

    done, _ = poolctl({**env, "POOL_CERT": str(other / "operator.pem"), "POOL_KEY": str(other / "operator.key")},
                      "claims")
    assert "refused our client certificate" in one_line(done) and "'operator'" in done.stderr

    done, _ = poolctl({**env, "POOL_CERT": "", "POOL_KEY": ""}, "claims")
    assert "requires a client certificate" in one_line(done)

    stranger = s.as_principal("stranger")
    done = stranger.poolctl("claims", check=False)
    assert one_line(done).startswith("poolctl: UNKNOWN_PRINCIPAL: ")


def test_a_certificate_that_does_not_name_the_address_dialled_is_named(cluster, tmp_path):
    pki = tmp_path / "pki"
    pki.mkdir()
    certs.make_ca(pki)
    certs.make_server(pki, ("127.0.0.1",))   # not "localhost"
    s = cluster()
    port = s.address.rsplit(":", 1)[1]
    done, _ = poolctl({**s.env(), "POOL_SCHEDULER": f"localhost:{port}"}, "claims")
    line = one_line(done)
    assert "does not name the address dialled" in line and "127.0.0.1" in line and "not localhost" in line


def test_tls_against_a_plaintext_scheduler_says_so(cluster, tmp_path):
    s = cluster(insecure=True)
    other = other_pki(tmp_path)
    done, _ = poolctl({**os.environ, "POOL_SCHEDULER": s.address, "POOL_CA": str(other / "ca.pem"),
                       "POOL_CERT": str(other / "operator.pem"), "POOL_KEY": str(other / "operator.key")}, "claims")
    assert "answers in plaintext, not TLS" in one_line(done)


@pytest.mark.parametrize("given, dialled", [
    ("sched", "sched:7070"), ("sched:7000", "sched:7000"), ("[::1]", "[::1]:7070"), ("::1", "[::1]:7070"),
    ("a, b:1", "a:7070,b:1"), ("unix:/run/pool.sock", "unix:/run/pool.sock")])
def test_an_address_without_a_port_means_7070(given, dialled):
    assert ",".join(addresses(given)) == dialled


def test_a_bad_port_or_timeout_is_a_usage_error():
    done, _ = poolctl({**os.environ, "POOL_SCHEDULER": "sched:http"}, "claims")
    assert done.returncode == 2 and "the port must be a number" in done.stderr
    done, _ = poolctl(dict(os.environ), "claims", "--timeout", "0")
    assert done.returncode == 2 and "--timeout" in done.stderr
