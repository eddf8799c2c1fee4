"""The Ray side of the asset layer: dagster-ray's resource for prag (a local Ray cluster, or an existing one by
address; a KubeRay cluster resource can take its place); prag_assets/execution.py turns it into the engine the heavy
stages run on.

The resource connects lazily: with compute.engine = local (the default) it never imports Ray; with ray, the first
asset that needs the engine connects (ray.init) and the resource disconnects when the run ends.
"""

from __future__ import annotations

import os
import socket
from typing import Any
from urllib.parse import urlsplit

from dagster_ray import Lifecycle, RayResource
from dagster_ray.configs import RayDataExecutionOptions
from pydantic import Field

from prag_assets.resources.settings import PragSettingsResource
from prag_models.config.settings import Settings

#: Environment variables the Ray workers get from the run (offline model loading, tokenizer threads).
WORKER_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM")


class RayConnectError(ConnectionError):
    """compute.engine = ray and the Ray cluster cannot be reached; the message names the address."""


def probe(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast, naming the address, when a host:port or ray://host:port address does not accept connections
    (ray.init would wait minutes for an unreachable GCS)."""
    if address in ("", "auto", "local"):
        return
    parts = urlsplit(address if "://" in address else f"gcs://{address}")
    if not parts.hostname or not parts.port:
        raise RayConnectError(f"compute.ray_address {address!r} is not 'auto', host:port or ray://host:port")
    try:
        socket.create_connection((parts.hostname, parts.port), timeout=timeout_s).close()
    except OSError as exc:
        raise RayConnectError(
            f"cannot reach the Ray cluster at {address!r} (compute.ray_address): {exc}; start it (`ray start --head`"
            ", KubeRay) or set compute.engine = local"
        ) from None


class PragRay(RayResource):
    """dagster-ray's Ray resource for prag: compute.ray_address empty = a local Ray cluster started in the run's
    process (compute.ray_num_cpus CPUs, no dashboard), else the existing cluster at that address (ray://… through
    Ray Client, e.g. KubeRay's head service). Connects only when an asset asks for the Ray engine."""

    settings: PragSettingsResource
    lifecycle: Lifecycle = Field(
        default_factory=lambda: Lifecycle(connect=False),
        description="connect=False: prag connects on first use, so runs on the local engine never start Ray",
    )
    data_execution_options: RayDataExecutionOptions = Field(
        default_factory=lambda: RayDataExecutionOptions(verbose_progress=False, use_polars=False)
    )

    @property
    def host(self) -> str:
        """The cluster's host (127.0.0.1 for a local cluster)."""
        address = self.ray_address
        return (urlsplit(f"//{address.split('://')[-1]}").hostname if address else None) or "127.0.0.1"

    @property
    def ray_address(self) -> str | None:  # type: ignore[override]
        """compute.ray_address, or None: ray.init then starts a local cluster."""
        return self.settings.get().compute.ray_address or None

    @property
    def name(self) -> str:
        """How logs name the cluster."""
        return f"Ray cluster at {self.ray_address}" if self.ray_address else "local Ray cluster"

    @property
    def created(self) -> bool:
        """Nothing to create: the cluster is local or exists already."""
        return True

    @property
    def ready(self) -> bool:
        """Nothing to wait for."""
        return True

    def init_options(self, settings: Settings) -> dict[str, Any]:
        """ray.init keywords: the workers' environment; for a local cluster its CPUs, object store, no dashboard."""
        names = (*WORKER_ENV, settings.generator.api_key_env)
        env = {k: os.environ[k] for k in names if k and k in os.environ}
        options: dict[str, Any] = {"runtime_env": {"env_vars": {**env, **self.get_env_vars_to_inject()}}}
        compute = settings.compute
        if not compute.ray_address:
            options.update(include_dashboard=False, num_cpus=compute.ray_num_cpus or None)
            if compute.ray_object_store_mb:
                options["object_store_memory"] = compute.ray_object_store_mb * 2**20
        return {**options, **self.ray_init_options}

    def connect(self, context: Any) -> Any:
        """ray.init against compute.ray_address (or a new local cluster); errors name the address."""
        import ray

        if ray.is_initialized():  # an earlier run of this process connected: reuse its cluster
            return self._context
        settings = self.settings.get()
        address = self.ray_address
        probe(address or "")
        try:
            self._context = ray.init(address=address, **self.init_options(settings))
        except ConnectionError as exc:
            raise RayConnectError(
                f"cannot connect to the Ray cluster at {address!r} (compute.ray_address): {exc}"
            ) from None
        self.data_execution_options.apply()
        context.log.info(f"connected to the {self.name} (resources: {ray.cluster_resources()})")
        return self._context
