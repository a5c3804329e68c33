"""The client configuration file: named contexts, kubeconfig-style, read by
the library (`Client.from_context`) and by poolctl (`--context`, `poolctl
config`). It imports no gRPC, so poolctl can read it before it knows whether
the command needs the network.

    # $POOL_CONFIG, else $XDG_CONFIG_HOME/pool/config.toml (~/.config/pool/config.toml)
    current-context = "prod"

    [contexts.prod]
    scheduler = ["sched-a:7070", "sched-b:7070"]   # a leader and its standbys (or "a:7070,b:7070")
    ca = "/etc/pool/ca.pem"
    cert = "/home/me/.pool/me.pem"
    key = "/home/me/.pool/me.key"
    tenant = "research/vision"     # the tenant Submit, List, Watch and Splits use when a request names none
    timeout = 5.0                  # seconds to reach a scheduler before giving up (the connect timeout)

A context is chosen by name (--context NAME, or the `name` argument), else
$POOL_CONTEXT, else the file's current-context; without any, the defaults of
the flags and environment apply. Relative file paths are read from the file's
directory.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

# tomllib, pathlib and dataclasses are left out on purpose: this runs at every poolctl start,
# and most starts have no file to parse (tomllib is imported only when there is one).

DEFAULT_TIMEOUT_S = 5.0
KEYS = ("scheduler", "ca", "cert", "key", "tenant", "timeout")


class ConfigError(ValueError):
    """The configuration file or a context in it is unusable; the message says where."""


class Context(NamedTuple):
    name: str = ""
    scheduler: list[str] = []
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    tenant: str | None = None
    timeout: float | None = None


Where = "str | os.PathLike[str]"


def path() -> str:
    """Where the file is: $POOL_CONFIG, else $XDG_CONFIG_HOME/pool/config.toml, else ~/.config/pool/config.toml."""
    if os.environ.get("POOL_CONFIG"):
        return os.environ["POOL_CONFIG"]
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "pool", "config.toml")


def load(where: Where | None = None) -> dict[str, Any]:
    """The file as a document ({} when there is none)."""
    where = os.fspath(where or path())
    try:
        with open(where, "rb") as f:
            import tomllib
            try:
                document = tomllib.load(f)
            except tomllib.TOMLDecodeError as error:
                raise ConfigError(f"{where}: {error}") from None
    except FileNotFoundError:
        return {}
    except OSError as error:
        raise ConfigError(f"{where}: {error.strerror}") from None
    contexts = document.get("contexts", {})
    if not isinstance(contexts, dict) or not all(isinstance(v, dict) for v in contexts.values()):
        raise ConfigError(f"{where}: [contexts.NAME] must be tables")
    for name, table in contexts.items():
        unknown = set(table) - set(KEYS)
        if unknown:
            raise ConfigError(f"{where}: context {name!r}: unknown key {sorted(unknown)[0]!r} "
                              f"(known: {', '.join(KEYS)})")
    return document


def context(name: str | None = None, where: Where | None = None) -> Context:
    """The named context; else $POOL_CONTEXT's; else the current one; else an empty Context."""
    where = os.fspath(where or path())
    document = load(where)
    name = name or os.environ.get("POOL_CONTEXT") or document.get("current-context") or None
    if name is None:
        return Context()
    table = document.get("contexts", {}).get(name)
    if table is None:
        known = ", ".join(sorted(document.get("contexts", {}))) or "none"
        raise ConfigError(f"{where}: no context {name!r} (contexts: {known})")
    return _parse(name, table, where)


def _parse(name: str, table: dict[str, Any], where: str) -> Context:
    scheduler = table.get("scheduler", [])
    if isinstance(scheduler, str):
        scheduler = [part.strip() for part in scheduler.split(",") if part.strip()]
    if not isinstance(scheduler, list) or not all(isinstance(a, str) for a in scheduler):
        raise ConfigError(f"{where}: context {name!r}: scheduler must be a string or a list of strings")
    timeout = table.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise ConfigError(f"{where}: context {name!r}: timeout must be a number of seconds > 0")
    files = {}
    for key in ("ca", "cert", "key"):
        value = table.get(key)
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{where}: context {name!r}: {key} must be a path")
        files[key] = os.path.join(os.path.dirname(where), os.path.expanduser(value)) if value else None
    tenant = table.get("tenant")
    if tenant is not None and not isinstance(tenant, str):
        raise ConfigError(f"{where}: context {name!r}: tenant must be a string")
    return Context(name, scheduler, files["ca"], files["cert"], files["key"], tenant or None,
                   float(timeout) if timeout is not None else None)


def save(document: dict[str, Any], where: Where | None = None) -> str:
    """Write the document (current-context and [contexts.*]) back, readable by its owner only."""
    where = os.fspath(where or path())
    os.makedirs(os.path.dirname(where) or ".", exist_ok=True)
    lines = []
    if document.get("current-context"):
        lines.append(f"current-context = {_value(document['current-context'])}")
    for name, table in document.get("contexts", {}).items():
        lines.append(f"\n[contexts.{_value(name)}]")
        lines += [f"{key} = {_value(table[key])}" for key in KEYS if table.get(key) not in (None, "", [])]
    temporary = where + ".tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines).lstrip("\n") + "\n")
    os.replace(temporary, where)
    return where


def _value(value: Any) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def set_context(name: str, where: Where | None = None, **changes: Any) -> str:
    """Create or update context `name` with the given keys (None leaves a key as it is)."""
    where = os.fspath(where or path())
    document = load(where)
    contexts = document.setdefault("contexts", {})
    table = dict(contexts.get(name, {}))
    table.update({k: v for k, v in changes.items() if v is not None})
    _parse(name, table, where)   # refuse what could not be read back
    contexts[name] = table
    return save(document, where)


def use_context(name: str, where: Where | None = None) -> str:
    where = os.fspath(where or path())
    document = load(where)
    if name not in document.get("contexts", {}):
        known = ", ".join(sorted(document.get("contexts", {}))) or "none"
        raise ConfigError(f"{where}: no context {name!r} (contexts: {known})")
    document["current-context"] = name
    return save(document, where)


__all__ = ["Context", "ConfigError", "DEFAULT_TIMEOUT_S", "path", "load", "context", "set_context", "use_context",
           "save"]
