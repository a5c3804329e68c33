"""poolctl: the operators' and tenants' command line. One module per verb group;
each registers its sub-commands and sets `run(args) -> exit code`.

Start-up is paid on every call (a Slurm prolog, a cron check), so a command
imports only its own group: VERBS names each verb's module and one-line help,
the top-level parser lists every verb from it, and only the group of the verb
on the command line is imported and registers its arguments. `poolctl
--help` and `--version` import no group and no gRPC; tests/client/test_startup.py
checks what each command imports.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from scheduler.ctl.output import EXIT_FAILED, EXIT_USAGE, CtlError, add_output_flag, fail

# argparse passes each of its messages through gettext, which searches the locale
# directories on every call (about 1.5 ms each here, some 50 per start): poolctl
# speaks English only, so its parsers skip the lookup.
argparse._ = lambda message: message

# verb -> (its group's module, its help line); in the order `poolctl --help` lists them.
# tests/client/test_startup.py checks these lines are the ones each group registers.
VERBS: dict[str, tuple[str, str]] = {
    "split": ("split", "split a device's energy between occupants (RULES §2.5), offline"),
    "submit": ("claims", "submit a claim, or every claim in a JSON Lines file (or, with --dry-run, "
                         "see what they would get)"),
    "progress": ("claims", "report a claim's cumulative completed units"),
    "release": ("claims", "release a claim; its actual is what the agents measured"),
    "claims": ("claims", "list claims like squeue (or one claim in full)"),
    "watch": ("claims", "stream a claim's (or a tenant's) state changes"),
    "tenants": ("ops", "the entitlement tree: guarantees and usage"),
    "workers": ("ops", "workers: capacity, claims, GPUs free; or cordon, uncordon, drain HOST"),
    "explain": ("ops", "why a claim is (not) admitted"),
    "splits": ("ops", "per-tenant joule splits by device and window"),
    "preemption-order": ("ops", "who would be preempted, worst first"),
    "reclamation-order": ("ops", "idle verdicts and the reclamation order"),
    "reclaim": ("ops", "settle every Idle claim as RECLAIMED"),
    "estimate": ("ops", "the derived estimate of a work class"),
    "keygen": ("ledger", "write an Ed25519 key pair: PREFIX.key (0600), PREFIX.pub"),
    "ledger": ("ledger", "export, verify or witness a ledger"),
    "certs": ("certs", "make a development PKI: a CA and certificates signed by it"),
    "dashboard": ("dashboard", "print the Grafana dashboard (JSON) over Pool's metrics"),
    "demo": ("demo", "run a scheduler and an agent here through a short scenario"),
    "config": ("config", "the client configuration file: contexts (scheduler, CA, certificate, key, tenant)"),
    "completion": ("habits", "print a bash or zsh completion script (see docs/USER-GUIDE.md to install it)"),
    "man": ("habits", "print poolctl's man page (roff): poolctl man > poolctl.1"),
}


class _Formatter(argparse.HelpFormatter):
    """argparse's own, its width found as shutil.get_terminal_size finds it ($COLUMNS, else
    the terminal, else 80) without importing shutil: argparse builds a formatter for every
    argument added, and shutil (with bz2, lzma and fnmatch) is not otherwise loaded."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        if width is None:
            width = _columns() - 2
        super().__init__(prog, indent_increment, max_help_position, width)


def _columns() -> int:
    try:
        return int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        pass
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80
    except (AttributeError, ValueError, OSError):
        return 80


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # one line and exit 2, like every other failure
        fail(CtlError("USAGE", message, EXIT_USAGE))


def _group(module: str):
    return importlib.import_module(f"scheduler.ctl.{module}")


class _Unused:
    """Where the other verbs of the chosen verb's group register: every call is accepted
    and does nothing (argparse spends ~0.1 ms on each argument, ~0.2 ms on each parser)."""

    def __getattr__(self, name: str):
        return self._accept

    def _accept(self, *args, **kwargs) -> _Unused:
        return self


