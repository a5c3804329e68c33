"""The operator's and tenant's view (issue 16, items 4 and 5): explain never
contradicts itself, and poolctl's tables and JSON read as kubectl users
expect. Each test runs poolctl as a subprocess against a real scheduler and
asserts the table header and the JSON."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from protos.pool.v1 import claims_pb2, ops_pb2, types_pb2

from .conftest import BIN, J

BIG_TREE = """
[[tenants]]
name = "root"
guarantee_uj = 100_000_000_000
guarantee_mdev = 4000

[[tenants]]
name = "alpha"
parent = "root"
guarantee_uj = 60_000_000_000
guarantee_mdev = 3000

[[tenants]]
name = "beta"
parent = "root"
guarantee_uj = 40_000_000_000
guarantee_mdev = 1000
"""


def header(text: str) -> list[str]:
    """A table's column names (split on the runs of two spaces that separate them)."""
    return re.split(r"\s{2,}", text.splitlines()[0].strip())


def table_block(text: str, first_column: str) -> str:
    return next(b for b in text.split("\n\n") if b.startswith(first_column))


def submit(s, *args: str) -> dict:
    return s.json("submit", *args)


def test_an_admitted_claim_is_admissible_everywhere_and_explains_where_it_sits(cluster):
    s = cluster()
    s.register("w1")
    status = submit(s, "c1", "--tenant", "alpha", "--estimate-uj", "5000000", "--gpu-mdev", "500")
    assert status["state"] == "ADMITTED" and status["reason"] == "ADMISSIBLE"
    assert s.claims.Get(claims_pb2.GetClaimRequest(claim_id="c1")).reason == types_pb2.ADMISSIBLE
    assert s.json("claims")["claims"][0]["reason"] == "ADMISSIBLE"
    e = s.json("explain", "c1")
    assert e["reason"] == "ADMISSIBLE" and e["worker"] == "w1" and sum(e["devices_mdev"].values()) == 500
    steps = {c["step"]: c for c in e["checks"]}
    assert steps["VALIDATE"]["ok"] and steps["VALIDATE"]["hold"] == 5_000_000
    assert steps["ENERGY_OWN_PASS_CHECK"]["ok"] and steps["PLACEMENT_CHECK"]["ok"]
    assert "placed on 'w1'" in steps["PLACEMENT_CHECK"]["detail"]
    assert not steps["ENERGY_SURPLUS_PASS_CHECK"]["evaluated"]
    [row] = e["workers"]
    gpu = next(f for f in row["fields"] if f["field"] == "gpu_mdev")
    assert row["ok"] and gpu["requested"] == 500 and gpu["shortfall"] == 0
    text = s.poolctl("explain", "c1").stdout
    assert "on w1" in text.splitlines()[0]
    checks = table_block(text.split("\n\n", 1)[1], "check")
    assert header(checks)[:3] == ["check", "ok", "reason"]
    assert "5.000 J" in checks and "not evaluated" in checks


def test_a_pending_gang_member_explains_the_member_that_blocks_its_gang(cluster):
    s = cluster(tree=BIG_TREE)
    s.register("w1", gpus=2)
    submit(s, "b1", "--tenant", "beta", "--estimate-uj", "1000000", "--gpu-mdev", "1000")
    for m in ("g0", "g1"):
        submit(s, m, "--tenant", "alpha", "--estimate-uj", "1000000", "--gpu-mdev", "1000", "--gang", "g",
               "--gang-size", "2")
    e = s.json("explain", "g0")
    assert e["state"] == "PENDING" and e["reason"] == "NO_ELIGIBLE_WORKER"
    assert e["gang_member"] == "g1"      # g0 fits alone; g1, after g0, does not
    placement = next(c for c in e["checks"] if c["step"] == "PLACEMENT_CHECK")
    assert not placement["ok"] and placement["reason"] == "NO_ELIGIBLE_WORKER"
    assert not any(w["ok"] for w in e["workers"])
    assert {w["reason"] for w in e["workers"]} == {"RESOURCE_RESERVATION_UNAVAILABLE"}
    assert s.json("claims", "g0")["reason"] == "NO_ELIGIBLE_WORKER"
    text = s.poolctl("explain", "g0").stdout
    assert "member g1's" in text and "placed on" not in text


