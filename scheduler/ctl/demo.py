"""`poolctl demo`: the whole system on this machine, in under a minute.

It starts a scheduler (temporary directory, embedded SQLite ledger, fresh
keys, a throwaway PKI) and one agent on this host — NVML when a GPU is there,
else replaying the bundled H200 trace — and plays a scenario through the real
gRPC API over mutual TLS: each tenant's claims are submitted with that
tenant's certificate, the agent streams with its host's, an operator reads,
cordons, drains and reclaims, a witness signs the ledger, and one
cross-tenant call is shown refused. A claim is planned with a dry run
before it is submitted, and both daemons export Prometheus metrics (their
addresses are printed; a few figures are read back at the end).
Every figure printed comes from the running system; nothing is scripted but
the requests.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import urllib.request
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from protos.energy import format_uj
from protos.pool.v1 import claims_pb2, claims_pb2_grpc, ops_pb2, ops_pb2_grpc, types_pb2
from scheduler.ctl import certs
from scheduler.ctl.claims import render_claims, render_plan
from scheduler.ctl import plots
from scheduler.ctl.ops import (render_explain, render_preemption, render_reclamation, render_split_totals,
                               render_tenants, render_workers, splits_doc)
from scheduler.ctl.output import CtlError, add_output_flag, output, table
from scheduler.ctl.wire import as_ctl_error, grade_label, pages, to_doc
from scheduler.ledger import export, keys, witness
from scheduler.ledger.verify import verify

J = 1_000_000          # µJ per joule
SLICE = 100            # mdev: every demo claim holds a tenth of a GPU
IDLE_W = 200           # a threshold between the H200's parked draw (~113 W) and working draw (≥ 300 W)
STEP_CLASS = "step"
# (name, parent, guarantee in J, guarantee in milli-GPUs): research and adhoc get almost no
# energy of their own, so what they run beyond it must be borrowed from training's surplus.
TENANTS = (("cluster", "", 50_010, 1000), ("training", "cluster", 50_000, 700),
           ("research", "cluster", 5, 200), ("adhoc", "cluster", 5, 100))
BIN = Path(sys.executable).parent
AGENT_HOST = "demo-host"
# principals beside one per tenant (named as the tenant): (name, role)
STAFF = (("operator", "operator"), ("auditor", "auditor"), ("witness", "witness"), (AGENT_HOST, "agent"))
# Idle thresholds belong to hardware (RULES §8): only these are known here.
KNOWN_THRESHOLDS_W = {"replay": IDLE_W, "NVIDIA H200": IDLE_W, "NVIDIA H100 80GB HBM3": IDLE_W}


def register(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("demo", help="run a scheduler and an agent here through a short scenario")
    p.add_argument("--replay-speed", type=float, default=4.0,
                   help="how much faster than real time the bundled trace plays (no GPU)")
    p.add_argument("--keep", action="store_true", help="keep the working directory (its path is printed): the "
                   "PKI and a scheduler.toml that `pool-scheduler --config` starts again")
    add_output_flag(p)
    p.set_defaults(run=run)


def run(args: Any) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="pool-demo-"))
    try:
        with Demo(args, workdir) as demo:
            demo.play()
        return 0
    finally:
        if args.keep:
            pki = workdir / "pki"
            print(f"working directory kept: {workdir}\n  start it again: pool-scheduler --config "
                  f"{workdir / 'scheduler.toml'}\n  then, as the operator: POOL_SCHEDULER={_address(workdir)} "
                  f"POOL_CA={pki / 'ca.pem'} POOL_CERT={pki / 'operator.pem'} POOL_KEY={pki / 'operator.key'} "
                  "poolctl claims", file=sys.stderr)
        else:
            _remove_all_but_plots(workdir)


def _remove_all_but_plots(workdir: Path) -> None:
    """The demo's directory goes, except the plots it said it wrote there."""
    for path in workdir.iterdir():
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        elif path.suffix != ".png":
            path.unlink(missing_ok=True)
    if not any(workdir.iterdir()):
        workdir.rmdir()


