"""Payload encryption for Temporal (docs/design.md, invariant 18: content stays private).

With a key configured, every payload a Dreamkeeper client or worker hands Temporal —
workflow and activity inputs and results, update and query values, failure messages —
is sealed with AES-256-GCM before it leaves the process. Each sealed payload says which
key sealed it (`encryption-key-id`) and that it is ours (`encoding: binary/encrypted`),
so after a rotation the old keys still open old histories while the new one seals.

Keys come from the environment, first match wins:

- `DREAMKEEPER_PAYLOAD_KEY`: one key, 32 bytes as base64 or hex, optionally `id:key`
  (otherwise the id is derived from a hash of the key);
- `DREAMKEEPER_PAYLOAD_KEY_FILE`: one key per line (blank lines and `#` comments
  skipped); the first seals and opens, the rest only open;
- `{data}/payload-key`, the file `dreamkeeper dev` generates, same format.

Without any, payloads stay plain. Decoding passes through payloads that are not ours
(plain ones written before a key was set, another codec's), so turning encryption on
never strands a running workflow. A sealed payload reaching a process without the key
(a client or worker on another data directory than the one whose `payload-key` sealed
it) is `PayloadKeyMismatch`, a `StoreMismatch` naming where the key was looked for —
never the SDK's bare "Unknown payload encoding".
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import json
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from google.protobuf.message import DecodeError
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import (
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
    PayloadCodec,
    SerializationContext,
    WithSerializationContext,
)

from dreamkeeper.client.agent_keys import (
    AgentKeyErased,
    AgentKeyError,
    AgentKeyStore,
    AgentKeyStoreFactory,
    FileAgentKeyStore,
)
from dreamkeeper.core import payload_keys
from dreamkeeper.core.errors import StoreMismatch
from dreamkeeper.core.payload_keys import (
    DATA_DIR_KEY_FILE as DATA_DIR_KEY_FILE,  # where `dreamkeeper dev` writes its key
)
from dreamkeeper.core.payload_keys import (
    KEY_BYTES,
    KEY_ENV,
    KEY_FILE_ENV,
    derived_key_id,
    find_payload_keys,
)
from dreamkeeper.core.settings import load_settings

ENCODING = "encoding"
ENCRYPTED = b"binary/encrypted"
KEY_ID = "encryption-key-id"
AGENT = "dreamkeeper-agent"  # set on a payload sealed with that agent's data key
NONCE_BYTES = 12  # 96-bit, random per payload
_T = TypeVar("_T")
TAG_BYTES = 16


class PayloadDecodeError(RuntimeError):
    """A payload sealed by this codec that cannot be opened here."""


class PayloadErased(PayloadDecodeError):
    """A payload sealed with an agent's data key that `forget` destroyed."""

    def __init__(self, message: str, *, agent_id: str = "?", key_id: str = "?") -> None:
        super().__init__(message)
        self.agent_id = agent_id
        self.key_id = key_id


class PayloadKeyMismatch(PayloadDecodeError, StoreMismatch):
    """A sealed payload whose key this process lacks: it shares the worker's Temporal
    but not its keys, which in practice means not its data directory (exit 2)."""


@dataclass(frozen=True)
class PayloadKey:
    key_id: str
    secret: bytes = field(repr=False)


def parse_key(text: str, where: str) -> PayloadKey:
    """`key` or `id:key` (core.payload_keys). `where` names the variable (and line) in
    the error; the error never repeats the key material."""
    return PayloadKey(*payload_keys.parse_key(text, where))


