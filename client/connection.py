"""One way to connect to Temporal: the pydantic data converter, with the payload codec
when a key is configured (client.codec); TLS, a client certificate and an API key for a
production service (TEMPORAL_TLS*, TEMPORAL_API_KEY; docs/scale.md)."""

from __future__ import annotations

from pathlib import Path

from temporalio.client import Client
from temporalio.runtime import Runtime
from temporalio.service import TLSConfig

from dreamkeeper.client.agent_keys import AgentKeyStoreFactory
from dreamkeeper.client.codec import PayloadKeys, data_converter
from dreamkeeper.core.settings import TemporalSettings


def tls_config(temporal: TemporalSettings) -> TLSConfig | bool:
    """TLS for a production service: a client certificate (mTLS), a private CA, or
    plain TLS (an API key implies it). False: a plaintext connection (the dev server)."""
    wanted = temporal.tls or temporal.tls_cert or temporal.tls_ca or temporal.api_key
    if not wanted:
        return False

    def read(path: Path | None) -> bytes | None:
        return path.read_bytes() if path is not None else None

    if not (temporal.tls_cert or temporal.tls_ca or temporal.tls_server_name):
        return True
    return TLSConfig(
        server_root_ca_cert=read(temporal.tls_ca),
        client_cert=read(temporal.tls_cert),
        client_private_key=read(temporal.tls_key),
        domain=temporal.tls_server_name,
    )


async def connect(
    temporal: TemporalSettings,
    data_dir: Path | None = None,
    *,
    runtime: Runtime | None = None,
    key_store: AgentKeyStoreFactory | None = None,
) -> Client:
    """`key_store`: where per-agent data keys live when not under `data_dir` (a database
    backend's, `stores.backends.agent_key_store`)."""
    converter = data_converter(PayloadKeys.from_env(data_dir=data_dir, key_store=key_store))
    return await Client.connect(
        temporal.address,
        namespace=temporal.namespace,
        data_converter=converter,
        tls=tls_config(temporal),
        api_key=temporal.api_key,
        runtime=runtime,
    )
