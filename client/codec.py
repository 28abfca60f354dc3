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
import dataclasses
import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from google.protobuf.message import DecodeError
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import (
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
    PayloadCodec,
)

from dreamkeeper.core.errors import SettingsError, StoreMismatch
from dreamkeeper.core.payload_keys import KEY_BYTES, read_key_text
from dreamkeeper.core.settings import load_settings

KEY_ENV = "DREAMKEEPER_PAYLOAD_KEY"
KEY_FILE_ENV = "DREAMKEEPER_PAYLOAD_KEY_FILE"
DATA_DIR_KEY_FILE = "payload-key"

ENCODING = "encoding"
ENCRYPTED = b"binary/encrypted"
KEY_ID = "encryption-key-id"
NONCE_BYTES = 12  # 96-bit, random per payload
TAG_BYTES = 16


class PayloadDecodeError(RuntimeError):
    """A payload sealed by this codec that cannot be opened here."""


class PayloadKeyMismatch(PayloadDecodeError, StoreMismatch):
    """A sealed payload whose key this process lacks: it shares the worker's Temporal
    but not its keys, which in practice means not its data directory (exit 2)."""


@dataclass(frozen=True)
class PayloadKey:
    key_id: str
    secret: bytes = field(repr=False)


def derived_key_id(secret: bytes) -> str:
    """16 hex characters of a domain-separated SHA-256: names the key, reveals nothing."""
    return hashlib.sha256(b"dreamkeeper payload key id\0" + secret).hexdigest()[:16]


def parse_key(text: str, where: str) -> PayloadKey:
    """`key` or `id:key` (core.payload_keys). `where` names the variable (and line) in
    the error; the error never repeats the key material."""
    try:
        key_id, secret = read_key_text(text)
    except ValueError as exc:
        raise SettingsError(f"{where}: {exc}") from None
    return PayloadKey(key_id or derived_key_id(secret), secret)


def _read_key_file(path: Path, what: str) -> tuple[PayloadKey, ...]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{what}: cannot read {path}: {exc}") from None
    keys: dict[str, PayloadKey] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key = parse_key(line, f"{what} {path} line {number}")
        if key.key_id in keys and keys[key.key_id].secret != key.secret:
            raise SettingsError(
                f"{what} {path} line {number}: key id {key.key_id!r} is used by two different keys"
            )
        keys.setdefault(key.key_id, key)
    if not keys:
        raise SettingsError(f"{what}: {path} holds no key")
    return tuple(keys.values())


@dataclass(frozen=True)
class PayloadKeys:
    """The keys payloads are sealed and opened with: the first seals, all open."""

    keys: tuple[PayloadKey, ...] = ()
    source: str = "none"  # where the keys came from, for messages (never the keys)
    # Without keys: where they were looked for, for the message a sealed payload gets.
    looked_in: str = f"{KEY_ENV} and {KEY_FILE_ENV} are unset"

    @property
    def configured(self) -> bool:
        return bool(self.keys)

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, data_dir: Path | None = None
    ) -> PayloadKeys:
        """The keys configured in core.settings (read there, parsed here)."""
        configured = load_settings(env).codec
        single = configured.payload_key or ""
        file = str(configured.payload_key_file or "")
        if single and file:
            raise SettingsError(f"set {KEY_ENV} or {KEY_FILE_ENV}, not both")
        if single:
            return cls((parse_key(single, KEY_ENV),), KEY_ENV)
        if file:
            path = Path(file).expanduser()
            return cls(_read_key_file(path, KEY_FILE_ENV), f"{KEY_FILE_ENV}={path}")
        if data_dir is not None and (data_dir / DATA_DIR_KEY_FILE).is_file():
            path = data_dir / DATA_DIR_KEY_FILE
            return cls(_read_key_file(path, "the data directory's key file"), str(path))
        looked_in = f"{KEY_ENV} and {KEY_FILE_ENV} are unset"
        if data_dir is not None:
            looked_in += f" and there is no {Path(os.path.abspath(data_dir)) / DATA_DIR_KEY_FILE}"
        return cls(looked_in=looked_in)


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


class EncryptionCodec(PayloadCodec):
    """AES-256-GCM over the whole serialized payload (data and metadata), a random
    96-bit nonce per payload, the key id as associated data."""

    def __init__(self, keys: Sequence[PayloadKey]) -> None:
        if not keys:
            raise ValueError("EncryptionCodec needs at least one key")
        self.key_id = keys[0].key_id
        self._ciphers = {key.key_id: AESGCM(key.secret) for key in keys}

    @property
    def key_ids(self) -> list[str]:
        return list(self._ciphers)

    def encode_sync(self, payloads: Sequence[Payload]) -> list[Payload]:
        cipher = self._ciphers[self.key_id]
        sealed = []
        for payload in payloads:
            if payload.metadata.get(ENCODING) == ENCRYPTED:
                sealed.append(payload)  # already sealed: never twice
                continue
            nonce = os.urandom(NONCE_BYTES)
            data = cipher.encrypt(nonce, payload.SerializeToString(), self.key_id.encode())
            sealed.append(
                Payload(
                    metadata={ENCODING: ENCRYPTED, KEY_ID: self.key_id.encode()},
                    data=nonce + data,
                )
            )
        return sealed

    def decode_sync(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._open(p) for p in payloads]

    def _open(self, payload: Payload) -> Payload:
        if payload.metadata.get(ENCODING) != ENCRYPTED or KEY_ID not in payload.metadata:
            return payload  # plain, or not ours
        key_id = payload.metadata[KEY_ID].decode("utf-8", errors="replace")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise PayloadKeyMismatch(
                f"payload was encrypted with key id {key_id!r}, which is not configured "
                f"(configured: {', '.join(self._ciphers)}); add that key as a decode-only "
                f"line of {KEY_FILE_ENV}"
            )
        data = payload.data
        if len(data) < NONCE_BYTES + TAG_BYTES:
            raise PayloadDecodeError(f"payload with key id {key_id!r} is truncated")
        try:
            plain = cipher.decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:], key_id.encode())
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

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return self.encode_sync(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return self.decode_sync(payloads)


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
        payload_codec=EncryptionCodec(settings.keys),
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )


def plain_payload(value: object) -> Payload:
    """A value as a payload no codec seals: for ids and fixed text (never memory content)
    that a process without the key must read. The SDK stores a Payload memo value or
    summary as given, past the client's codec."""
    return pydantic_data_converter.payload_converter.to_payloads([value])[0]


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
