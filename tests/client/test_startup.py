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
# and what a minimal client (python + grpc + stubs, one call) does not import either, which a
# one-claim command used to: shutil (argparse's terminal width; bz2, lzma), json (printing a
# table needs none), random (only a retry's backoff), dataclasses (protos.energy), json_format
# and descriptor_pb2 (one claim's table and to_doc's map check), the ops group and its plots
FLOOR_ONLY = ("shutil", "json", "random", "dataclasses", "bz2", "lzma", "google.protobuf.json_format",
              "google.protobuf.descriptor_pb2", "scheduler.ctl.ops", "scheduler.ctl.plots")


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
        beyond = sorted(n for n in names if n.split(".")[0] in FLOOR_ONLY or n in FLOOR_ONLY
                        or n.startswith(("scheduler.ctl.ops", "scheduler.ctl.plots")))
        assert beyond == [], (args, beyond)


def test_an_offline_verb_loads_no_grpc():
    names, done = imported("split", "--total-uj", "10", "--grade", "Estimator", "--share", "a=1")
    assert done.returncode == 0, done.stderr[-2000:]
    assert not [n for n in names if n.startswith("grpc")]


def test_a_verb_on_the_command_line_makes_only_its_own_parser():
    sub = next(a for a in main.build_parser("claims")._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == ["claims"]   # not submit, release, ... of its group, nor the other groups
    assert sub.choices["claims"].get_default("run").__name__ == "_list"
    for verb in (None, "no-such-verb"):   # --help, and the usage error, list every verb
        sub = next(a for a in main.build_parser(verb)._actions if isinstance(a, argparse._SubParsersAction))
        assert list(sub.choices) == list(main.VERBS)


def test_help_wraps_at_the_terminal_width_as_argparse_would():
    widths = {}
    for columns in ("60", "200"):
        done = subprocess.run([sys.executable, "-m", "scheduler.ctl.main", "claims", "--help"], capture_output=True,
                              text=True, timeout=60, env={**os.environ, "COLUMNS": columns})
        assert done.returncode == 0, done.stderr
        widths[columns] = max(map(len, done.stdout.splitlines()))
    assert widths["60"] <= 62 < 100 < widths["200"] <= 200, widths   # (a long flag may pass the width a little)


def test_the_verb_table_lists_what_the_groups_register():
    parser = main.build_parser(full=True)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    registered = {choice.dest: choice.help for choice in sub._choices_actions}
    assert registered == {verb: help_text for verb, (_, help_text) in main.VERBS.items()}
    for verb, (module, _) in main.VERBS.items():   # and each verb in the group named
        assert sub.choices[verb].get_default("run") is None or \
            sub.choices[verb].get_default("run").__module__ == f"scheduler.ctl.{module}"
