"""The text form of a payload key: `key` or `id:key`, the key 32 bytes (AES-256) in
base64 (standard or url-safe) or 64 hex digits. Read here once, for the settings check
that refuses a bad key before anything starts and for the codec that uses it."""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from dreamkeeper.core.errors import SettingsError

KEY_BYTES = 32  # AES-256
KEY_ID_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,64}")
_HEX_KEY = re.compile(r"[0-9a-fA-F]{64}")


def key_material(material: str) -> bytes | None:
    """The bytes of base64 or hex key material, or None when it is neither."""
    if _HEX_KEY.fullmatch(material):
        return bytes.fromhex(material)
    text = material.replace("-", "+").replace("_", "/")  # url-safe base64 too
    text += "=" * (-len(text) % 4)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


def read_key_text(text: str) -> tuple[str | None, bytes]:
    """(key id or None, secret) of `key` or `id:key`. ValueError says what is wrong and
    never repeats the key material."""
    text = text.strip()
    key_id: str | None = None
    if ":" in text:
        key_id, text = (part.strip() for part in text.split(":", 1))
        if not KEY_ID_PATTERN.fullmatch(key_id):
            raise ValueError(f"key id {key_id!r} must be 1-64 characters of A-Za-z0-9._-")
    secret = key_material(text)
    if secret is None:
        raise ValueError("the key is neither base64 nor 64 hex digits")
    if len(secret) != KEY_BYTES:
        raise ValueError(
            f"the key is {len(secret)} bytes; AES-256 needs exactly {KEY_BYTES} "
            "(generate one with: python -c 'import os,base64; "
            "print(base64.b64encode(os.urandom(32)).decode())')"
        )
    return key_id, secret


# Where a process finds its payload keys, first match wins (the codec and the stores
# read them the same way, so both sides of a process seal with the same keys).
KEY_ENV = "DREAMKEEPER_PAYLOAD_KEY"
KEY_FILE_ENV = "DREAMKEEPER_PAYLOAD_KEY_FILE"
DATA_DIR_KEY_FILE = "payload-key"

Key = tuple[str, bytes]  # (key id, secret)


def derived_key_id(secret: bytes) -> str:
    """16 hex characters of a domain-separated SHA-256: names the key, reveals nothing."""
    return hashlib.sha256(b"dreamkeeper payload key id\0" + secret).hexdigest()[:16]


def parse_key(text: str, where: str) -> Key:
    """`key` or `id:key`; `where` names the variable (and line) in the error, which never
    repeats the key material."""
    try:
        key_id, secret = read_key_text(text)
    except ValueError as exc:
        raise SettingsError(f"{where}: {exc}") from None
    return key_id or derived_key_id(secret), secret


def read_key_file(path: Path, what: str) -> tuple[Key, ...]:
    """The keys of a key file: one per line, blank lines and `#` comments skipped."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{what}: cannot read {path}: {exc}") from None
    keys: dict[str, bytes] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key_id, secret = parse_key(line, f"{what} {path} line {number}")
        if key_id in keys and keys[key_id] != secret:
            raise SettingsError(
                f"{what} {path} line {number}: key id {key_id!r} is used by two different keys"
            )
        keys.setdefault(key_id, secret)
    if not keys:
        raise SettingsError(f"{what}: {path} holds no key")
    return tuple(keys.items())


@dataclass(frozen=True)
class FoundKeys:
    keys: tuple[Key, ...]  # the first seals, all open; empty: none configured
    source: str  # where they came from, for messages (never the keys)
    looked_in: str  # without keys: where they were looked for


def find_payload_keys(
    payload_key: str | None, payload_key_file: Path | None, data_dir: Path | None
) -> FoundKeys:
    """The payload keys of a process: `DREAMKEEPER_PAYLOAD_KEY`, or the lines of
    `DREAMKEEPER_PAYLOAD_KEY_FILE`, or `{data}/payload-key` (what `dreamkeeper dev`
    generates), first match wins; `SettingsError` for a bad key or both variables."""
    single = payload_key or ""
    file = str(payload_key_file or "")
    if single and file:
        raise SettingsError(f"set {KEY_ENV} or {KEY_FILE_ENV}, not both")
    if single:
        return FoundKeys((parse_key(single, KEY_ENV),), KEY_ENV, "")
    if file:
        path = Path(file).expanduser()
        return FoundKeys(read_key_file(path, KEY_FILE_ENV), f"{KEY_FILE_ENV}={path}", "")
    if data_dir is not None and (data_dir / DATA_DIR_KEY_FILE).is_file():
        path = data_dir / DATA_DIR_KEY_FILE
        return FoundKeys(read_key_file(path, "the data directory's key file"), str(path), "")
    looked_in = f"{KEY_ENV} and {KEY_FILE_ENV} are unset"
    if data_dir is not None:
        looked_in += f" and there is no {Path(os.path.abspath(data_dir)) / DATA_DIR_KEY_FILE}"
    return FoundKeys((), "none", looked_in)
