"""Start-up refuses what it cannot trust: a bad configuration or a ledger that
does not verify, with one clear line; and health says NOT_SERVING until the
ledger is replayed."""

import sqlite3
import json
import subprocess
import urllib.request

import pytest

from .conftest import BIN, TREE, free_port


def check(config_text: str, tmp_path) -> subprocess.CompletedProcess:
    path = tmp_path / "s.toml"
    path.write_text(config_text)
    return subprocess.run([str(BIN / "pool-scheduler"), "--config", str(path), "--check"],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("text, needle", [
    ("colour = 1\n" + TREE, "colour is not a known key"),
    ("[server]\nlisten = 'nowhere'\n" + TREE, "server.listen must be HOST:PORT"),
    (TREE + "\n[[tenants]]\nname = 'gamma'\nparent = 'root'\nguarantee_uj = 1\n", "children's guarantee_uj sum"),
    (TREE + "\n[[tenants]]\nname = 'orphan'\nparent = 'nobody'\n", "unknown parent 'nobody'"),
    (TREE.replace('name = "beta"', 'name = "beta"\nweight = 0'), "tenants[2].weight must be positive"),
    (TREE + "\n[[work_classes]]\nname = 'x'\nrequired = 1\n", "required must be ≥ 2"),
    ("", "tenants is required"),
    (TREE, "[server.tls] (cert, key, client_ca) is required"),
    ("[server]\ninsecure = true\nlisten = '0.0.0.0:7070'\n" + TREE, "may only listen on a loopback address"),
    ("[server]\ninsecure = true\n[principals.x]\nrole = 'king'\n" + TREE, "principals[x].role must be one of"),
    ("[server]\ninsecure = true\n[principals.x]\nrole = 'tenant'\ntenants = ['gamma']\n" + TREE,
     "principals.x.tenants: 'gamma' is not in the tenant tree"),
    ("[server]\ninsecure = true\n[principals.pool-scheduler]\nrole = 'operator'\n" + TREE, "is reserved"),
])
def test_bad_configuration_is_refused_with_the_key_named(tmp_path, text, needle):
    done = check(text, tmp_path)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and needle in done.stderr, done.stderr


def test_a_valid_configuration_checks(tmp_path):
    done = check("[server]\ninsecure = true\n" + TREE, tmp_path)
    assert done.returncode == 0 and "valid (3 tenants" in done.stdout


def test_a_ledger_that_does_not_verify_is_refused(cluster, tmp_path):
    s = cluster()
    s.register()
    s.poolctl("submit", "c1", "--tenant", "alpha", "--estimate-uj", "10")
    s.stop()
    with sqlite3.connect(s.ledger) as db:   # what an attacker with file access could do
        db.execute("drop trigger receipts_no_update")
        raw = db.execute("select raw from receipts where seq = 2").fetchone()[0]
        db.execute("update receipts set raw = ? where seq = 2", (raw[:-1] + bytes([raw[-1] ^ 1]),))
    done = subprocess.run([str(BIN / "pool-scheduler"), "--config", str(s.config)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "does not verify" in done.stderr and "receipt 2" in done.stderr, done.stderr


def test_watch_streams_state_changes(cluster):
    s = cluster()
    s.register()
    s.poolctl("submit", "w1", "--tenant", "alpha", "--estimate-uj", "10")
    watcher = subprocess.Popen([str(BIN / "poolctl"), "watch", "--claim", "w1", "--count", "2", "-o", "json",
                                "--scheduler", s.address], stdout=subprocess.PIPE, text=True, env=s.env())
    first = watcher.stdout.readline()   # JSON Lines: the current status comes first, on one line
    s.poolctl("release", "w1")
    rest, _ = watcher.communicate(timeout=30)
    assert watcher.returncode == 0
    assert json.loads(first)["status"]["state"] == "ADMITTED" and json.loads(rest)["status"]["state"] == "RELEASED"


def test_metrics_report_admissions_refusals_usage_and_ledger(cluster):
    port = free_port()
    s = cluster(metrics=f"127.0.0.1:{port}")
    s.register()
    s.poolctl("submit", "m1", "--tenant", "alpha", "--estimate-uj", "7000")
    s.poolctl("submit", "m2", "--tenant", "nobody", "--estimate-uj", "1", check=False)
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert "pool_admissions_total 1.0" in text
    assert 'pool_refusals_total{reason="UNKNOWN_TENANT"} 1.0' in text
    assert 'pool_tenant_usage_uj{tenant="alpha"} 7000.0' in text
    assert 'pool_tenant_guarantee_uj{tenant="root"} 1e+11' in text
    assert "pool_ledger_length" in text and "pool_replay_seconds" in text


def test_a_configuration_that_drops_a_tenant_with_open_claims_is_refused(cluster):
    s = cluster()
    s.register()
    s.poolctl("submit", "b1", "--tenant", "beta", "--estimate-uj", "10")
    s.stop()
    s.config.write_text(s.config.read_text().split('[[tenants]]\nname = "beta"')[0])
    done = subprocess.run([str(BIN / "pool-scheduler"), "--config", str(s.config)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "cannot replace the one in the ledger" in done.stderr and "'beta'" in done.stderr, done.stderr
