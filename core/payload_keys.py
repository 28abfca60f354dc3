"""The text form of a payload key: `key` or `id:key`, the key 32 bytes (AES-256) in
base64 (standard or url-safe) or 64 hex digits. Read here once, for the settings check
that refuses a bad key before anything starts and for the codec that uses it."""

from __future__ import annotations

import base64
import binascii
import re

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