def test_a_gpu_type_mismatch_is_named_and_is_not_a_shortage(cluster):
    s = cluster()
    s.register("w1")
    submit(s, "a100", "--tenant", "alpha", "--estimate-uj", "1000000", "--gpu-mdev", "100",
           "--gpu-type", "NVIDIA A100")
    e = s.json("explain", "a100")
    assert e["reason"] == "NO_ELIGIBLE_WORKER" and e["gpu_types"] == ["NVIDIA A100"]
    [row] = e["workers"]
    assert row["reason"] == "WORKER_INELIGIBLE" and row["gpu_types"] == ["NVIDIA H200"]
    assert "NVIDIA A100" in row["detail"] and "missing" in row["detail"]
    gpu = next(f for f in row["fields"] if f["field"] == "gpu_mdev")
    assert gpu["shortfall"] == 0 and gpu["available_after"] >= 0, gpu
    text = s.poolctl("explain", "a100").stdout
    workers = table_block(text.split("\n\n", 2)[2], "worker")
    assert "gpu types" in header(workers) and "NVIDIA H200" in workers
    assert "accepts GPU types NVIDIA A100" in text.splitlines()[0]


def test_checks_never_evaluated_say_so_and_booleans_read_yes_or_no(cluster):
    s = cluster()
    s.register("w1")
    # beyond alpha's 60 kJ as a guess (Estimator): may not borrow, so the surplus check is never evaluated
    submit(s, "big", "--tenant", "alpha", "--estimate-uj", str(70_000 * J))
    e = s.json("explain", "big")
    assert e["reason"] == "ESTIMATOR_MAY_NOT_BORROW"
    skipped = [c for c in e["checks"] if not c["evaluated"]]
    assert {c["step"] for c in skipped} >= {"ENERGY_SURPLUS_PASS_CHECK", "PLACEMENT_CHECK"}
    text = s.poolctl("explain", "big").stdout
    checks = table_block(text.split("\n\n", 1)[1], "check")
    said = []
    for line in checks.splitlines()[2:]:
        cells = re.split(r"\s{2,}", line.strip())
        said.append(cells[1])
        assert cells[1] in ("yes", "no", "not evaluated"), line
        if cells[1] == "not evaluated":
            assert set(cells[2:]) == {"—"}, line   # no zeros for what was never computed
    assert said.count("not evaluated") == len(skipped), checks   # the rows this test is about are in the table
    workers = table_block(text.split("\n\n", 2)[2], "worker")
    worker_oks = {re.split(r"\s{2,}", line)[1] for line in workers.splitlines()[2:]}
    assert worker_oks and worker_oks <= {"yes", "no"}, workers
    assert "True" not in text and "False" not in text


def test_preemption_order_for_a_claim_says_why_none_can_be_preempted(cluster):
    s = cluster()
    s.register("w1")
    submit(s, "big", "--tenant", "alpha", "--estimate-uj", str(70_000 * J))
    doc = s.json("preemption-order", "--for", "big")
    assert doc["order"] == [] and doc["reason"] == "ESTIMATOR_MAY_NOT_BORROW"
    text = s.poolctl("preemption-order", "--for", "big").stdout
    assert text.splitlines()[0] == "for big: reason ESTIMATOR_MAY_NOT_BORROW; victims: none"
    assert "no admitted claim may be preempted for big" in text


CLAIM_VERBS = ("submit", "progress", "release", "claims")