class _OneVerb:
    """The verbs action as a group sees it when the command line names `verb`: only
    that verb's parser is made."""

    def __init__(self, verbs: argparse._SubParsersAction, verb: str) -> None:
        self._verbs, self._verb = verbs, verb

    def add_parser(self, name: str, **kwargs):
        return self._verbs.add_parser(name, **kwargs) if name == self._verb else _Unused()

    def __getattr__(self, name: str):
        return getattr(self._verbs, name)


def build_parser(verb: str | None = None, full: bool = False) -> argparse.ArgumentParser:
    """The parser. With `full`, every group registers its verbs' real arguments.
    Else, for a verb of VERBS, only that verb is made (its group registers the rest
    into _Unused): nothing else is read off a command line that names it. Else (no
    verb, or one unknown: `poolctl --help` and the usage error list them) every verb
    is listed by name and help only."""
    parser = _Parser(prog="poolctl", description="Pool's command line for operators and tenants. "
                     "Every command takes -o json, anywhere on the line.")
    add_output_flag(parser)
    parser.add_argument("--version", action="store_true", help="print poolctl's version and exit")
    verbs = parser.add_subparsers(dest="verb", required=True, parser_class=_Parser, metavar="VERB")
    if verb in VERBS and not full:
        _group(VERBS[verb][0]).register(_OneVerb(verbs, verb))
        return parser
    registered: set[str] = set()
    for name, (module, help_text) in VERBS.items():
        if module in registered:
            continue
        if full:
            _group(module).register(verbs)
            registered.add(module)
        else:
            verbs.add_parser(name, help=help_text, add_help=False)
    return parser


def hoist_output(argv: list[str]) -> list[str]:
    """`-o json` is accepted anywhere (`poolctl -o json claims`, `poolctl ledger
    -o json verify F`): every -o/--output is moved behind the verb's own
    arguments, where the innermost parser reads it."""
    rest, flags, i = [], [], 0
    while i < len(argv):
        word = argv[i]
        if word == "--":   # what follows is the verb's, -o or not: the flags go before it
            break
        if word in ("-o", "--output") and i + 1 < len(argv):
            flags += argv[i:i + 2]
            i += 2
            continue
        if word.startswith("--output=") or (word.startswith("-o") and len(word) > 2 and not word.startswith("--")):
            flags.append(word)
        else:
            rest.append(word)
        i += 1
    return rest + flags + argv[i:]


def chosen_verb(argv: list[str]) -> str | None:
    """The verb on the command line: the first word that is not a top-level flag."""
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word
    return None


def version() -> str:
    """pool_client.__version__, which tests/client/test_startup.py holds equal to pyproject's
    (importlib.metadata would cost more than the rest of `poolctl --version`)."""
    from pool_client import __version__
    return f"poolctl {__version__}"


def _pool_error(error: Exception) -> CtlError | None:
    """A pool_client error as poolctl's one line (pool_client is loaded only if a verb used it)."""
    errors = sys.modules.get("pool_client.errors")
    if errors is not None and isinstance(error, errors.PoolError):
        return CtlError(error.code, error.message, EXIT_FAILED)
    return None


def main(argv: list[str] | None = None) -> None:
    # before anything imports grpc: no gRPC core log lines on stderr, unless the user asked for them
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    os.environ.setdefault("GRPC_TRACE", "")
    try:
        words = hoist_output(sys.argv[1:] if argv is None else argv)
        verb = chosen_verb(words)
        if verb is None and "--version" in words:
            print(version())
            raise SystemExit(0)
        args = build_parser(verb).parse_args(words)
        raise SystemExit(args.run(args))
    except CtlError as error:
        fail(error)
    except BrokenPipeError:  # `poolctl ... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(0) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except Exception as error:  # noqa: BLE001 - the last resort: one line, never a traceback
        fail(_pool_error(error) or CtlError("INTERNAL", f"{type(error).__name__}: {error}", EXIT_FAILED))


if __name__ == "__main__":
    main()