@dataclass(frozen=True)
class PayloadKeys:
    """The keys payloads are sealed and opened with: the first seals, all open."""

    keys: tuple[PayloadKey, ...] = ()
    source: str = "none"  # where the keys came from, for messages (never the keys)
    # Without keys: where they were looked for, for the message a sealed payload gets.
    looked_in: str = f"{KEY_ENV} and {KEY_FILE_ENV} are unset"
    # Where the per-agent data keys live (`client.agent_keys`); None: no data keys, every
    # payload is sealed with the payload key itself.
    data_dir: Path | None = None
    # The shared key store of a database backend (`stores.postgres.agent_keys`), passed in
    # by a caller that may load the stores; it replaces the data directory's files, which
    # a worker on another host would never see.
    key_store: AgentKeyStoreFactory | None = field(default=None, compare=False)

    @property
    def configured(self) -> bool:
        return bool(self.keys)

    def agent_keys(self) -> AgentKeyStore | None:
        if not self.keys:
            return None
        wrapping = [(k.key_id, k.secret) for k in self.keys]
        if self.key_store is not None:
            return self.key_store(wrapping, self.data_dir)
        if self.data_dir is None:
            return None
        return FileAgentKeyStore(self.data_dir, wrapping)

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        data_dir: Path | None = None,
        key_store: AgentKeyStoreFactory | None = None,
    ) -> PayloadKeys:
        """The keys configured in core.settings (read there, parsed here); per-agent data
        keys from `key_store` when given, else under `data_dir`."""
        found = cls._from_env(env, data_dir)
        return dataclasses.replace(found, key_store=key_store) if found.configured else found

    @classmethod
    def _from_env(cls, env: Mapping[str, str] | None, data_dir: Path | None) -> PayloadKeys:
        configured = load_settings(env).codec
        found = find_payload_keys(configured.payload_key, configured.payload_key_file, data_dir)
        if not found.keys:
            return cls(looked_in=found.looked_in)
        keys = tuple(PayloadKey(key_id, secret) for key_id, secret in found.keys)
        return cls(keys, found.source, data_dir=data_dir)


def generate_key_file(path: Path) -> PayloadKey:
    """A fresh random key written to `path` (mode 0600, never overwriting a file)."""
    secret = os.urandom(KEY_BYTES)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write("# Dreamkeeper payload key (development). First key seals, the rest open.\n")
        out.write(base64.b64encode(secret).decode() + "\n")
        out.flush()
        os.fsync(out.fileno())
    return PayloadKey(derived_key_id(secret), secret)


# The agent a payload belongs to: the pydantic converter writes a model as a JSON object
# of its fields, and every workflow and activity input names its agent at the top level
# (a field nested in memory content never counts: it could name anyone). The Forget
# workflow's payloads name theirs as `agent` on purpose: they must outlive the agent's
# key (core.forgetting.ForgetInput).
_AGENT_FIELDS = ("agent_id", "agentId")
_AGENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-]{0,63}")
_JSON = (b"json/plain",)
_RECENT_WORKFLOWS = 8_192


class _WorkflowAgents:
    """Which agent each recent workflow id belongs to, learned from the payloads of
    that workflow this process sealed or opened: a result or failure that does not name
    its agent is still sealed with the agent's key."""

    def __init__(self) -> None:
        self._map: OrderedDict[str, str] = OrderedDict()
        self._guard = threading.Lock()

    def note(self, workflow_id: str | None, agent_id: str) -> None:
        if workflow_id is None:
            return
        with self._guard:
            self._map[workflow_id] = agent_id
            self._map.move_to_end(workflow_id)
            while len(self._map) > _RECENT_WORKFLOWS:
                self._map.popitem(last=False)

    def get(self, workflow_id: str | None) -> str | None:
        if workflow_id is None:
            return None
        with self._guard:
            return self._map.get(workflow_id)