def test_claim_tables_name_every_column_once_with_no_trailing_spaces(cluster):
    s = cluster()
    s.register("w1")
    outputs = [s.poolctl("submit", "c1", "--tenant", "alpha", "--estimate-uj", "120").stdout,
               s.poolctl("progress", "c1", "3").stdout, s.poolctl("claims").stdout,
               s.poolctl("claims", "-o", "wide").stdout, s.poolctl("release", "c1").stdout]
    for text in outputs:
        names = header(text)
        assert len(names) == len(set(names)) and all(names), names
        assert len(names) == len(text.splitlines()[1].split()), "every column has a header"
        assert all(line == line.rstrip() for line in text.splitlines())
        assert {"claim", "state", "reason", "gpus", "cpu", "estimate", "hold", "age", "worker"} <= set(names)
    assert {"wait", "position", "priority", "gang", "borrowed", "overrun", "submitted by"} <= set(header(outputs[3]))
    assert "0.00012 J" in outputs[0]           # 120 µJ is not 0.000 J
    overrun = header(outputs[3]).index("overrun")
    assert re.split(r"\s{2,}", outputs[3].splitlines()[2])[overrun] == "no"


def test_energy_is_printed_in_j_kj_mj_or_kwh_and_json_keeps_microjoules(cluster):
    s = cluster(tree=BIG_TREE.replace("_000_000_000\n", "_000_000_000_000\n"))   # guarantees in MJ
    s.register("w1")
    for claim, uj in (("j", 2 * J), ("kj", 3_000 * J), ("mj", 2_000_000 * J)):
        s.poolctl("submit", claim, "--tenant", "alpha", "--estimate-uj", str(uj))
    text = s.poolctl("claims", "--sort", "id").stdout
    assert "2.000 J" in text and "3.000 kJ" in text and "2.000 MJ" in text
    assert {c["hold_uj"] for c in s.json("claims")["claims"]} == {2 * J, 3_000 * J, 2_000_000 * J}
    tenants = s.poolctl("tenants").stdout
    assert "kWh" in tenants and "MJ" in tenants and header(tenants).count("grade") == 1


def test_output_json_is_accepted_anywhere_on_the_line(cluster):
    s = cluster()
    for args in (("-o", "json", "claims"), ("claims", "-o", "json"), ("--output=json", "tenants"),
                 ("ledger", "-o", "json", "head"), ("-ojson", "workers")):
        json.loads(s.poolctl(*args).stdout)


def test_one_enum_spelling_in_json_the_proto_value_names(cluster):
    s = cluster()
    s.register("w1")
    claim = submit(s, "c1", "--tenant", "alpha", "--estimate-uj", "1000000", "--exclusive")
    assert claim["hold_grade"] == "GRADE_ESTIMATOR" and claim["request"]["placement"] == "PLACEMENT_EXCLUSIVE"
    assert claim["state"] == "ADMITTED" and claim["measured_grade"] is None   # UNSPECIFIED is null
    split = json.loads(s.poolctl("split", "--total-uj", "10", "--grade", "HwShunt", "--share", "a=1",
                                 "-o", "json").stdout)
    assert split["shares"][0]["grade"] == "GRADE_HW_SHUNT"
    names = {v.name for e in (types_pb2.Grade, types_pb2.Reason, types_pb2.ClaimState, types_pb2.Placement)
             for v in e.DESCRIPTOR.values}
    assert {claim["hold_grade"], claim["reason"], claim["state"]} <= names


def test_watch_prints_a_header_then_time_kind_and_claim_per_line_or_json_lines(cluster):
    s = cluster()
    s.register("w1")
    submit(s, "c1", "--tenant", "alpha", "--estimate-uj", "1000000")
    text = s.poolctl("watch", "--claim", "c1", "--count", "1").stdout
    lines = text.splitlines()
    assert header(text) == ["time", "event", "claim", "tenant", "state", "reason", "hold", "measured", "worker"]
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\s+CURRENT\s+c1\s+alpha\s+ADMITTED", lines[1]), lines
    watcher = subprocess.Popen([str(BIN / "poolctl"), "watch", "--tenant", "alpha", "--count", "3", "-o", "json",
                                "--history"],
                               stdout=subprocess.PIPE, text=True, env=s.env())
    first = json.loads(watcher.stdout.readline())
    assert first["kind"] == "EVENT_CURRENT" and first["status"]["claim_id"] == "c1"
    submit(s, "c2", "--tenant", "alpha", "--estimate-uj", "1000000")   # submitted and admitted in one commit
    s.poolctl("release", "c2")
    out, _ = watcher.communicate(timeout=30)
    events = [json.loads(line) for line in out.splitlines()]   # JSON Lines: one document per line
    assert [(e["kind"], e["status"]["claim_id"]) for e in events] == [("EVENT_ADMITTED", "c2"),
                                                                      ("EVENT_RELEASED", "c2")]
    assert all(e["time_ns"] > 0 for e in events)


