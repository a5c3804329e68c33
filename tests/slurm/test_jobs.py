"""From a Slurm job to a claim (pool_slurm/jobs.py), and the package's
boundary: pure functions, no Slurm needed."""

import subprocess
import sys

from hypothesis import given, strategies as st

from pool_slurm import jobs as J
from pool_slurm.slurm import _task_ids, expand_hosts, jobs_from_json, parse_detail

ACCOUNTS = {"accta": J.Account("alpha"), "acctb": J.Account("beta", estimate_uj=5_000_000)}


def job(**fields) -> J.Job:
    return J.Job(**{"key": "7", "account": "accta", "tres_per_node": "gres:gpu:2",
                    "comment": "pool:estimate=10kJ", **fields})


@given(st.integers(1, 10**9), st.sampled_from(sorted(J.UNITS_UJ)))
def test_an_energy_reads_back_in_microjoules(number, unit):
    assert J.parse_energy(f"{number}{unit}") == number * J.UNITS_UJ[unit]


@given(st.text(alphabet="abc0123456789_", min_size=1, max_size=12).filter(lambda c: "." not in c),
       st.from_regex(r"[0-9]{1,7}(_[0-9]{1,4})?", fullmatch=True), st.integers(0, 99), st.integers(1, 4))
def test_claim_ids_name_their_job_attempt_and_member(cluster, key, attempt, nodes):
    ids = J.claim_ids(cluster, key, attempt, nodes)
    assert len(set(ids)) == nodes
    parsed = [J.parse_claim_id(i, cluster) for i in ids]
    assert {(k, a) for k, a, _ in parsed} == {(key, attempt)}
    assert [m for _, _, m in parsed] == ([None] if nodes == 1 else list(range(nodes)))
    assert J.parse_claim_id(ids[0], cluster + "x") is None


def test_a_job_becomes_a_claim_or_a_gang_of_exclusive_members():
    one = J.ask(job(), ACCOUNTS, 8)
    assert one == J.Ask("alpha", 1, 2, 10_000_000_000, "", 0)
    two = J.ask(job(node_count=2, comment="pool:estimate=10kJ pool:priority=3"), ACCOUNTS, 8)
    assert (two.nodes, two.gpus_per_node, two.estimate_uj, two.priority) == (2, 2, 5_000_000_000, 3)
    assert J.ask(job(account="ACCTB", comment=""), ACCOUNTS, 8).estimate_uj == 5_000_000   # the account's default
    assert J.ask(job(comment="pool:class=train"), ACCOUNTS, 8).work_class == "train"
    assert J.ask(job(tres_per_node="", tres_per_job="gres:gpu:3"), ACCOUNTS, 8).gpus_per_node == 3


def test_a_job_that_cannot_become_a_claim_says_what_to_fix():
    cases = {
        "UNKNOWN_ACCOUNT": job(account="nobody"),
        "BAD_COMMENT": job(comment="pool:estimate=lots"),
        "NO_ESTIMATE": job(comment="just a note"),
        "TOO_MANY_GPUS": job(tres_per_node="gres:gpu:9"),
        "UNSUPPORTED_GPU_REQUEST": job(tres_per_node="", tres_per_job="gres:gpu:4", node_count=2),
    }
    for code, j in cases.items():
        problem = J.ask(j, ACCOUNTS, 8)
        assert isinstance(problem, J.Problem) and problem.code == code, (code, problem)
    assert "--account" in J.ask(cases["UNKNOWN_ACCOUNT"], ACCOUNTS, 8).text
    assert "pool:estimate=" in J.ask(cases["NO_ESTIMATE"], ACCOUNTS, 8).text
    assert "at most 8" in J.ask(cases["TOO_MANY_GPUS"], ACCOUNTS, 8).text
    assert J.parse_comment("pool:colour=red").code == "BAD_COMMENT"


def test_comments_carry_the_claim_and_its_energy():
    text = J.energy_comment("slurm.c.7.0", "RELEASED", 6_000_000, "HW_SHUNT", 2)
    assert J.claim_in_comment(text) == "slurm.c.7.0" and J.energy_in_comment(text) == 6_000_000
    assert J.attempt_in_comment(J.pending_comment(1, "ENERGY_SURPLUS"), "c", "7") == 1
    assert J.attempt_in_comment(text, "c", "7") == 0 and J.attempt_in_comment(text, "c", "8") is None
    assert J.attempt_in_comment("held again by Pool; " + J.admitted_comment(2, ["node1"]), "c", "7") == 2
    assert J.worst_grade(["HW_SHUNT", "MODEL_BASED"]) == "MODEL_BASED" and J.worst_grade([]) == "UNSPECIFIED"


