"""Where settings values come from: TOML tables and PRAG__SECTION__FIELD variables, merged and typed into the
settings dataclasses of prag_models/config.py (unknown keys and wrong types are errors naming the setting)."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any


class ConfigError(ValueError):
    """A configuration value is missing, unknown or of the wrong type."""


def coerce(value: Any, annotation: Any, where: str) -> Any:
    """Convert a TOML/env value to the field's declared type."""
    origin = typing.get_origin(annotation)
    if annotation is bool or annotation == "bool":
        if isinstance(value, bool):
            return value
        if str(value).lower() in {"1", "true", "yes", "on"}:
            return True
        if str(value).lower() in {"0", "false", "no", "off"}:
            return False
        raise ConfigError(f"{where}: expected a boolean, got {value!r}")
    if annotation in (int, "int"):
        try:
            return int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected an integer, got {value!r}") from None
    if annotation in (float, "float"):
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected a number, got {value!r}") from None
    if origin is tuple or str(annotation).startswith("tuple"):
        items = value if isinstance(value, (list, tuple)) else [v for v in str(value).split(",") if v.strip()]
        return tuple(str(v).strip() for v in items)
    return str(value)


def build(cls: type, overrides: dict[str, Any], where: str) -> Any:
    """Instantiate a settings dataclass from nested overrides, rejecting unknown keys."""
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = set(overrides) - known
    if unknown:
        raise ConfigError(f"{where}: unknown setting(s) {sorted(unknown)}; known: {sorted(known)}")
    kwargs: dict[str, Any] = {}
    for name, value in overrides.items():
        hint = hints[name]
        if dataclasses.is_dataclass(hint):
            if not isinstance(value, dict):
                raise ConfigError(f"{where}.{name}: expected a table of settings")
            kwargs[name] = build(hint, value, f"{where}.{name}")
        else:
            kwargs[name] = coerce(value, hint, f"{where}.{name}")
    return cls(**kwargs)


def env_overrides(environ: typing.Mapping[str, str]) -> dict[str, Any]:
    """Collect PRAG__SECTION__FIELD variables into nested overrides."""
    out: dict[str, Any] = {}
    for key, value in environ.items():
        if not key.startswith("PRAG__"):
            continue
        parts = [p.lower() for p in key[len("PRAG__") :].split("__")]
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge two override dicts."""
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged
