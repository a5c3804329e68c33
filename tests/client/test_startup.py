"""poolctl starts at the floor: each command imports only what it uses
(measured with `python -X importtime` on the real command), and the verb
table main.py lists without importing the groups says what the groups
register."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from scheduler.ctl import main

# modules no command below uses: the admission kernel, the ledger and its export,
# the service, the demo, the development PKI, x509 and plotting
HEAVY = ("scheduler.kernel", "scheduler.ledger", "scheduler.service", "scheduler.ctl.demo", "scheduler.ctl.certs",
         "scheduler.ctl.ledger", "cryptography", "matplotlib", "agent")


def imported(*args: str, env: dict[str, str] | None = None) -> tuple[set[str], subprocess.CompletedProcess]:
    """The modules `poolctl ARGS` imports, as -X importtime reports them."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "scheduler.ctl.main", *args],
                          capture_output=True, text=True, timeout=60, env=env or dict(os.environ))
    names = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    names.discard("imported package")
    return names, done


def heavy(names: set[str]) -> list[str]:
    return sorted(n for n in names if n.startswith(HEAVY))


def test_help_and_version_load_no_grpc_and_no_verb_group():
    for args in (("--help",), ("--version",)):
        names, done = imported(*args)
        assert done.returncode == 0, done.stderr[-2000:]
        assert not [n for n in names if n.startswith(("grpc", "google.protobuf", "pool_client."))], args
        assert not [n for n in names if n.startswith("scheduler.ctl.") and n not in
                    ("scheduler.ctl.main", "scheduler.ctl.output")], args
    import tomllib
    from pathlib import Path
    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]
    assert imported("--version")[1].stdout == f"poolctl {project['version']}\n"


def test_claims_and_submit_import_only_what_they_use(cluster):
    s = cluster()
    s.poolctl("submit", "--tenant", "alpha", "--estimate-uj", "1000000", "c1")
    env = s.env()
    for args in (("claims", "c1"), ("submit", "--tenant", "alpha", "--estimate-uj", "1000000", "c2"),
                 ("release", "c2"), ("tenants",)):
        names, done = imported(*args, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "grpc" in names and "pool_client.sync" in names   # the test sees the imports it checks
        assert heavy(names) == [], (args, heavy(names))


def test_an_offline_verb_loads_no_grpc():
    names, done = imported("split", "--total-uj", "10", "--grade", "Estimator", "--share", "a=1")
    assert done.returncode == 0, done.stderr[-2000:]
    assert not [n for n in names if n.startswith("grpc")]


def test_the_verb_table_lists_what_the_groups_register():
    parser = main.build_parser(full=True)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    registered = {choice.dest: choice.help for choice in sub._choices_actions}
    assert registered == {verb: help_text for verb, (_, help_text) in main.VERBS.items()}
    for verb, (module, _) in main.VERBS.items():   # and each verb in the group named
        assert sub.choices[verb].get_default("run") is None or \
            sub.choices[verb].get_default("run").__module__ == f"scheduler.ctl.{module}"