@pytest.mark.parametrize("args", [
    ("splits", "--since", "99999999999999999999"),
    ("submit", "c1", "--tenant", "alpha", "--estimate-uj", "18446744073709551616"),
    ("submit", "c1", "--tenant", "alpha", "--estimate-uj", "5", "--priority", "2147483648"),
    ("progress", "c1", "-1"),
    ("claims", "--state", "sleeping"),
    ("explain", "nobody"),
])
def test_every_error_is_one_line_on_stderr_with_its_code(cluster, args):
    s = cluster()
    done = s.poolctl(*args, check=False)
    assert done.returncode in (1, 2) and done.stdout == ""
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert re.match(r"poolctl: [A-Z_]+: \S", done.stderr), done.stderr


def test_poolctl_split_is_documented_and_refuses_unallocated_as_a_share(cluster):
    s = cluster()
    helptext = s.poolctl("split", "--help").stdout
    assert "milli-devices" in " ".join(helptext.split()) and "largest remainder" in " ".join(helptext.split())
    done = s.poolctl("split", "--total-uj", "10", "--grade", "HwShunt", "--share", "unallocated=1", check=False)
    assert done.returncode == 2 and done.stderr.startswith("poolctl: INVALID_ARGUMENT: 'unallocated'")


def test_claims_filter_sort_and_show_one_claim_in_full(cluster):
    s = cluster(tree=BIG_TREE)
    s.register("w1", gpus=1)
    submit(s, "run", "--tenant", "beta", "--estimate-uj", "1000000", "--gpu-mdev", "1000")
    submit(s, "wait-lo", "--tenant", "alpha", "--estimate-uj", "1000000", "--gpu-mdev", "1000")
    submit(s, "wait-hi", "--tenant", "alpha", "--estimate-uj", "1000000", "--gpu-mdev", "1000", "--priority", "5")
    pending = s.json("claims", "--state", "pending")["claims"]
    assert [(c["claim_id"], c["queue_position"]) for c in pending] == [("wait-hi", 1), ("wait-lo", 2)]
    assert all(c["submitted_ns"] > 0 and c["admitted_ns"] == 0 for c in pending)
    assert [c["claim_id"] for c in s.json("claims", "--state", "Admitted,pending", "--worker", "w1")["claims"]] == \
        ["run"]
    assert [c["claim_id"] for c in s.json("claims", "--sort", "age")["claims"]] == ["run", "wait-lo", "wait-hi"]
    text = s.poolctl("claims", "-o", "wide").stdout
    rows = [re.split(r"\s{2,}", line) for line in text.splitlines()[2:]]
    assert [r[0] for r in rows] == ["wait-hi", "wait-lo", "run"]     # squeue: the queue first, in its order
    position = header(text).index("position")
    assert [r[position] for r in rows] == ["1", "2", "—"]
    full = s.poolctl("claims", "wait-hi").stdout
    assert header(full) == ["field", "value"] and re.search(r"queue position\s+1\b", full)
    assert re.search(r"submitted\s+\d{4}-\d\d-\d\dT", full)
    s.poolctl("release", "run")
    admitted = s.json("claims", "wait-hi")
    assert admitted["state"] == "ADMITTED" and admitted["admitted_ns"] >= admitted["submitted_ns"] > 0
    assert s.ops.Explain(ops_pb2.ExplainRequest(claim_id="wait-hi")).worker == "w1"
