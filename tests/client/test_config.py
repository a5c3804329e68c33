"""The client configuration file: contexts written by `poolctl config`, read
back by poolctl and by the library (Client.from_context), chosen by
--context, $POOL_CONTEXT or the current context."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

import pool_client
from pool_client import config

BIN = Path(sys.executable).parent


def bare_env(config_path: Path) -> dict[str, str]:
    """The environment without POOL_SCHEDULER/CA/CERT/KEY/CONTEXT, with POOL_CONFIG."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("POOL_SCHEDULER", "POOL_CA", "POOL_CERT", "POOL_KEY", "POOL_CONTEXT")}
    return {**env, "POOL_CONFIG": str(config_path)}


def poolctl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "poolctl"), *args], capture_output=True, text=True, timeout=60, env=env)


def test_contexts_written_by_poolctl_reach_a_real_scheduler(cluster, tmp_path, monkeypatch):
    s = cluster()
    cert, key = s.pki.files("operator")
    path = tmp_path / "client.toml"
    env = bare_env(path)
    done = poolctl(env, "config", "set-context", "here", "--scheduler", s.address, "--ca", str(s.pki.ca),
                   "--cert", str(cert), "--key", str(key), "--tenant", "beta", "--timeout", "2")
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert poolctl(env, "config", "set-context", "nowhere", "--scheduler", "127.0.0.1:1").returncode == 0

    refused = poolctl(env, "claims")   # no current context yet: the default address, plaintext
    assert refused.returncode == 1 and "127.0.0.1:7070" in refused.stderr
    assert poolctl(env, "config", "use-context", "here").returncode == 0
    assert poolctl(env, "config", "current-context").stdout.strip() == "here"
    listed = poolctl(env, "config", "get-contexts").stdout
    assert any(line.startswith("*") and "here" in line for line in listed.splitlines())

    submitted = poolctl(env, "-o", "json", "submit", "--estimate-uj", "1000000", "k1")
    assert submitted.returncode == 0, submitted.stderr
    assert '"tenant": "beta"' in submitted.stdout   # the context's tenant
    assert "k1" in poolctl(env, "claims").stdout

    elsewhere = poolctl(env, "claims", "--context", "nowhere")
    assert elsewhere.returncode == 1 and "127.0.0.1:1" in elsewhere.stderr
    by_env = poolctl({**env, "POOL_CONTEXT": "nowhere"}, "claims")
    assert by_env.returncode == 1 and "127.0.0.1:1" in by_env.stderr
    unknown = poolctl(env, "claims", "--context", "missing")
    assert unknown.returncode == 2 and "no context 'missing'" in unknown.stderr

    monkeypatch.setenv("POOL_CONFIG", str(path))
    monkeypatch.delenv("POOL_CONTEXT", raising=False)
    with pool_client.Client.from_context() as pool:
        assert [c.claim_id for c in pool.list_all()] == ["k1"]
        assert pool.settings.connect_timeout == 2.0 and pool.settings.tenant == "beta"


def test_a_broken_file_is_one_usage_line(tmp_path):
    path = tmp_path / "client.toml"
    path.write_text("[contexts.a]\nschedulr = 'x'\n")
    done = poolctl(bare_env(path), "claims", "--context", "a")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "unknown key 'schedulr'" in done.stderr
    path.write_text("not toml [")
    assert poolctl(bare_env(path), "config", "view").returncode == 2


def test_the_file_is_found_where_documented(tmp_path, monkeypatch):
    monkeypatch.delenv("POOL_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert Path(config.path()) == tmp_path / "pool" / "config.toml"
    monkeypatch.setenv("POOL_CONFIG", str(tmp_path / "x.toml"))
    assert Path(config.path()) == tmp_path / "x.toml"


names = st.text("abcdefghijklmnopqrstuvwxyz0123456789-_.", min_size=1, max_size=12)
texts = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=20)


@given(name=names, scheduler=st.lists(texts, min_size=1, max_size=3), tenant=st.none() | texts,
       timeout=st.none() | st.floats(min_value=0.001, max_value=1e6), ca=st.none() | texts)
def test_a_context_reads_back_as_it_was_set(tmp_path_factory, name, scheduler, tenant, timeout, ca):
    path = tmp_path_factory.mktemp("cfg") / "config.toml"
    ca_path = f"/{ca}" if ca else None
    config.set_context(name, path, scheduler=scheduler, tenant=tenant, timeout=timeout, ca=ca_path)
    config.use_context(name, path)
    back = config.context(None, path) if not os.environ.get("POOL_CONTEXT") else config.context(name, path)
    assert (back.name, back.scheduler, back.tenant, back.timeout) == (name, scheduler, tenant, timeout)
    assert back.ca == ca_path   # an absolute path is kept as given


def test_an_unusable_value_is_refused_before_it_is_written(tmp_path):
    path = tmp_path / "c.toml"
    with pytest.raises(config.ConfigError):
        config.set_context("a", path, timeout=-1.0)
    assert not path.exists()