class EncryptionCodec(PayloadCodec, WithSerializationContext):
    """AES-256-GCM over the whole serialized payload (data and metadata), a random
    96-bit nonce per payload, the key id as associated data.

    With an agent key store, a payload that belongs to an agent (it names one, or its
    workflow did) is sealed with that agent's data key instead (`client.agent_keys`),
    marked with the agent id and the data key's id; `forget` destroys the data key and
    with it every such payload. The SDK hands the codec the workflow a payload belongs to
    (`with_context`), which is how a result that names no agent finds its agent."""

    def __init__(self, keys: Sequence[PayloadKey], agent_keys: AgentKeyStore | None = None) -> None:
        if not keys:
            raise ValueError("EncryptionCodec needs at least one key")
        self.key_id = keys[0].key_id
        self._ciphers = {key.key_id: AESGCM(key.secret) for key in keys}
        self.agent_keys = agent_keys
        self._workflow_id: str | None = None
        self._workflows = _WorkflowAgents()

    def with_context(self, context: SerializationContext) -> EncryptionCodec:
        bound = copy.copy(self)  # shares the ciphers, the key store and what it learned
        bound._workflow_id = getattr(context, "workflow_id", None)
        return bound

    @property
    def key_ids(self) -> list[str]:
        return list(self._ciphers)

    def _agent_of(self, payload: Payload) -> str | None:
        if payload.metadata.get(ENCODING) in _JSON and payload.data[:1] == b"{":
            agent = _top_level_agent(payload.data)
            if agent is not None:
                self._workflows.note(self._workflow_id, agent)
                return agent
        return self._workflows.get(self._workflow_id)

    def encode_sync(self, payloads: Sequence[Payload]) -> list[Payload]:
        sealed = []
        for payload in payloads:
            if payload.metadata.get(ENCODING) == ENCRYPTED:
                sealed.append(payload)  # already sealed: never twice
                continue
            agent = self._agent_of(payload) if self.agent_keys is not None else None
            sealed.append(self._seal(payload, agent))
        return sealed

    def seal_for(self, agent_id: str, payload: Payload) -> Payload:
        """The payload sealed with the agent's data key, whatever it holds (with the
        payload key when this codec keeps no data keys): for a value carried inside
        another payload that must outlive that key (`seal_for_agent`)."""
        return self._seal(payload, agent_id if self.agent_keys is not None else None)

    def _seal(self, payload: Payload, agent: str | None) -> Payload:
        nonce = os.urandom(NONCE_BYTES)
        if agent is not None and self.agent_keys is not None:
            key = self.agent_keys.current(agent)
            aad = _agent_aad(agent, key.key_id)
            data = key.cipher.encrypt(nonce, payload.SerializeToString(), aad)
            metadata = {ENCODING: ENCRYPTED, KEY_ID: key.key_id.encode(), AGENT: agent.encode()}
        else:
            cipher = self._ciphers[self.key_id]
            data = cipher.encrypt(nonce, payload.SerializeToString(), self.key_id.encode())
            metadata = {ENCODING: ENCRYPTED, KEY_ID: self.key_id.encode()}
        return Payload(metadata=metadata, data=nonce + data)

    def decode_sync(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._open(p) for p in payloads]

    def _open(self, payload: Payload) -> Payload:
        if payload.metadata.get(ENCODING) != ENCRYPTED or KEY_ID not in payload.metadata:
            return payload  # plain, or not ours
        key_id = payload.metadata[KEY_ID].decode("utf-8", errors="replace")
        if AGENT in payload.metadata:
            return self._open_agent(payload, key_id)
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise PayloadKeyMismatch(
                f"payload was encrypted with key id {key_id!r}, which is not configured "
                f"(configured: {', '.join(self._ciphers)}); add that key as a decode-only "
                f"line of {KEY_FILE_ENV}"
            )
        return _unseal(cipher, payload.data, key_id.encode(), key_id)

    def _open_agent(self, payload: Payload, key_id: str) -> Payload:
        agent = payload.metadata[AGENT].decode("utf-8", errors="replace")
        if self.agent_keys is None:
            raise PayloadKeyMismatch(
                f"payload was sealed with a data key of agent {agent!r}, and this process "
                "has no data directory to find agent keys in: use the worker's data "
                "directory (--data / DREAMKEEPER_DATA)"
            )
        try:
            key = self.agent_keys.find(agent, key_id)
        except AgentKeyErased as exc:
            raise PayloadErased(str(exc), agent_id=agent, key_id=key_id) from None
        except (AgentKeyError, ValueError) as exc:
            raise PayloadKeyMismatch(str(exc)) from None
        self._workflows.note(self._workflow_id, agent)
        return _unseal(key.cipher, payload.data, _agent_aad(agent, key_id), key_id)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return self.encode_sync(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return self.decode_sync(payloads)


def _top_level_agent(data: bytes) -> str | None:
    try:
        value = json.loads(data)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    for name in _AGENT_FIELDS:
        agent = value.get(name)
        if isinstance(agent, str) and _AGENT_ID.fullmatch(agent):
            return agent
    return None


def _agent_aad(agent: str, key_id: str) -> bytes:
    return f"{agent}\0{key_id}".encode()


def _unseal(cipher: AESGCM, data: bytes, aad: bytes, key_id: str) -> Payload:
    if len(data) < NONCE_BYTES + TAG_BYTES:
        raise PayloadDecodeError(f"payload with key id {key_id!r} is truncated")
    try:
        plain = cipher.decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:], aad)
    except InvalidTag:
        raise PayloadDecodeError(
            f"payload with key id {key_id!r} failed authentication: it was altered, "
            "or sealed by a different key under the same id"
        ) from None
    try:
        return Payload.FromString(plain)
    except DecodeError:
        raise PayloadDecodeError(
            f"payload with key id {key_id!r} decrypted to something that is not a payload"
        ) from None


