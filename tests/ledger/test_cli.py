"""poolctl keygen and ledger export|verify|witness as real subprocesses."""

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.ledger import keys
from scheduler.ledger.steward import open_ledger

POOLCTL = Path(sys.executable).with_name("poolctl")
REPORT_KEYS = {"valid", "length", "head", "signatures_ok", "chain_ok", "first_bad_index", "reason",
               "grade", "witnessed_length", "witness", "root", "tail"}


def poolctl(*args) -> subprocess.CompletedProcess:
    return subprocess.run([str(POOLCTL), *map(str, args)], capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def ledger(tmp_path_factory):
    """(directory, store path, export path) of a ledger written by a keygen'd steward."""
    base = tmp_path_factory.mktemp("cli")
    out = poolctl("keygen", "--out", base / "steward", "-o", "json")
    assert out.returncode == 0, out.stderr
    assert stat.S_IMODE((base / "steward.key").stat().st_mode) == 0o600
    steward = open_ledger(base / "l.db", keys.load_signing_key(base / "steward.key"))
    for n in range(3):
        steward.append("claim.submitted", {"n": n})
    steward.close()
    out = poolctl("ledger", "export", base / "l.db", "--out", base / "l.cbor", "-o", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["length"] == 4
    return base


def verify(*args):
    out = poolctl("ledger", "verify", *args, "-o", "json")
    return out.returncode, (json.loads(out.stdout) if out.stdout else None), out.stderr


@pytest.mark.parametrize("name", ["l.db", "l.cbor"])
def test_verify_a_store_and_an_export(ledger, name):
    code, doc, _ = verify(ledger / name, "--key", ledger / "steward.pub")
    assert code == 0 and set(doc) == REPORT_KEYS
    assert (doc["valid"], doc["length"], doc["reason"], doc["grade"]) == (True, 4, None, "self-attested")


def test_an_invalid_export_exits_1(ledger, tmp_path):
    blob = (ledger / "l.cbor").read_bytes()
    (tmp_path / "bad.cbor").write_bytes(blob[:-3])
    code, doc, _ = verify(tmp_path / "bad.cbor")
    assert code == 1 and set(doc) == REPORT_KEYS
    assert (doc["valid"], doc["first_bad_index"], doc["reason"], doc["length"]) == (False, 3, "decode", 3)


def test_unusable_arguments_exit_2(ledger, tmp_path):
    (tmp_path / "junk.key").write_text("junk")
    for args in [(tmp_path / "absent.cbor",), (ledger / "l.cbor", "--key", tmp_path / "junk.key"),
                 (ledger / "l.cbor", "--witness", tmp_path / "absent")]:
        code, doc, err = verify(*args)
        assert code == 2 and doc is None and err.startswith("poolctl: ") and err.count("\n") == 1
    assert poolctl("ledger", "verify").returncode == 2
    assert poolctl("keygen", "--out", ledger / "steward").returncode == 2   # never overwrites


def test_witness_then_verify_with_the_statement(ledger):
    out = poolctl("keygen", "--out", ledger / "witness")
    assert out.returncode == 0
    out = poolctl("ledger", "witness", ledger / "l.cbor", "--key", ledger / "witness.key",
                  "--out", ledger / "w.cose", "-o", "json")
    assert out.returncode == 0, out.stderr
    code, doc, _ = verify(ledger / "l.db", "--witness", ledger / "w.cose")
    assert code == 0 and (doc["grade"], doc["witnessed_length"]) == ("witnessed", 4)
    assert doc["witness"]["key_id"] == keys.load_public_key(ledger / "witness.pub").key_id.hex()


def test_the_steward_key_cannot_witness(ledger):
    out = poolctl("ledger", "witness", ledger / "l.cbor", "--key", ledger / "steward.key")
    assert out.returncode == 2 and "WITNESS_REJECTED" in out.stderr


def test_import_restores_a_store_that_verifies_to_the_same_head(ledger, tmp_path):
    out = poolctl("ledger", "import", ledger / "l.cbor", "--store", tmp_path / "restored.db", "-o", "json")
    assert out.returncode == 0, out.stderr
    restored, original = verify(tmp_path / "restored.db")[1], verify(ledger / "l.db")[1]
    assert restored["valid"] and restored["head"] == original["head"] and restored["length"] == 4
    again = poolctl("ledger", "import", ledger / "l.cbor", "--store", tmp_path / "restored.db")
    assert again.returncode == 2 and "STORE_EXISTS" in again.stderr


def test_import_of_a_tampered_export_leaves_nothing(ledger, tmp_path):
    blob = bytearray((ledger / "l.cbor").read_bytes())
    blob[-3] ^= 1
    (tmp_path / "bad.cbor").write_bytes(bytes(blob))
    out = poolctl("ledger", "import", tmp_path / "bad.cbor", "--store", tmp_path / "restored.db")
    assert out.returncode == 1 and "LEDGER_INVALID: receipt 3" in out.stderr, out.stderr
    assert not (tmp_path / "restored.db").exists()


def test_a_sqlite_ledger_moves_to_postgresql_and_back_byte_for_byte(ledger, postgres_dsn, tmp_path):
    """`poolctl ledger import` into PostgreSQL, then export, verify and a second import refused."""
    moved = poolctl("ledger", "import", ledger / "l.db", "--store", postgres_dsn,
                    "--key", ledger / "steward.pub", "-o", "json")
    assert moved.returncode == 0, moved.stderr
    assert json.loads(moved.stdout)["length"] == 4
    out = poolctl("ledger", "export", postgres_dsn, "--out", tmp_path / "pg.cbor", "-o", "json")
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "pg.cbor").read_bytes() == (ledger / "l.cbor").read_bytes()
    report = poolctl("ledger", "verify", postgres_dsn, "--key", ledger / "steward.pub", "-o", "json")
    assert report.returncode == 0 and json.loads(report.stdout)["valid"] is True
    again = poolctl("ledger", "import", ledger / "l.cbor", "--store", postgres_dsn)
    assert again.returncode != 0 and "STORE_EXISTS:" in again.stderr
    nowhere = poolctl("ledger", "verify", "host=/nonexistent dbname=x connect_timeout=1")
    assert nowhere.returncode != 0 and "UNREADABLE:" in nowhere.stderr
