"""Access tokens of `dreamkeeper serve`: issued, listed, revoked, verified.

A token is `dkt_{id}_{secret}`: the id (12 hex) finds its record, the secret (32 random
bytes, URL-safe base64) proves it. Only a salted SHA-256 of the secret is stored, and it
is compared in constant time. A slow password hash would buy nothing here: the secret is
256 random bits, not a password a dictionary could guess, and the check runs on every
request. The secret is shown once, by `create`.

`TokenStore` is the whole persistence contract (add, find, all, revoke, issued): the file
implementation keeps `{data}/access/tokens.json`; `stores.postgres.tokens` one row per
token. Issuing and verifying are functions over any `TokenStore`.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import threading
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from dreamkeeper.core.errors import InvalidInput, NotFound
from dreamkeeper.policies.access import Access, Grant, validate_patterns
from dreamkeeper.stores import safe_json
from dreamkeeper.stores.files import atomic_write_text, path_lock

log = logging.getLogger(__name__)

PREFIX = "dkt_"
_TOKEN = re.compile(r"dkt_([0-9a-f]{12})_([A-Za-z0-9_\-]{43})")
_TOKEN_ID = re.compile(r"[0-9a-f]{12}")
_NAME = re.compile(r"[^\x00-\x1f\x7f]{1,100}")
MAX_FILE_BYTES = 16 * 1_048_576
DIR = "access"
FILE = "tokens.json"


@dataclass(frozen=True)
class TokenRecord:
    """One issued token as stored: never its secret."""

    id: str
    name: str
    agents: tuple[str, ...]
    access: Access
    salt: str  # hex
    hash: str  # hex SHA-256 of salt + secret
    created_at: datetime
    revoked_at: datetime | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    def grant(self) -> Grant:
        return Grant(self.id, self.access, self.agents)

    def to_json(self) -> dict[str, object]:
        data = asdict(self)
        data["agents"] = list(self.agents)
        data["access"] = self.access.value
        data["created_at"] = self.created_at.isoformat()
        data["revoked_at"] = None if self.revoked_at is None else self.revoked_at.isoformat()
        return data

    @classmethod
    def from_json(cls, data: dict[str, object]) -> TokenRecord:
        revoked = data.get("revoked_at")
        return cls(
            id=str(data["id"]),
            name=str(data["name"]),
            agents=tuple(str(a) for a in data["agents"]),  # type: ignore[attr-defined]
            access=Access(str(data["access"])),
            salt=str(data["salt"]),
            hash=str(data["hash"]),
            created_at=datetime.fromisoformat(str(data["created_at"])),
            revoked_at=None if revoked is None else datetime.fromisoformat(str(revoked)),
        )


class TokenStore(Protocol):
    def add(self, record: TokenRecord) -> None:
        """Keep a new record (its id is new)."""

    def find(self, token_id: str) -> TokenRecord | None:
        """The record with this id, revoked or not; None when there is none."""

    def all(self) -> list[TokenRecord]:
        """Every record, revoked ones included, oldest first."""

    def revoke(self, token_id: str, at: datetime) -> TokenRecord | None:
        """Mark the record revoked (idempotent); None when there is no such id."""

    def issued(self) -> bool:
        """True once any token was issued, revoked ones included: revoking the last
        token must not turn a guarded server into an open one."""


def _digest(salt: bytes, secret: str) -> str:
    return hashlib.sha256(salt + secret.encode("ascii")).hexdigest()


def issue(
    store: TokenStore,
    name: str,
    agents: list[str] | tuple[str, ...],
    access: Access,
    *,
    now: datetime | None = None,
) -> tuple[TokenRecord, str]:
    """A new token: its record (kept in the store) and its secret (shown once)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidInput("a token's name is 1-100 printable characters")
    patterns = ("*",) if access is Access.ADMIN else validate_patterns(list(agents))
    token_id = secrets.token_hex(6)
    while store.find(token_id) is not None:
        token_id = secrets.token_hex(6)
    secret = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode("ascii").rstrip("=")
    salt = secrets.token_bytes(16)
    record = TokenRecord(
        id=token_id,
        name=name,
        agents=patterns,
        access=access,
        salt=salt.hex(),
        hash=_digest(salt, secret),
        created_at=now or datetime.now(UTC),
    )
    store.add(record)
    return record, f"{PREFIX}{token_id}_{secret}"


