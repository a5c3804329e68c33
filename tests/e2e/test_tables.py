"""The claims table as squeue and kubectl users read it (issue 23, Must-have
5), through a real scheduler over mutual TLS with poolctl as a subprocess:
the default table fits 120 columns, -o wide shows every column,
custom-columns and --columns choose them, --no-headers drops the header,
-w prints rows as claims change, --since/--until and --worker narrow the
list, a pending claim holds nothing and an ended claim says why it ended;
`watch --tenant` starts from now unless asked for the history; and after a
restart, once the warm-up has encoded the open claims, List says what Get
says of every claim."""

from __future__ import annotations

import queue
import re
import subprocess
import threading

from scheduler.ctl.claims import COLUMNS, DEFAULT_COLUMNS

from .conftest import BIN, wait_for

J = 1_000_000


def header(text: str) -> list[str]:
    return re.split(r"\s{2,}", text.splitlines()[0].strip())


def rows(text: str, headed: bool = True) -> dict[str, dict[str, str]]:
    """Each row by its first cell, as {header: cell} (cells are separated by two spaces or more)."""
    lines = text.splitlines()
    names = header(text) if headed else None
    out = {}
    for line in lines[2:] if headed else lines:
        cells = re.split(r"\s{2,}", line.strip())
        out[cells[0]] = dict(zip(names, cells)) if names else cells
    return out


def scene(cluster):
    """A worker with one GPU: `running-claim-01` holds it, two claims wait
    for it, one was released, one withdrawn while pending, and a gang larger
    than the cluster was refused."""
    s = cluster()
    s.register("w1", gpus=1)
    submit = lambda claim, *more: s.poolctl("submit", claim, "--tenant", "alpha", "--estimate-uj",  # noqa: E731
                                            str(5 * J), *more)
    submit("done-claim-0001", "--gpu-mdev", "250", "--cpu-millis", "500")
    s.poolctl("release", "done-claim-0001")
    submit("running-claim-01", "--gpu-mdev", "1000", "--cpu-millis", "2000", "--priority", "9")
    submit("waiting-claim-01", "--gpu-mdev", "1000")
    submit("waiting-claim-02", "--gpu-mdev", "1000", "--priority", "3")   # ahead in the queue, not of the runner
    submit("withdrawn-claim1", "--gpu-mdev", "1000")
    s.poolctl("release", "withdrawn-claim1")
    for member in ("gang-member-0001", "gang-member-0002"):   # two GPUs on a one-GPU cluster
        s.poolctl("submit", member, "--tenant", "beta", "--estimate-uj", str(J), "--gpu-mdev", "1000",
                  "--gang", "too-big", "--gang-size", "2", check=False)
    return s


def test_the_default_table_fits_120_columns_with_what_an_operator_reads_first(cluster):
    s = scene(cluster)
    text = s.poolctl("claims").stdout
    assert header(text) == [COLUMNS[n][0] for n in DEFAULT_COLUMNS] == \
        ["claim", "tenant", "state", "reason", "gpus", "cpu", "estimate", "hold", "age", "elapsed", "worker"]
    assert max(map(len, text.splitlines())) <= 120, text
    table = rows(text)
    assert list(table)[:3] == ["waiting-claim-02", "waiting-claim-01", "running-claim-01"]   # the queue first
    pending = table["waiting-claim-01"]
    assert (pending["state"], pending["reason"], pending["hold"], pending["elapsed"], pending["worker"]) == \
        ("PENDING", "ESTIMATOR_MAY_NOT_BORROW", "—", "—", "—")
    assert (pending["gpus"], pending["estimate"]) == ("1", "5.000 J")
    running = table["running-claim-01"]
    assert (running["reason"], running["hold"], running["cpu"], running["worker"]) == \
        ("ADMISSIBLE", "5.000 J", "2", "w1")
    assert re.fullmatch(r"\d+s", running["elapsed"])
    done = table["done-claim-0001"]
    assert (done["state"], done["reason"], done["gpus"], done["cpu"]) == \
        ("RELEASED", "released by operator", "0.25", "500m")
    assert table["withdrawn-claim1"]["reason"] == "withdrawn by operator"
    assert (table["gang-member-0001"]["state"], table["gang-member-0001"]["reason"]) == ("REFUSED", "GANG_NEVER_FITS")


