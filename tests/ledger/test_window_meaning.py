"""verify checks what a window means, as the scheduler does when it takes one
(evidence.py): each steward-signed `windows` receipt that breaks a rule is
refused at its index with reason `body` and the rule in the detail, and the
windows the scheduler writes verify."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protos.pool.v1 import claims_pb2
from scheduler.ledger import export
from scheduler.ledger.verify import verify
from scheduler.service import bodies
from tests.e2e.conftest import cluster, wait_for  # noqa: F401  (a real scheduler and agent)


def window(seq, start, end, uj=10, shares=((("c1", 10)),), device="gpu-0", gap=None, lost=0):
    return {"device": device, "seq": seq, "start_ns": start, "end_ns": end, "uj": uj, "grade": "HwShunt",
            "shares": list(shares), "gap": gap, "lost": lost}


def body(worker, *ws, gaps=None):
    """A windows body from per-window dicts (gap columns when any window has a gap, or when asked)."""
    out = {"worker": worker, "device": [], "seq": [], "start_ns": [], "end_ns": [], "uj": [], "grade": [],
           "shares": [], "occupant": [], "share_uj": [], "share_grade": []}
    for w in ws:
        for name in ("device", "seq", "start_ns", "end_ns", "uj", "grade"):
            out[name].append(w[name])
        out["shares"].append(len(w["shares"]))
        for occupant, uj in w["shares"]:
            out["occupant"].append(occupant)
            out["share_uj"].append(uj)
            out["share_grade"].append("HwShunt")
    if gaps if gaps is not None else any(w["uj"] is None for w in ws):
        out["gap"] = [w["gap"] for w in ws]
        out["lost"] = [w["lost"] for w in ws]
    return out


def check(build, key, entries):
    stream = build(entries)
    return verify(list(export.split(b"".join(stream))), key.public, workers=1, bodies=bodies.check,
                  follows=bodies.Tiling())


GOOD = [("windows", body("w1", window(1, 0, 100), window(2, 100, 200),
                         window(3, 200, 300, uj=None, shares=(), gap="AgentDown"))),
        ("windows", body("w1", window(3, 200, 300), window(4, 300, 400, device="gpu-1"),
                         window(5, 300, 350, uj=None, shares=(), gap="SpoolOverflow", lost=4),
                         window(6, 350, 500, uj=7, shares=(("c1", 3), ("c2", 4))))),
        ("windows", body("w2", window(1, 0, 100)))]


def test_the_windows_the_scheduler_writes_verify(build, steward_key):
    report = check(build, steward_key, GOOD)
    assert report.valid, report.detail


@pytest.mark.parametrize("bad, needle", [
    (body("w1", window(9, 500, 600, uj=10, shares=(("c1", 4), ("c2", 5)))), "shares sum to 9, not the window's 10"),
    (body("w1", window(9, 600, 600)), "end_ns 600 is not after start_ns 600"),
    (body("w1", window(9, 700, 650)), "is not after start_ns"),
    (body("w1", window(9, 500, 600, uj=None, shares=(), gap="Bogus")), "gap reason 'Bogus' is not one of"),
    ({k: v for k, v in body("w1", window(9, 500, 600, uj=None, shares=(), gap="AgentDown")).items() if k != "lost"},
     "gap and lost come together"),
    (body("w1", window(9, 500, 600, gap="MeterError"), gaps=True), "a window with a figure has no gap reason"),
    (body("w1", window(9, 500, 600, lost=3), gaps=True), "lost windows are counted only on a gap"),
    (body("w1", window(9, 500, 600, uj=None, shares=(("c1", 0),), gap="AgentDown")), "no figure has no shares"),
    (body("w1", window(9, 450, 600)), "starts at 450, before the device's previous window ended at 500"),
    (body("w2", window(2, 50, 150)), "w2/gpu-0 starts at 50, before"),
])
def test_a_window_that_breaks_a_rule_is_refused_at_its_receipt(build, steward_key, bad, needle):
    at = len(GOOD) + 1
    report = check(build, steward_key, GOOD + [("windows", bad)] + GOOD[2:])
    assert (report.valid, report.reason, report.first_bad_index) == (False, "body", at), report.detail
    assert needle in report.detail and report.signatures_ok and report.chain_ok


def test_a_resent_window_is_not_an_overlap(build, steward_key):
    """Windows at or below the host's highest seq change nothing (a resend)."""
    report = check(build, steward_key, GOOD + [("windows", body("w1", window(2, 100, 200), window(7, 500, 600)))])
    assert report.valid, report.detail


def test_a_real_agents_windows_verify_with_every_rule(cluster, tmp_path):  # noqa: F811
    """A scheduler fed by a real pool-agent writes windows that pass every rule above."""
    s = cluster()
    cluster.agent(s, "host-a")
    s.claims.Submit(claims_pb2.SubmitRequest(claim_id="c1", tenant="alpha", estimate_uj=1000))
    out = tmp_path / "ledger.cbor"

    def windows() -> int:
        s.poolctl("ledger", "fetch", "--out", str(out))
        return sum(1 for raw in export.split(out.read_bytes()) if b"windows" in raw)
    wait_for("three windows receipts", lambda: windows() >= 3, timeout_s=60)
    report = json.loads(s.poolctl("ledger", "verify", str(out), "-o", "json").stdout)
    assert report["valid"], report