# Compared against when the presented id has no record, so an unknown id costs the same
# hash and comparison as a known one with a wrong secret.
_DUMMY_SALT = secrets.token_bytes(16)
_DUMMY_HASH = _digest(_DUMMY_SALT, "x" * 43)


def verify(store: TokenStore, presented: str) -> Grant | None:
    """The grant of an active token whose secret matches; None otherwise."""
    match = _TOKEN.fullmatch(presented)
    if match is None:
        return None
    token_id, secret = match.groups()
    record = store.find(token_id)
    salt, expected = (
        (bytes.fromhex(record.salt), record.hash) if record else (_DUMMY_SALT, _DUMMY_HASH)
    )
    same = hmac.compare_digest(_digest(salt, secret), expected)
    if record is None or not same or not record.active:
        return None
    return record.grant()


def validate_token_id(token_id: str) -> str:
    if not isinstance(token_id, str) or not _TOKEN_ID.fullmatch(token_id):
        raise InvalidInput(f"invalid token id {token_id!r}: 12 lowercase hex characters")
    return token_id


def revoke(store: TokenStore, token_id: str, *, now: datetime | None = None) -> TokenRecord:
    record = store.revoke(validate_token_id(token_id), now or datetime.now(UTC))
    if record is None:
        raise NotFound(f"no token {token_id}")
    return record


class FileTokenStore:
    """`{data}/access/tokens.json`, replaced atomically under a lock file; readers keep
    the parsed file and read it again only when its size or mtime changed, so a check per
    request costs one stat, and a revocation is seen by the next request."""

    def __init__(self, data_dir: Path | str) -> None:
        self.root = Path(data_dir)
        self.path = self.root / DIR / FILE
        self._lock = path_lock(self.root / DIR / ".lock", within=self.root / DIR)
        self._cache: tuple[tuple[int, int, int], dict[str, TokenRecord]] | None = None
        self._guard = threading.Lock()
        self._unreadable = False

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_size, st.st_mtime_ns, st.st_ino)

    def _load(self) -> dict[str, TokenRecord]:
        stamp = self._stamp()
        if stamp is None:
            return {}
        with self._guard:
            if self._cache is not None and self._cache[0] == stamp:
                return self._cache[1]
            try:
                raw = safe_json.load_file(self.path, max_bytes=MAX_FILE_BYTES)
            except (OSError, ValueError) as exc:
                # Fail closed: a server whose token file cannot be read accepts no
                # issued token and stays guarded (`issued`), rather than open.
                log.error("cannot read %s (%s): no issued token is accepted", self.path, exc)
                self._cache = (stamp, {})
                self._unreadable = True
                return {}
            self._unreadable = False
            records: dict[str, TokenRecord] = {}
            for item in raw.get("tokens", []) if isinstance(raw, dict) else []:
                # A damaged record is left out (it opens nothing), never a crash.
                with contextlib.suppress(KeyError, TypeError, ValueError, AttributeError):
                    record = TokenRecord.from_json(item)
                    records[record.id] = record
            self._cache = (stamp, records)
            return records

    def _save(self, records: dict[str, TokenRecord]) -> None:
        body = {"version": 1, "tokens": [r.to_json() for r in records.values()]}
        atomic_write_text(self.path, json.dumps(body, indent=2) + "\n", within=self.root / DIR)
        os.chmod(self.path, 0o600)

    def add(self, record: TokenRecord) -> None:
        with self._lock.hold():
            records = dict(self._load())
            if record.id in records:
                raise InvalidInput(f"token {record.id} exists already")
            records[record.id] = record
            self._save(records)

    def find(self, token_id: str) -> TokenRecord | None:
        return self._load().get(token_id)

    def all(self) -> list[TokenRecord]:
        return sorted(self._load().values(), key=lambda r: (r.created_at, r.id))

    def revoke(self, token_id: str, at: datetime) -> TokenRecord | None:
        with self._lock.hold():
            records = dict(self._load())
            record = records.get(token_id)
            if record is None:
                return None
            if record.active:
                record = replace(record, revoked_at=at)
                records[token_id] = record
                self._save(records)
            return record

    def issued(self) -> bool:
        return bool(self._load()) or self._unreadable