def _address(workdir: Path) -> str:
    for line in (workdir / "scheduler.toml").read_text().splitlines():
        if line.startswith("listen = "):
            return line.split('"')[1]
    return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _gpu_types() -> list[str]:
    """GPU types NVML reports on this host (`pool-agent --check`), else none."""
    out = subprocess.run([str(BIN / "pool-agent"), "--check"], capture_output=True, text=True, timeout=60)
    return [line.split("  ")[1] for line in out.stdout.splitlines() if line.startswith("GPU-")]


class Demo:
    def __init__(self, args: Any, workdir: Path) -> None:
        self.args, self.dir = args, workdir
        self.json = output(args) == "json"
        self.report: dict[str, Any] = {}
        self.processes: list[subprocess.Popen] = []
        self.address = f"127.0.0.1:{_free_port()}"
        self.metrics = {"scheduler": f"127.0.0.1:{_free_port()}", "agent": f"127.0.0.1:{_free_port()}"}
        self.gpus = _gpu_types()

    # -- narration -----------------------------------------------------------

    def say(self, text: str) -> None:
        if not self.json:
            print(text, flush=True)

    def show(self, heading: str, text: str) -> None:
        self.say(f"\n== {heading}\n{text}")

    # -- processes -----------------------------------------------------------

    def _make_pki(self) -> None:
        """A CA, the scheduler's certificate, and one per principal (docs/OPERATIONS.md, Security)."""
        self.pki = self.dir / "pki"
        certs.make_ca(self.pki)
        certs.make_server(self.pki, ("127.0.0.1", "localhost"))
        for name in [n for n, _ in STAFF] + [t[0] for t in TENANTS]:
            certs.make_client(self.pki, name)
        self.witness_key = keys.generate()
        keys.write_pair(self.witness_key, self.dir / "witness")

    def channel_as(self, principal: str) -> grpc.Channel:
        if principal not in self._channels:
            pem = lambda suffix: (self.pki / f"{principal}{suffix}").read_bytes()  # noqa: E731
            credentials = grpc.ssl_channel_credentials((self.pki / "ca.pem").read_bytes(), pem(".key"), pem(".pem"))
            self._channels[principal] = grpc.secure_channel(self.address, credentials)
        return self._channels[principal]

    def claims_as(self, tenant: str) -> claims_pb2_grpc.ClaimsStub:
        """A tenant's own Claims client: its principal is named as the tenant."""
        return claims_pb2_grpc.ClaimsStub(self.channel_as(tenant))

    def __enter__(self) -> Demo:
        self.steward = keys.generate()
        keys.write_pair(self.steward, self.dir / "steward")
        self._make_pki()
        self._channels: dict[str, grpc.Channel] = {}
        (self.dir / "scheduler.toml").write_text(self._scheduler_config())
        self._spawn("scheduler", [str(BIN / "pool-scheduler"), "--config", str(self.dir / "scheduler.toml")])
        self.channel = self.channel_as("operator")
        self.claims = claims_pb2_grpc.ClaimsStub(self.channel)
        self.ops = ops_pb2_grpc.OperationsStub(self.channel)
        self._wait("the scheduler to serve", self._serving, 30)
        self.say("Every call below goes over mutual TLS: each tenant submits with its own certificate, "
                 f"the agent streams as {AGENT_HOST!r}, the operator reads and reclaims, a witness signs.")
        (self.dir / "agent.toml").write_text(self._agent_config())
        command = [str(BIN / "pool-agent"), "--config", str(self.dir / "agent.toml")]
        if self.gpus:
            self.say(f"GPU found ({', '.join(self.gpus)}): the agent meters it through NVML.")
        else:
            command += ["--replay", "bundled", "--replay-speed", str(self.args.replay_speed)]
            self.say(f"No GPU here: the agent replays a real H200 recording at {self.args.replay_speed:g}x "
                     "(idle, a bf16 matmul, memory copies, then a parked process holding memory).")
        self.agent = self._spawn("agent", command)
        self._wait("the agent to register", lambda: any(w.live for w in self.ops.Workers(
            ops_pb2.WorkersRequest()).workers), 30)
        self.report["mode"] = "nvml" if self.gpus else "replay"
        urls = {name: f"http://{address}/metrics" for name, address in self.metrics.items()}
        self.say(f"Metrics (Prometheus): scheduler {urls['scheduler']}, agent {urls['agent']}")
        self.report["metrics"] = dict(urls)
        return self

    def __exit__(self, *exc: object) -> None:
        for process in reversed(self.processes):
            process.terminate()
        for process in reversed(self.processes):
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
            if process.poll() is None:
                process.kill()
        if self.json and exc[0] is None:
            print(json.dumps(self.report, indent=2))

    def _spawn(self, name: str, command: list[str]) -> subprocess.Popen:
        log = open(self.dir / f"{name}.log", "w")
        self.processes.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL, start_new_session=True))
        return self.processes[-1]

    def _serving(self) -> bool:
        try:
            answer = health_pb2_grpc.HealthStub(self.channel).Check(health_pb2.HealthCheckRequest(), timeout=1)
        except grpc.RpcError:
            return False
        return answer.status == health_pb2.HealthCheckResponse.SERVING

    def _wait(self, what: str, ready: Callable[[], bool], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            for process in self.processes:
                if process.poll() is not None:
                    raise CtlError("DEMO_FAILED", f"a daemon exited ({process.args[0]}); see {self.dir} with --keep")
            if time.monotonic() > deadline:
                raise CtlError("DEMO_FAILED", f"timed out waiting for {what}")
            time.sleep(0.1)

    def _scheduler_config(self) -> str:
        thresholds = "".join(f'\n[[idle.thresholds]]\ndevice_kind = "{kind}"\nuw = {watts * J}\n'
                             for kind, watts in KNOWN_THRESHOLDS_W.items())
        tenants = "".join(f'[[tenants]]\nname = "{name}"\nparent = "{parent}"\nguarantee_uj = {joules * J}\n'
                          f'guarantee_mdev = {mdev}\n\n' for name, parent, joules, mdev in TENANTS)
        principals = "".join(f'[principals.{name}]\nrole = "{role}"\n\n' for name, role in STAFF)
        principals += "".join(f'[principals.{t[0]}]\nrole = "tenant"\ntenants = ["{t[0]}"]\n\n' for t in TENANTS)
        return f"""
[server]
listen = "{self.address}"
metrics = "{self.metrics['scheduler']}"
log_level = "warning"

[server.tls]
cert = "{self.pki / 'server.pem'}"
key = "{self.pki / 'server.key'}"
client_ca = "{self.pki / 'ca.pem'}"

[ledger]
path = "{self.dir / 'ledger.sqlite'}"
steward_key = "{self.dir / 'steward.key'}"
witness_keys = ["{self.dir / 'witness.pub'}"]

{principals}
{tenants}
[[work_classes]]
name = "{STEP_CLASS}"
required = 2

[idle]
window_ns = 3_000_000_000
{thresholds}"""

    def _agent_config(self) -> str:
        return f"""
host_id = "{AGENT_HOST}"
scheduler = "{self.address}"
state_dir = "{self.dir / 'agent-state'}"
log_level = "warning"

[metrics]
listen = "{self.metrics['agent']}"

[stream.tls]
ca = "{self.pki / 'ca.pem'}"
cert = "{self.pki / f'{AGENT_HOST}.pem'}"
key = "{self.pki / f'{AGENT_HOST}.key'}"
"""

    # -- requests ------------------------------------------------------------

    def submit(self, claim_id: str, tenant: str, mdev: int = SLICE, **fields: Any) -> dict:
        request = claims_pb2.SubmitRequest(claim_id=claim_id, tenant=tenant,
                                           resources=types_pb2.Resources(gpu_mdev=mdev), **fields)
        return to_doc(self.claims_as(tenant).Submit(request))

    def status(self, claim_id: str) -> dict:
        return to_doc(self.claims.Get(claims_pb2.GetClaimRequest(claim_id=claim_id)))

    def release(self, *claim_ids: str) -> list[dict]:
        """Release the claims still open (a preempted one is settled already)."""
        open_ = [status for c in claim_ids if (status := self.status(c))["state"] in ("PENDING", "ADMITTED")]
        return [to_doc(self.claims_as(s["tenant"]).Release(claims_pb2.ReleaseRequest(claim_id=s["claim_id"])))
                for s in open_]

    def tenants(self) -> dict:
        return to_doc(self.ops.Tenants(ops_pb2.TenantsRequest()))

    def measured_for(self, claim_ids: list[str], windows: int) -> None:
        """Wait until each claim has energy from at least `windows` windows."""
        def enough() -> bool:
            rows = [r for page in pages(self.ops.Splits, ops_pb2.SplitsRequest()) for r in page.rows]
            return all(sum(r.claim_id == c for r in rows) >= windows for c in claim_ids)
        self._wait(f"{windows} metered windows for {', '.join(claim_ids)}", enough, 40)

    # -- the scenario ----------------------------------------------------------

    def play(self) -> None:
        self.show("Tenants: guarantees in µJ and milli-GPUs", render_tenants(self.tenants()))
        self.calibrate()
        self.gang()
        self.cross_tenant_refused()
        self.borrow()
        self.estimator_refused()
        self.preempt()
        self.reclaim_idle()
        self.cordon_and_drain()
        self.splits()
        self.read_metrics()
        self.ledger()

    def calibrate(self) -> None:
        self.say("\nTwo calibration runs of work class 'step' (research), each declaring 1 J (a guess):")
        for c in ("cal-1", "cal-2"):
            self.submit(c, "research", work_class=STEP_CLASS, estimate_uj=1 * J)
        self.measured_for(["cal-1", "cal-2"], 3)
        released = self.release("cal-1", "cal-2")
        self.show("Released: the measured actual replaces the 1 J hold (an overrun, flagged)", render_claims(released))
        estimate = to_doc(self.ops.Estimate(ops_pb2.EstimateRequest(work_class=STEP_CLASS)))
        self.say(f"\nDerived estimate for '{STEP_CLASS}': {format_uj(estimate['estimate_uj'])} "
                 f"({grade_label(estimate['grade'])}: the largest of {estimate['eligible']} measured runs)")
        self.report["estimate"] = estimate

    def cross_tenant_refused(self) -> None:
        """adhoc's certificate tries to release training's claim: refused before any handler, no receipt."""
        before = self.ops.LedgerHead(ops_pb2.LedgerHeadRequest()).length
        try:
            self.claims_as("adhoc").Release(claims_pb2.ReleaseRequest(claim_id="train-0"))
            refused = {"code": None, "status": None}
        except grpc.RpcError as error:
            failure = as_ctl_error(error)
            refused = {"code": failure.code, "status": error.code().name, "message": str(failure)}
        refused["receipts_added"] = self.ops.LedgerHead(ops_pb2.LedgerHeadRequest()).length - before
        self.say(f"\nadhoc's certificate asks to release training's claim train-0: {refused.get('status')} "
                 f"{refused.get('message')} ({refused['receipts_added']} receipts written)")
        self.report["cross_tenant"] = refused

    def gang(self) -> None:
        first = self.submit("train-0", "training", gang_id="train", gang_size=2, estimate_uj=2_000 * J)
        self.say(f"\nGang 'train' (2 members): after the first member, train-0 is {first['state']} "
                 f"({first['reason']}) and holds nothing.")
        self.submit("train-1", "training", gang_id="train", gang_size=2, estimate_uj=2_000 * J)
        members = [self.status("train-0"), self.status("train-1")]
        self.show("The second member arrives: the gang is admitted whole", render_claims(members))
        self.report["gang"] = {m["claim_id"]: m["state"] for m in members}

    def borrow(self) -> None:
        for c in ("r-1", "r-2"):
            self.submit(c, "research", mdev=2 * SLICE, work_class=STEP_CLASS)
        claims = [self.status("r-1"), self.status("r-2")]
        self.show("research asks for two 'step' runs of 0.2 GPU each, beyond its 5 J and 0.2 GPU guarantees: "
                  "the derived (ModelBased) estimate may borrow training's unused guarantee", render_claims(claims))
        self.say("borrowed: " + ", ".join(f"{c['claim_id']}={c['borrowed']}" for c in claims))
        self.show("Tenants now", render_tenants(self.tenants()))
        self.report["borrow"] = {c["claim_id"]: {"state": c["state"], "borrowed": c["borrowed"]} for c in claims}

    def estimator_refused(self) -> None:
        hold = self.report["estimate"]["estimate_uj"]
        claim = self.submit("x-1", "adhoc", estimate_uj=hold)
        explanation = to_doc(self.ops.Explain(ops_pb2.ExplainRequest(claim_id="x-1")))
        self.show(f"adhoc declares the same {format_uj(hold)} as a guess (Estimator): a guess may not spend "
                  "a neighbour's capacity", render_explain(explanation))
        self.report["estimator"] = {"state": claim["state"], "reason": claim["reason"]}

    def preempt(self) -> None:
        self.claims_as("research").Progress(claims_pb2.ProgressRequest(claim_id="r-1", completed_units=10))
        self.claims_as("research").Progress(claims_pb2.ProgressRequest(claim_id="r-2", completed_units=2))
        self.measured_for(["r-1", "r-2"], 2)
        order = to_doc(self.ops.PreemptionOrder(ops_pb2.PreemptionOrderRequest()))
        self.show("r-1 reports 10 completed units, r-2 reports 2: preemption order, worst µJ per unit first",
                  render_preemption(order))
        urgent = claims_pb2.SubmitRequest(claim_id="t-urgent", tenant="training", estimate_uj=100 * J,
                                          resources=types_pb2.Resources(gpu_mdev=5 * SLICE))
        before = self.ops.LedgerHead(ops_pb2.LedgerHeadRequest()).length
        plan = to_doc(self.claims_as("training").Plan(claims_pb2.PlanRequest(claims=[urgent])))
        added = self.ops.LedgerHead(ops_pb2.LedgerHeadRequest()).length - before
        self.show("training first asks what half a GPU would get now: a dry run (Claims.Plan, "
                  "`poolctl submit --dry-run`) decides it as Submit would and records nothing", render_plan(plan))
        self.report["dry_run"] = {"state": plan["claims"][0]["state"], "receipts_added": added,
                                  "victims": [v["claim_id"] for v in plan["victims"]]}
        claim = to_doc(self.claims_as("training").Submit(urgent))
        victims = [self.status(c) for c in ("r-1", "r-2")]
        self.show("training claims half a GPU, inside its own 0.7 GPU guarantee, but research borrowed part of it: "
                  "lent capacity is taken back, worst cost per unit first, no more than needed",
                  render_claims([claim, *victims]))
        self.report["preemption"] = {"t-urgent": claim["state"], **{v["claim_id"]: v["state"] for v in victims}}

    def reclaim_idle(self) -> None:
        self.release("train-0", "train-1", "r-1", "t-urgent", "x-1")
        self.submit("nb-1", "training", estimate_uj=100 * J)
        self.say("\nEveryone else finishes; a notebook (nb-1) keeps a tenth of the GPU. Idle policy: below "
                 f"{IDLE_W} W per whole GPU over 3 s of measurements (scaled: {IDLE_W * SLICE // 1000} W for nb-1).")
        seen: list[str] = []

        def idle() -> bool:
            order = to_doc(self.ops.ReclamationOrder(ops_pb2.ReclamationOrderRequest()))
            verdict = next(v for v in order["verdicts"] if v["claim_id"] == "nb-1")
            if not seen or seen[-1] != verdict["verdict"]:
                seen.append(verdict["verdict"])
                self.show(f"Verdicts: nb-1 is {verdict['verdict']}", render_reclamation(order))
            self.last_verdicts = order
            return verdict["verdict"] == "IDLE"

        if not self.gpus or any(g in KNOWN_THRESHOLDS_W for g in self.gpus):
            self._wait("nb-1 to be found idle", idle, 45)
            reclaimed = to_doc(self.ops.Reclaim(ops_pb2.ReclaimRequest()))["reclaimed"]
            self.show("Reclaimed on evidence", render_claims([self.status(c) for c in reclaimed]))
            self.report["idle"] = {"verdicts_seen": seen, "reclaimed": reclaimed}
        else:
            self.say(f"No idle threshold is known for {', '.join(self.gpus)}: nothing is reclaimed (RULES §8).")

    def cordon_and_drain(self) -> None:
        """Cordon the host: a new claim waits; uncordon: it is admitted in the
        same decision; drain: cordoned again until its owner releases it
        (nothing is preempted)."""
        cordon = lambda on: to_doc(self.ops.Cordon(ops_pb2.CordonRequest(worker=AGENT_HOST, cordoned=on)))  # noqa: E731
        worker = cordon(True)
        waiting = self.submit("late-1", "training", estimate_uj=10 * J)
        self.show(f"The operator cordons {AGENT_HOST} (`poolctl workers cordon`): nothing new is placed there",
                  render_workers({"workers": [worker]}) + "\n\n" + render_claims([waiting]))
        cordon(False)
        admitted = self.status("late-1")
        self.show("Uncordoned: late-1 is admitted in the same decision", render_claims([admitted]))
        worker = cordon(True)
        self.show(f"Drain (`poolctl workers drain {AGENT_HOST} --wait`): cordoned, waiting for the claims on it to "
                  "be released by their owners (nothing is preempted)", render_workers({"workers": [worker]}))
        holding = list(worker["active_claims"])
        self.release("late-1")
        drained = next(w for w in to_doc(self.ops.Workers(ops_pb2.WorkersRequest()))["workers"]
                       if w["worker"] == AGENT_HOST)
        self.show("late-1's owner releases it: the host is drained", render_workers({"workers": [drained]}))
        cordon(False)
        self.report["cordon"] = {"while_cordoned": waiting["state"], "reason": waiting["reason"],
                                 "uncordoned": admitted["state"], "draining_holds": holding,
                                 "drained_holds": drained["active_claims"], "drained_cordoned": drained["cordoned"]}

    def read_metrics(self) -> None:
        """A few of the scheduler's metrics, as Prometheus reads them."""
        with urllib.request.urlopen(self.report["metrics"]["scheduler"], timeout=10) as answer:
            text = answer.read().decode()
        wanted = ("pool_admissions_total", 'pool_settlements_total{kind="released"}',
                  'pool_settlements_total{kind="preempted"}', 'pool_settlements_total{kind="reclaimed"}',
                  "pool_ledger_length")
        samples = {}
        for line in text.splitlines():
            name, _, value = line.rpartition(" ")
            if name in wanted:
                samples[name] = float(value)
        self.show(f"The scheduler's metrics ({self.report['metrics']['scheduler']}), a few of them",
                  table(("metric", "value"), [(k, f"{samples.get(k, 0):g}") for k in wanted]))
        self.report["metrics"]["samples"] = samples

    def splits(self) -> None:
        splits = splits_doc(self.ops, ops_pb2.SplitsRequest())
        totals = {t["tenant"]: {"uj": t["uj"], "grade": t["grade"]} for t in splits["totals"]}
        self.show("Per-tenant joule splits (every window of the device fully accounted)",
                  render_split_totals(splits["totals"]))
        self.say(f"({len(splits['rows'])} split rows; `poolctl splits` lists them by device and window)")
        self.report["splits"] = totals
        self.plot(splits)

    def plot(self, splits: dict) -> None:
        """Both plots into the demo's directory (kept when the demo ends)."""
        written = {}
        try:
            plots.splits(splits, str(self.dir / "splits.png"))
            written["splits"] = str(self.dir / "splits.png")
            verdicts = getattr(self, "last_verdicts", None)
            if verdicts is not None:
                plots.reclamation(verdicts, str(self.dir / "reclamation.png"))
                written["reclamation"] = str(self.dir / "reclamation.png")
        except CtlError as error:   # matplotlib missing: the demo goes on without pictures
            self.say(f"\nNo plots: {error}")
            return
        self.say("\nPlots: " + ", ".join(f"{name} {path}" for name, path in written.items()))
        self.report["plots"] = written

    def ledger(self) -> None:
        # The scenario is over: the agent stops (its last windows acknowledged), so the
        # ledger stands still between the export the witness signs and the one shown.
        self.agent.terminate()
        self.agent.wait(timeout=30)
        path = self.dir / "ledger.cbor"
        export.write(self._export(), path)
        plain = verify(export.receipts_at(path), self.steward.public)
        statement = witness.sign_statement(self.witness_key, self.steward.public, plain.ledger_id, plain.length,
                                           plain.head)
        ops_pb2_grpc.OperationsStub(self.channel_as("witness")).RecordWitness(
            ops_pb2.RecordWitnessRequest(witness_receipt=statement))
        export.write(self._export(), path)
        report = verify(export.receipts_at(path), self.steward.public).document()
        self.show("The ledger, exported and verified with only the steward's public key, then witnessed",
                  table(("field", "value"), [(k, v) for k, v in report.items() if k != "witness"]))
        self.report["ledger"] = report

    def _export(self) -> Iterator[bytes]:
        blob = b"".join(c.receipts for c in self.ops.LedgerExport(ops_pb2.LedgerExportRequest()))
        return export.split(blob)