class KeylessCodec(PayloadCodec):
    """The codec of a process without keys: seals nothing, and refuses a sealed payload
    with a message saying where the key was looked for. Without it the SDK's converter
    raises `KeyError: 'Unknown payload encoding binary/encrypted'` with a traceback."""

    def __init__(self, looked_in: str) -> None:
        self.looked_in = looked_in

    def decode_sync(self, payloads: Sequence[Payload]) -> list[Payload]:
        for payload in payloads:
            if payload.metadata.get(ENCODING) == ENCRYPTED:
                key_id = payload.metadata.get(KEY_ID, b"?").decode("utf-8", errors="replace")
                raise PayloadKeyMismatch(
                    f"a payload sealed with key id {key_id!r} came from the worker, but this "
                    f"process has no payload key ({self.looked_in}): it is using another "
                    "data directory than that worker. Use the worker's data directory "
                    f"(--data / DREAMKEEPER_DATA), or give this process its key ({KEY_ENV} "
                    f"or {KEY_FILE_ENV})"
                )
        return list(payloads)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return self.decode_sync(payloads)


def data_converter(settings: PayloadKeys | None = None) -> DataConverter:
    """The pydantic data converter, sealing payloads when keys are configured. Failure
    messages and stack traces then go into encoded (so sealed) attributes too: an
    exception's text can quote the content it choked on."""
    if settings is None or not settings.configured:
        looked_in = settings.looked_in if settings is not None else PayloadKeys().looked_in
        return dataclasses.replace(pydantic_data_converter, payload_codec=KeylessCodec(looked_in))
    return dataclasses.replace(
        pydantic_data_converter,
        payload_codec=EncryptionCodec(settings.keys, settings.agent_keys()),
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )


def seal_for_agent(converter: DataConverter, agent_id: str, value: object) -> str:
    """`value` as one payload sealed with the agent's data key, serialized as base64 text:
    content carried inside a payload that is sealed otherwise and must stay readable
    after the agent is forgotten (the Forget workflow's input, core.forgetting). Once
    the agent's key is destroyed nobody can open it. Without a payload key it is the
    plain payload, as every payload then is."""
    payload = converter.payload_converter.to_payloads([value])[0]
    codec = converter.payload_codec
    if isinstance(codec, EncryptionCodec):
        payload = codec.seal_for(agent_id, payload)
    return base64.b64encode(payload.SerializeToString()).decode("ascii")


