"""One way to connect to Temporal: the pydantic data converter, with the payload codec
when a key is configured (client.codec)."""

from __future__ import annotations

from pathlib import Path

from temporalio.client import Client
from temporalio.runtime import Runtime

from dreamkeeper.client.codec import PayloadKeys, data_converter
from dreamkeeper.core.settings import TemporalSettings


async def connect(
    temporal: TemporalSettings, data_dir: Path | None = None, *, runtime: Runtime | None = None
) -> Client:
    converter = data_converter(PayloadKeys.from_env(data_dir=data_dir))
    return await Client.connect(
        temporal.address, namespace=temporal.namespace, data_converter=converter, runtime=runtime
    )