@st.composite
def tiled_batches(draw):
    """Batches of one host's windows as an agent makes them: each device's
    windows tile time, shares sum to the figure, gaps carry a reason."""
    devices = draw(st.lists(st.sampled_from(["gpu-0", "gpu-1", "cpu:0"]), min_size=1, max_size=3, unique=True))
    ends = {d: draw(st.integers(0, 10**6)) for d in devices}
    seq, batches = 0, []
    for _ in range(draw(st.integers(1, 4))):
        ws = []
        for _ in range(draw(st.integers(1, 5))):
            device = draw(st.sampled_from(devices))
            seq += 1
            start, length = ends[device], draw(st.integers(1, 10**6))
            ends[device] = start + length
            if draw(st.booleans()) and draw(st.booleans()):
                ws.append(window(seq, start, start + length, uj=None, shares=(), device=device,
                                 gap=draw(st.sampled_from(sorted(bodies.GAP_REASONS) + [None])),
                                 lost=draw(st.integers(0, 3))))
            else:
                parts = draw(st.lists(st.integers(0, 10**6), min_size=1, max_size=3))
                ws.append(window(seq, start, start + length, uj=sum(parts), device=device,
                                 shares=tuple((f"c{i}", p) for i, p in enumerate(parts))))
        batches.append(("windows", body("w1", *ws)))
    return batches


@settings(max_examples=40, deadline=None)
@given(tiled_batches())
def test_windows_an_agent_makes_verify(build, steward_key, batches):
    report = check(build, steward_key, batches)
    assert report.valid, report.detail


MUTATIONS = {
    "overlap": lambda w, prev_end: {**w, "start_ns": prev_end - 1} if prev_end else None,
    "shares": lambda w, _: {**w, "shares": [*w["shares"], ("extra", 1)]} if w["uj"] is not None else None,
    "end": lambda w, _: {**w, "end_ns": w["start_ns"]},
    "gap_on_figure": lambda w, _: {**w, "gap": "MeterError"} if w["uj"] is not None else None,
    "lost_on_figure": lambda w, _: {**w, "lost": 2} if w["uj"] is not None else None,
}


@settings(max_examples=60, deadline=None)
@given(tiled_batches(), st.data())
def test_any_broken_window_rule_is_refused_at_its_receipt(build, steward_key, batches, data):
    """One rule broken in one window of one batch: refused there, with reason body."""
    at = data.draw(st.integers(0, len(batches) - 1))
    columns = batches[at][1]
    i = data.draw(st.integers(0, len(columns["seq"]) - 1))
    bounds = [0]
    for n in columns["shares"]:
        bounds.append(bounds[-1] + n)
    w = {name: columns[name][i] for name in ("device", "seq", "start_ns", "end_ns", "uj", "grade")}
    w["shares"] = list(zip(columns["occupant"][bounds[i]:bounds[i + 1]], columns["share_uj"][bounds[i]:bounds[i + 1]]))
    w["gap"], w["lost"] = (columns["gap"][i], columns["lost"][i]) if "gap" in columns else (None, 0)
    earlier = [(columns["device"][j], columns["end_ns"][j]) for j in range(i)] + \
        [(d, e) for _, b in batches[:at] for d, e in zip(b["device"], b["end_ns"])]
    prev_end = max((e for d, e in earlier if d == w["device"]), default=0)
    name = data.draw(st.sampled_from(sorted(MUTATIONS)))
    broken = MUTATIONS[name](w, prev_end)
    if broken is None:
        return   # this mutation does not apply to this window
    rebuilt = []
    for j in range(len(columns["seq"])):
        if j == i:
            rebuilt.append(broken)
            continue
        rebuilt.append({"device": columns["device"][j], "seq": columns["seq"][j], "start_ns": columns["start_ns"][j],
                        "end_ns": columns["end_ns"][j], "uj": columns["uj"][j], "grade": columns["grade"][j],
                        "shares": list(zip(columns["occupant"][bounds[j]:bounds[j + 1]],
                                           columns["share_uj"][bounds[j]:bounds[j + 1]])),
                        "gap": columns["gap"][j] if "gap" in columns else None,
                        "lost": columns["lost"][j] if "lost" in columns else 0})
    gaps = "gap" in columns or broken["gap"] is not None or broken["lost"] != 0
    mutated = batches[:at] + [("windows", body("w1", *rebuilt, gaps=gaps))] + batches[at + 1:]
    report = check(build, steward_key, mutated)
    assert (report.valid, report.reason, report.first_bad_index) == (False, "body", at + 1), (name, report.detail)