def open_sealed(converter: DataConverter, sealed: str, as_type: type[_T]) -> _T:
    """The value `seal_for_agent` sealed. `PayloadErased` once the agent's key was
    destroyed; `PayloadDecodeError` for anything else that does not open, never
    quoting what it held."""
    try:
        payload = Payload.FromString(base64.b64decode(sealed, validate=True))
    except (ValueError, DecodeError):
        raise PayloadDecodeError("the sealed value is not a serialized payload") from None
    codec = converter.payload_codec
    if isinstance(codec, EncryptionCodec | KeylessCodec):
        [payload] = codec.decode_sync([payload])
    try:
        [value] = converter.payload_converter.from_payloads([payload], [as_type])
    except Exception:  # noqa: BLE001 - a validation error would quote the value it refused
        raise PayloadDecodeError(f"the sealed value is not a {as_type.__name__}") from None
    return value


def plain_payload(value: object) -> Payload:
    """A value as a payload no codec seals: for ids and fixed text (never memory content)
    that a process without the key must read. The SDK stores a Payload memo value or
    summary as given, past the client's codec."""
    return pydantic_data_converter.payload_converter.to_payloads([value])[0]


# On the placeholder a codec server answers for an erased payload: the agent it belonged
# to, and the id of the destroyed data key that sealed it.
FORGOTTEN = "dreamkeeper-forgotten"
FORGOTTEN_KEY_ID = "dreamkeeper-forgotten-key-id"


def forgotten_placeholder(erased: PayloadErased) -> Payload:
    """What a codec server gives the Temporal UI (and the `temporal` CLI) for a payload
    whose agent was forgotten: a plain JSON string saying so, which both show where the
    value was, instead of failing the whole page. It holds no content (there is none
    left to hold); a program tells it from a value by the `FORGOTTEN` metadata."""
    payload = plain_payload(
        f"[forgotten: agent {erased.agent_id}; sealed with data key {erased.key_id}, "
        "destroyed by forget, so no one can decode it]"
    )
    payload.metadata[FORGOTTEN] = erased.agent_id.encode()
    payload.metadata[FORGOTTEN_KEY_ID] = erased.key_id.encode()
    return payload


def sealing_key_id(converter: DataConverter) -> str | None:
    """The id of the payload key this converter seals with; None: it seals nothing."""
    codec = converter.payload_codec
    return codec.key_id if isinstance(codec, EncryptionCodec) else None


def cannot_seal(converter: DataConverter, task_queue: str, why: str) -> PayloadKeyMismatch:
    """The refusal a client without a payload key gets before it starts a workflow whose
    payloads the deployment seals: its own would enter Temporal history in clear, where
    `forget` can never reach them."""
    codec = converter.payload_codec
    looked_in = codec.looked_in if isinstance(codec, KeylessCodec) else "no key configured"
    return PayloadKeyMismatch(
        f"{why}, but this process has no payload key ({looked_in}): what it sent to task "
        f"queue {task_queue!r} would enter Temporal history unencrypted, where forget can "
        f"never erase it, so nothing was started. Give this process the workers' key "
        f"({KEY_ENV} or {KEY_FILE_ENV}), or run it where their data directory is"
    )


def missing_key_note(converter: DataConverter) -> str:
    """For a store-mismatch message: where a process without keys looked for one."""
    codec = converter.payload_codec
    if isinstance(codec, KeylessCodec):
        return f"; this process has no payload key either ({codec.looked_in})"
    return ""


def describe_converter(converter: DataConverter) -> str:
    codec = converter.payload_codec
    if isinstance(codec, EncryptionCodec):
        return f"encrypted (key {codec.key_id}; opens {', '.join(codec.key_ids)})"
    return f"not encrypted (set {KEY_ENV} or {KEY_FILE_ENV} to encrypt memory content)"
