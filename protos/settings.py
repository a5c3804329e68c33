"""Typed TOML configuration for both daemons: a frozen dataclass is the schema.

Each field's type hint says what a key may hold (bool, int, str, Path, a list
of str, an optional of those, a nested section, a list of sections, or a map
of names to sections or ints); `checks` adds range rules keyed by the dotted
path ("stream.batch_max", "tenants.weight"). An unknown key, a wrong type or a
value out of range is refused with the file, the key and the reason.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import tomllib
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

Check = Callable[[Any], "bool | str"]


class ConfigError(ValueError):
    pass


def positive(v: int) -> bool | str:
    return v > 0 or "must be positive"


def natural(v: int) -> bool | str:
    return v >= 0 or "must be ≥ 0"


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _describe(hint: Any) -> str:
    return getattr(hint, "__name__", str(hint)).replace("PosixPath", "a path").replace("Path", "a path")


class _Reader:
    def __init__(self, where: str, checks: Mapping[str, Check]) -> None:
        self.where, self.checks = where, checks

    def fail(self, key: str, message: str) -> ConfigError:
        return ConfigError(f"{self.where}: {key} {message}")

    def section(self, cls: type, table: Any, path: str) -> Any:
        if not isinstance(table, dict):
            raise self.fail(path or "the file", "must be a table")
        hints = _hints(cls)
        unknown = sorted(set(table) - set(hints))
        if unknown:
            raise self.fail(_join(path, unknown[0]), f"is not a known key (known: {', '.join(sorted(hints))})")
        missing = [f.name for f in dataclasses.fields(cls)
                   if f.name not in table and f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]
        if missing:
            raise self.fail(_join(path, missing[0]), "is required")
        return cls(**{name: self.value(hints[name], raw, _join(path, name)) for name, raw in table.items()})

    def value(self, hint: Any, raw: Any, path: str) -> Any:
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin in (typing.Union, types.UnionType):
            return self.value(next(a for a in args if a is not type(None)), raw, path)
        if dataclasses.is_dataclass(hint):
            return self.section(hint, raw, path)
        if origin in (list, tuple):
            if not isinstance(raw, list):
                raise self.fail(path, f"must be a list, got {raw!r}")
            return tuple(self.value(args[0], item, f"{path}[{i}]") for i, item in enumerate(raw))
        if origin in (dict, Mapping):
            if not isinstance(raw, dict):
                raise self.fail(path, "must be a table")
            return types.MappingProxyType({k: self.value(args[1], v, f"{path}[{k}]") for k, v in raw.items()})
        return self.scalar(hint, raw, path)

    def scalar(self, hint: Any, raw: Any, path: str) -> Any:
        kind = str if hint is Path else hint
        if not isinstance(raw, kind) or (kind is int and isinstance(raw, bool)):
            raise self.fail(path, f"must be {_describe(hint)}, got {raw!r}")
        verdict = self.checks.get(_generic(path), lambda v: True)(raw)
        if verdict is not True:
            raise self.fail(path, f"{verdict}, got {raw!r}")
        return Path(raw) if hint is Path else raw


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _generic(path: str) -> str:
    """Checks are keyed without list indexes and map keys:
    "workers[gpu-1].cpu_millis" -> "workers.cpu_millis"."""
    return re.sub(r"\[[^\]]*\]", "", path)


def build(cls: type, table: Mapping[str, Any], where: str, checks: Mapping[str, Check] = {}) -> Any:
    return _Reader(where, checks).section(cls, dict(table), "")


def load(cls: type, path: Path, checks: Mapping[str, Check] = {}) -> Any:
    try:
        table = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return build(cls, table, str(path), checks)
