"""prag's settings as a Dagster resource (every other resource reads them through it)."""

from __future__ import annotations

from typing import Any

import dagster as dg
from pydantic import Field

from prag_models.config.settings import Settings, load_settings


class PragSettingsResource(dg.ConfigurableResource):
    """prag's settings: defaults, then the TOML file, then PRAG__* environment variables, then the run's overrides
    (the Launchpad's ``resources.prag_settings.config.overrides``), validated like every other source."""

    config_file: str = Field(default="", description="TOML settings file (default: $PRAG_CONFIG or <home>/prag.toml)")
    home: str = Field(default="", description="prag home folder (default: $PRAG_HOME or <project>/.prag)")
    overrides: dict[str, Any] = Field(
        default={},
        description="Settings for this run, as in prag.toml, e.g. {retrieval: {k: 5}, data: {tasks: [LaMP-2]}}; "
        "unknown keys and wrong types fail naming the setting",
    )

    def get(self) -> Settings:
        """The loaded settings object."""
        return load_settings(self.config_file or None, home=self.home or None, **self.overrides)