def test_wide_custom_columns_and_no_headers(cluster):
    s = scene(cluster)
    wide = s.poolctl("claims", "-o", "wide").stdout
    assert header(wide) == [COLUMNS[n][0] for n in COLUMNS]
    done = rows(wide)["done-claim-0001"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", done["end"]) and done["released by"] == "operator"
    assert rows(wide)["waiting-claim-02"]["position"] == "1"
    custom = s.poolctl("claims", "-o", "custom-columns=ID:claim,MDEV:.request.resources.gpu_mdev,HELD:hold",
                       "--sort", "id").stdout
    assert header(custom) == ["ID", "MDEV", "HELD"]
    assert rows(custom)["done-claim-0001"] == {"ID": "done-claim-0001", "MDEV": "250", "HELD": "5.000 J"}
    chosen = s.poolctl("claims", "--columns", "claim,state", "--no-headers", "--sort", "id").stdout
    assert chosen.splitlines()[0].split() == ["done-claim-0001", "RELEASED"]
    assert all(len(line.split()) == 2 for line in chosen.splitlines())
    bad = s.poolctl("claims", "-o", "custom-columns=ID:nonsense", check=False)
    assert bad.returncode == 2 and bad.stderr.startswith("poolctl: USAGE: custom-columns: unknown column 'nonsense'")
    bad = s.poolctl("claims", "--columns", "claim,nonsense", check=False)
    assert bad.returncode == 2 and "unknown column 'nonsense'" in bad.stderr


def test_worker_since_and_until(cluster):
    s = scene(cluster)
    on_w1 = s.poolctl("claims", "--worker", "w1", "--no-headers").stdout
    assert list(rows(on_w1, headed=False)) == ["running-claim-01"]   # open claims only
    every = rows(s.poolctl("claims", "--worker", "w1", "--all").stdout)
    assert set(every) == {"running-claim-01", "done-claim-0001"}
    assert set(rows(s.poolctl("claims", "--since", "1h").stdout)) >= {"done-claim-0001", "waiting-claim-01"}
    later = rows(s.poolctl("claims", "--since", "now").stdout)
    assert "done-claim-0001" not in later and "waiting-claim-01" in later   # ended before now; open
    assert rows(s.poolctl("claims", "--until", "2000-01-01").stdout) == {}
    assert s.poolctl("claims", "--since", "yesterday", check=False).returncode == 2


class Lines:
    """A subprocess's stdout, a line at a time, read by a thread."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.lines: queue.Queue = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=lambda: [self.lines.put(line) for line in process.stdout], daemon=True).start()

    def has(self, pattern: str) -> bool:
        while not self.lines.empty():
            self.seen.append(self.lines.get().rstrip("\n"))
        return any(re.search(pattern, line) for line in self.seen)


def test_watch_prints_the_table_then_a_row_per_change(cluster):
    s = scene(cluster)
    process = subprocess.Popen([str(BIN / "poolctl"), "claims", "-w", "--state", "pending,admitted"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=s.env())
    try:
        out = Lines(process)
        wait_for("the table", lambda: out.has(r"^running-claim-01\s"))
        assert out.seen[0].split()[:3] == ["claim", "tenant", "state"] and len(out.seen) == 2 + 3
        s.poolctl("release", "waiting-claim-01")   # no longer pending or admitted: not shown
        s.poolctl("submit", "late-claim-0001", "--tenant", "beta", "--estimate-uj", str(J))
        wait_for("the new claim's row", lambda: out.has(r"^late-claim-0001\s+beta\s+(PENDING|ADMITTED)\s"))
        assert not out.has(r"RELEASED"), "a claim that no longer matches is not printed"
        widths = [m.start() for m in re.finditer(r"\S+", out.seen[0])]
        last = out.seen[-1]
        assert [m.start() for m in re.finditer(r"\S+", last)][:3] == widths[:3], "a new row keeps the table's columns"
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_watch_tenant_starts_from_now_unless_asked_for_history(cluster):
    s = scene(cluster)

    def watching(*flags: str) -> tuple[subprocess.Popen, Lines]:
        process = subprocess.Popen([str(BIN / "poolctl"), "watch", "--tenant", "alpha", *flags],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=s.env())
        return process, Lines(process)

    history, old = watching("--history")
    fresh, new = watching()
    try:
        wait_for("the history", lambda: old.has(r"\bCURRENT\s+done-claim-0001\s"))
        wait_for("the header", lambda: new.has(r"^time\s+event"))
        s.poolctl("submit", "late-claim-0001", "--tenant", "alpha", "--estimate-uj", str(J))
        wait_for("the new claim", lambda: new.has(r"\b(SUBMITTED|ADMITTED)\s+late-claim-0001\s")
                 and old.has(r"late-claim-0001"))
        assert not new.has(r"\bCURRENT\b"), new.seen
    finally:
        for process in (history, fresh):
            process.terminate()
            process.wait(timeout=10)


def test_after_a_restart_the_list_says_what_get_says_of_every_claim(cluster):
    """Start-up encodes the open claims' List statuses between calls
    (claims.warm_listing, which logs how many): after a restart, with the
    warm-up done, every page says of each claim what Get says, field for field
    (over mutual TLS, as the pages are sent: claims.add_to_server)."""
    from protos.pool.v1 import claims_pb2, types_pb2
    s = scene(cluster)
    s.stop()
    s.config.write_text(s.config.read_text().replace('log_level = "warning"', 'log_level = "info"', 1))
    s.start()
    wait_for("the warm-up's log line", lambda: "open claims' statuses encoded" in s.log())
    request, listed = claims_pb2.ListClaimsRequest(page_size=2), []
    while True:
        answer = s.claims.List(request, timeout=10)
        listed += answer.claims
        if not answer.next_page_token:
            break
        request.page_token = answer.next_page_token
    assert len(listed) == 7 and len({(c.tenant, c.claim_id) for c in listed}) == 7   # the scene's claims
    for status in listed:
        assert status == s.claims.Get(claims_pb2.GetClaimRequest(claim_id=status.claim_id, tenant=status.tenant),
                                      timeout=10), status.claim_id
    waiting = [c for c in listed if c.state == types_pb2.PENDING]
    assert [c.queue_position for c in sorted(waiting, key=lambda c: c.queue_position)] == [1, 2]
    open_ = sum(c.state in (types_pb2.PENDING, types_pb2.ADMITTED) for c in listed)
    assert re.search(rf"listing: {open_} open claims' statuses encoded in [0-9.]+ s, between calls", s.log())
