"""Settings from environment variables, validated once with clear messages."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from dreamkeeper.policies.decay import DecayParams
from dreamkeeper.policies.high_value import HighValueFloor
from dreamkeeper.stores.embedding_client import (
    DEFAULT_MODEL,
    MAX_INPUT_CHARS,
    MIN_SIMILARITY,
    EmbeddingSettings,
)
from dreamkeeper.stores.validation import InvalidInput, validate_agent_id


class SettingsError(InvalidInput):
    """An environment variable holds a value Dreamkeeper cannot use."""


def _get(env: Mapping[str, str], name: str, default: str) -> str:
    value = env.get(name)
    return default if value is None or value.strip() == "" else value.strip()


def _float(env: Mapping[str, str], name: str, default: float, lo: float, hi: float) -> float:
    raw = _get(env, name, str(default))
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r} is not a number") from None
    if not lo <= value <= hi:
        raise SettingsError(f"{name}={raw!r} is out of range ({lo} to {hi})")
    return value


def _int(env: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    raw = _get(env, name, str(default))
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r} is not a whole number") from None
    if not lo <= value <= hi:
        raise SettingsError(f"{name}={raw!r} is out of range ({lo} to {hi})")
    return value


@dataclass(frozen=True)
class StoreSettings:
    data_dir: Path = Path(".dreamkeeper")
    agent_id: str = "default"
    archive_retention: timedelta = timedelta(days=90)
    decay: DecayParams = field(default_factory=DecayParams)
    floor: HighValueFloor = field(default_factory=HighValueFloor)
    save_timeout: float = 30.0  # how long a client waits for a worker to take a save

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> StoreSettings:
        env = os.environ if env is None else env
        agent = _get(env, "DREAMKEEPER_AGENT", "default")
        try:
            validate_agent_id(agent)
        except InvalidInput as exc:
            raise SettingsError(f"DREAMKEEPER_AGENT: {exc}") from None
        return cls(
            data_dir=Path(_get(env, "DREAMKEEPER_DATA", ".dreamkeeper")),
            agent_id=agent,
            archive_retention=timedelta(
                days=_int(env, "DREAMKEEPER_ARCHIVE_RETENTION_DAYS", 90, -1, 36_500)
            ),
            decay=DecayParams(
                grace=timedelta(days=_float(env, "DREAMKEEPER_DECAY_GRACE_DAYS", 30, 0, 3650)),
                half_life=timedelta(
                    days=_float(env, "DREAMKEEPER_DECAY_HALF_LIFE_DAYS", 45, -1, 36_500)
                ),
                floor=_float(env, "DREAMKEEPER_DECAY_FLOOR", 0.10, 0, 1),
            ),
            floor=HighValueFloor(
                importance=_float(env, "DREAMKEEPER_PROTECT_IMPORTANCE", 0.80, 0, 1),
                reinforcement=_int(env, "DREAMKEEPER_PROTECT_REINFORCEMENT", 5, 1, 1_000_000),
            ),
            save_timeout=_float(env, "DREAMKEEPER_SAVE_TIMEOUT_SECONDS", 30, 1, 3600),
        )


@dataclass(frozen=True)
class TemporalSettings:
    address: str = "localhost:7233"
    namespace: str = "default"
    task_queue: str = "dreamkeeper"
    dream_cron: str = "0 */12 * * *"  # the dream schedule: twice a day by default

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TemporalSettings:
        env = os.environ if env is None else env
        address = _get(env, "TEMPORAL_ADDRESS", "localhost:7233")
        host, _, port = address.rpartition(":")
        # isdigit() alone admits "²", which int() refuses: ASCII digits only.
        if not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
            raise SettingsError(f"TEMPORAL_ADDRESS={address!r} is not host:port")
        queue = _get(env, "DREAMKEEPER_TASK_QUEUE", "dreamkeeper")
        cron = _get(env, "DREAMKEEPER_DREAM_CRON", "0 */12 * * *")
        if len(cron.split()) != 5:
            raise SettingsError(f"DREAMKEEPER_DREAM_CRON={cron!r} is not a 5-field cron expression")
        return cls(
            address=address,
            namespace=_get(env, "TEMPORAL_NAMESPACE", "default"),
            task_queue=queue,
            dream_cron=cron,
        )


EMBEDDING_BACKENDS = ("auto", "http", "local", "none")


def embedding_settings(env: Mapping[str, str] | None = None) -> EmbeddingSettings:
    """DREAMKEEPER_EMBEDDING_*. DREAMKEEPER_EMBEDDING_BACKEND: `auto` (default) — the
    HTTP endpoint when DREAMKEEPER_EMBEDDING_BASE_URL is set, else the in-process local
    model when its extra is installed, else none; `http`, `local` or `none` to insist.
    No backend means keyword search only."""
    env = os.environ if env is None else env
    backend = _get(env, "DREAMKEEPER_EMBEDDING_BACKEND", "auto").lower()
    if backend not in EMBEDDING_BACKENDS:
        raise SettingsError(
            f"DREAMKEEPER_EMBEDDING_BACKEND={backend!r}: expected one of {', '.join(EMBEDDING_BACKENDS)}"
        )
    base_url = _get(env, "DREAMKEEPER_EMBEDDING_BASE_URL", "").rstrip("/") or None
    if backend == "http" and base_url is None:
        raise SettingsError("DREAMKEEPER_EMBEDDING_BACKEND=http needs DREAMKEEPER_EMBEDDING_BASE_URL")
    local = False
    if backend == "local" or (backend == "auto" and base_url is None):
        from dreamkeeper.stores.local_embeddings import INSTALL_HINT, local_available

        local = local_available()
        if backend == "local" and not local:
            raise SettingsError(f"DREAMKEEPER_EMBEDDING_BACKEND=local: the model is not installed ({INSTALL_HINT})")
    if backend == "none" or local:
        base_url = None
    settings = EmbeddingSettings(
        base_url=base_url,
        model=_get(env, "DREAMKEEPER_EMBEDDING_MODEL", DEFAULT_MODEL),
        api_key=_get(env, "DREAMKEEPER_EMBEDDING_API_KEY", "") or None,
        timeout_seconds=_float(env, "DREAMKEEPER_EMBEDDING_TIMEOUT_SECONDS", 30, 0.1, 600),
        query_timeout_seconds=_float(
            env, "DREAMKEEPER_EMBEDDING_QUERY_TIMEOUT_SECONDS", 5, 0.1, 600
        ),
        min_similarity=_float(env, "DREAMKEEPER_EMBEDDING_MIN_SIMILARITY", MIN_SIMILARITY, 0, 1),
        max_input_chars=_int(
            env, "DREAMKEEPER_EMBEDDING_MAX_INPUT_CHARS", MAX_INPUT_CHARS, 100, 10_000_000
        ),
    )
    if local:
        from dreamkeeper.stores.local_embeddings import local_settings

        settings = local_settings(settings)
    return settings
