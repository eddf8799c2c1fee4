"""Where settings values come from, for pydantic-settings: keyword overrides, an environment mapping
(``PRAG__SECTION__FIELD``, os.environ unless load_settings is given another) and the TOML file's tables; and the
one-line ``ConfigError`` that names the setting when pydantic rejects a value."""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
from collections.abc import Iterator, Mapping
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError
from pydantic_settings import EnvSettingsSource, InitSettingsSource, NoDecode, PydanticBaseSettingsSource


class Section(BaseModel):
    """One table of settings: immutable (hashable, so it can key caches), unknown keys rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid")


def _csv(value: Any) -> Any:
    """A list setting given as text: JSON (``["a", "b"]``) or comma-separated (``a,b``)."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return tuple(json.loads(text))
        return tuple(v.strip() for v in text.split(",") if v.strip())
    return value


#: A tuple-of-strings setting that also reads ``a,b`` from the environment.
Csv = Annotated[tuple[str, ...], NoDecode, BeforeValidator(_csv)]


class ConfigError(ValueError):
    """A configuration value is missing, unknown or of the wrong type."""


#: (environment, TOML values) of the load_settings call in progress; plain Settings() reads os.environ only.
_SOURCES: contextvars.ContextVar[tuple[Mapping[str, str], dict[str, Any]] | None] = contextvars.ContextVar(
    "prag_settings_sources", default=None
)


@contextlib.contextmanager
def load_context(environ: Mapping[str, str], toml_values: dict[str, Any]) -> Iterator[None]:
    """Make one environment mapping and one TOML file's values the sources of the Settings built inside."""
    token = _SOURCES.set((environ, toml_values))
    try:
        yield
    finally:
        _SOURCES.reset(token)


class MappingEnvSource(EnvSettingsSource):
    """pydantic-settings' environment source over a given mapping instead of os.environ."""

    def __init__(self, settings_cls: type, environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {k.lower(): v for k, v in self._environ.items()}


def settings_sources(settings_cls: type, init_settings: PydanticBaseSettingsSource) -> tuple:
    """The sources in priority order: keyword overrides, environment, TOML file (then the defaults)."""
    environ, toml_values = _SOURCES.get() or (os.environ, {})
    return init_settings, MappingEnvSource(settings_cls, environ), InitSettingsSource(settings_cls, toml_values)


_MESSAGES = {
    "int_parsing": "expected an integer",
    "int_from_float": "expected an integer",
    "float_parsing": "expected a number",
    "bool_parsing": "expected a boolean",
    "model_type": "expected a table of settings",
    "model_attributes_type": "expected a table of settings",
}


def validation_message(exc: ValidationError) -> str:
    """pydantic's errors as ``settings.<section>.<field>: <problem>`` lines (unknown keys grouped per table)."""
    lines: list[str] = []
    unknown: dict[str, list[str]] = {}
    for error in exc.errors():
        loc = [str(part) for part in error["loc"]]
        if error["type"] == "extra_forbidden":
            unknown.setdefault(".".join(["settings", *loc[:-1]]), []).append(loc[-1])
            continue
        problem = _MESSAGES.get(error["type"], error["msg"])
        lines.append(f"{'.'.join(['settings', *loc])}: {problem}, got {error.get('input')!r}")
    lines += [f"{where}: unknown setting(s) {sorted(names)}" for where, names in unknown.items()]
    return "; ".join(lines)