STATUSES = st.sampled_from([J.pending_comment(0, "ENERGY_SURPLUS"), J.admitted_comment(1, ["node1", "node2"]),
                             J.problem_comment(J.Problem("NO_ESTIMATE", "add pool:estimate=50kJ")),
                             "held again by Pool (released without an admitted claim); " + J.pending_comment(2, "X"),
                             "pool:waiting: Pool is unreachable (fail-closed)"])
USER_TEXT = st.one_of(st.text(max_size=1100), st.sampled_from(["", "pool:estimate=1kJ", "pool:class=train note",
                                                                 "x" * 1020, "pool:estimate=lots"]))


@given(USER_TEXT, STATUSES, STATUSES)
def test_pools_status_in_a_comment_keeps_the_users_text_and_what_pool_reads_from_it(text, first, second):
    """The status the bridge shows in a job's Comment (squeue %k): the user's own text stays as it
    was, what Pool reads from the comment is unchanged, the comment stays within Slurm's 1,024
    characters, and writing a status again (or another one) leaves one status, the latest."""
    shown = J.status_comment(text, first)
    assert J.user_comment(shown) == J.user_comment(text) and len(shown) <= J.COMMENT_MAX
    assert J.parse_comment(shown) == J.parse_comment(text)
    again = J.status_comment(shown, second)
    assert again == J.status_comment(text, second) and J.status_comment(again, second) == again
    if len(J.user_comment(text)) < J.COMMENT_MAX - 20:   # room for it: the status is shown, without pool: tokens
        assert J.STATUS_MARK in shown and "pool:attempt" not in shown.split(J.STATUS_MARK)[-1]


def test_a_status_reads_as_pools_word_after_the_users_text():
    assert J.status_comment("pool:estimate=1kJ", J.pending_comment(0, "ENERGY_SURPLUS")) == \
        "pool:estimate=1kJ #pool: pending=ENERGY_SURPLUS (over its tenant's guarantee, with not enough surplus " \
        "to borrow)"
    assert J.status_comment("", J.admitted_comment(0, ["node1"])) == "#pool: admitted on node1"
    assert J.status_comment("x" * 1020, "pool:held X: y") == "x" * 1020   # no room: the user's text alone


def test_slurm_outputs_are_read_as_slurm_writes_them():
    assert expand_hosts("node[1-2],gpu07,n[08-10]") == ["node1", "node2", "gpu07", "n08", "n09", "n10"]
    assert _task_ids("0-3,7,9-11%4") == [0, 1, 2, 3, 7, 9, 10, 11]
    detail = parse_detail("5", "JobId=5 JobName=wrap\n   UserId=ann(1001) GroupId=ann(1001) MCS_label=N/A\n"
                               "   JobState=CONFIGURING Reason=None\n   Restarts=1 Account=accta\n"
                               "   NodeList=node[1-2]\n     Nodes=node[1-2] CPU_IDs=0 Mem=0 GRES=gpu:3(IDX:0-2)\n"
                               "   AdminComment=pool:claim=slurm.c.5.0.n0 admitted\n")
    assert detail.nodes == {"node1": (0, 1, 2), "node2": (0, 1, 2)} and detail.state == "CONFIGURING"
    assert detail.admin_comment == "pool:claim=slurm.c.5.0.n0 admitted" and detail.restarts == 1
    assert (detail.uid, detail.job_id) == (1001, "5")   # who may end it (Bridge.finish), Slurm's own id
    task = parse_detail("9_1", "JobId=11 ArrayJobId=9 ArrayTaskId=1 JobName=wrap\n   UserId=root(0) GroupId=root(0)\n")
    assert (task.uid, task.job_id) == (0, "11")
    array = jobs_from_json({"jobs": [{"job_id": 9, "array_job_id": 9, "array_task_string": "0-2",
                                      "job_state": "PENDING", "tres_per_node": "gres:gpu:1"}]})
    assert [j.key for j in array] == ["9_0", "9_1", "9_2"]


def test_pool_slurm_imports_nothing_of_the_scheduler():
    code = "import sys, pool_slurm.main, pool_slurm.bridge, pool_slurm.hooks; " \
           "print(sorted(m for m in sys.modules if m.split('.')[0] in ('scheduler', 'agent')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_hooks_admitted_is_the_protos():
    from pool_slurm import hooks
    from protos.pool.v1 import types_pb2
    assert hooks.ADMITTED == types_pb2.ADMITTED
