"""`poolctl config`: the client configuration file (pool_client/config.py),
kubeconfig-style: view it, list its contexts, choose the current one, create
or change one. Paths given to set-context are stored absolute."""

from __future__ import annotations

import argparse
import os
from typing import Any

from pool_client import config
from scheduler.ctl.output import EXIT_OK, EXIT_USAGE, CtlError, add_output_flag, emit, table


def register(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("config", help="the client configuration file: contexts (scheduler, CA, certificate, key, "
                                        "tenant)")
    sub = p.add_subparsers(dest="config_verb", required=True, parser_class=type(p))
    view = sub.add_parser("view", help="print the file ($POOL_CONFIG, else $XDG_CONFIG_HOME/pool/config.toml)")
    add_output_flag(view)
    view.set_defaults(run=_view)
    listed = sub.add_parser("get-contexts", help="list the contexts; * marks the current one")
    add_output_flag(listed)
    listed.set_defaults(run=_get_contexts)
    current = sub.add_parser("current-context", help="print the current context's name")
    current.set_defaults(run=_current)
    use = sub.add_parser("use-context", help="make NAME the current context")
    use.add_argument("name")
    use.set_defaults(run=_use)
    setting = sub.add_parser("set-context", help="create context NAME, or change the keys given")
    setting.add_argument("name")
    setting.add_argument("--scheduler", help="address, or a leader and its standbys, comma-separated")
    setting.add_argument("--ca", metavar="PEM", help="the CA that signed the schedulers' certificates")
    setting.add_argument("--cert", metavar="PEM", help="your client certificate")
    setting.add_argument("--key", metavar="PEM", help="your client certificate's key")
    setting.add_argument("--tenant", help="the tenant used when a request names none")
    setting.add_argument("--timeout", type=float, metavar="SECONDS", help="connect timeout (default 5)")
    setting.add_argument("--use", action="store_true", help="also make it the current context")
    setting.set_defaults(run=_set)


def _failing(action: Any) -> Any:
    try:
        return action()
    except config.ConfigError as error:
        raise CtlError("USAGE", str(error), EXIT_USAGE) from None


def _view(args: Any) -> int:
    where = config.path()
    document = _failing(lambda: config.load(where))
    if getattr(args, "output", "table") == "json":
        emit(args, {"path": str(where), **document}, str)
    elif os.path.exists(where):
        with open(where) as f:
            print(f"# {where}\n{f.read()}", end="")
    else:
        print(f"# {where}: no such file (`poolctl config set-context NAME --scheduler ADDRESS` makes one)")
    return EXIT_OK


def _get_contexts(args: Any) -> int:
    document = _failing(config.load)
    current = os.environ.get("POOL_CONTEXT") or document.get("current-context")
    rows = [{"current": name == current, "name": name, "scheduler": ",".join(config._parse(
        name, t, config.path()).scheduler), "tenant": t.get("tenant")}
        for name, t in sorted(document.get("contexts", {}).items())]
    emit(args, rows, lambda r: table(("current", "name", "scheduler", "tenant"),
                                      [("*" if c["current"] else "", c["name"], c["scheduler"], c["tenant"])
                                       for c in r]))
    return EXIT_OK


def _current(args: Any) -> int:
    name = os.environ.get("POOL_CONTEXT") or _failing(config.load).get("current-context")
    if not name:
        raise CtlError("USAGE", f"{config.path()}: no current context (`poolctl config use-context NAME`)")
    print(name)
    return EXIT_OK


def _use(args: Any) -> int:
    where = _failing(lambda: config.use_context(args.name))
    print(f"current context: {args.name} ({where})")
    return EXIT_OK


def _absolute(path: str | None) -> str | None:
    return os.path.abspath(os.path.expanduser(path)) if path else None


def _set(args: Any) -> int:
    where = _failing(lambda: config.set_context(
        args.name, scheduler=[a.strip() for a in args.scheduler.split(",") if a.strip()] if args.scheduler else None,
        ca=_absolute(args.ca), cert=_absolute(args.cert), key=_absolute(args.key), tenant=args.tenant,
        timeout=args.timeout))
    if args.use:
        _failing(lambda: config.use_context(args.name))
    print(f"context {args.name} set ({where})")
    return EXIT_OK
