"""Access tokens of `dreamkeeper serve`: issued, listed, revoked, verified.

A token is `dkt_{id}_{secret}`: the id (12 hex) finds its record, the secret (32 random
bytes, URL-safe base64) proves it. Only a salted SHA-256 of the secret is stored, and it
is compared in constant time. A slow password hash would buy nothing here: the secret is
256 random bits, not a password a dictionary could guess, and the check runs on every
request. The secret is shown once, by `create`.

`TokenStore` is the whole persistence contract: the file implementation keeps
`{data}/access/tokens.json`; `stores.postgres.tokens` one row per token. Issuing and
verifying are functions over any `TokenStore`.

The store fails closed. Before the first token is kept, the store records that tokens
are issued here somewhere the token file's damage cannot reach (the store identity: the
data directory's `dreamkeeper-store.json`, the database's `dreamkeeper_store` row). A
`TokenSnapshot` reports the store as damaged, never as empty, when the tokens cannot be
trusted: a file or row that does not parse or has the wrong shape, a symlink or
directory where the file belongs, or no token at all although tokens were issued. `serve`
refuses every request while it is damaged (service.guard), and `token create|revoke`
never overwrite a damaged file.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import stat
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from dreamkeeper.core.errors import InvalidInput, NotFound, Unavailable
from dreamkeeper.policies.access import Access, Grant, validate_patterns
from dreamkeeper.stores import safe_json
from dreamkeeper.stores.files.agent_files import atomic_write_text, path_lock
from dreamkeeper.stores.identity import IDENTITY_FILE, mark_tokens_issued, tokens_issued

log = logging.getLogger(__name__)

PREFIX = "dkt_"
_TOKEN = re.compile(r"dkt_([0-9a-f]{12})_([A-Za-z0-9_\-]{43})")
_TOKEN_ID = re.compile(r"[0-9a-f]{12}")
_NAME = re.compile(r"[^\x00-\x1f\x7f]{1,100}")
_SALT = re.compile(r"[0-9a-f]{32}")
_HASH = re.compile(r"[0-9a-f]{64}")
MAX_FILE_BYTES = 16 * 1_048_576
DIR = "access"
FILE = "tokens.json"
FILE_VERSION = 1
_FIELDS = frozenset({"id", "name", "agents", "access", "salt", "hash", "created_at", "revoked_at"})


class TokenStoreDamaged(Unavailable):
    """The access tokens cannot be trusted: `serve` refuses every request, and nothing
    is written over them, until an operator repairs or restores them."""


def _moment(value: object, what: str) -> datetime:
    if not isinstance(value, str):
        raise ValueError(f"{what} is not a time")
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is None:
        raise ValueError(f"{what} has no time zone")
    return moment


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
    def from_json(cls, data: object) -> TokenRecord:
        """A record exactly as `to_json` writes it, or ValueError saying what is wrong: a
        record that is only nearly right (a string where the list of agents belongs, an
        access spelt otherwise) grants nothing, rather than something nobody issued."""
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        if set(data) != _FIELDS:
            odd = sorted(str(k) for k in set(data) ^ _FIELDS)
            raise ValueError(f"missing or unknown fields: {', '.join(odd)}")
        token_id, name, agents = data["id"], data["name"], data["agents"]
        if not isinstance(token_id, str) or not _TOKEN_ID.fullmatch(token_id):
            raise ValueError("id is not 12 lowercase hex characters")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValueError("name is not 1-100 printable characters")
        if not isinstance(agents, list) or not all(isinstance(a, str) for a in agents):
            raise ValueError("agents is not a list of agent patterns")
        if not isinstance(data["access"], str):
            raise ValueError("access is not a string")
        access = Access(data["access"])
        patterns = validate_patterns(agents)
        if access is Access.ADMIN and patterns != ("*",):
            raise ValueError("an admin token's agents are not ['*']")
        for key, pattern in (("salt", _SALT), ("hash", _HASH)):
            value = data[key]
            if not isinstance(value, str) or not pattern.fullmatch(value):
                raise ValueError(f"{key} is not lowercase hex of the right length")
        revoked = data["revoked_at"]
        return cls(
            id=token_id,
            name=name,
            agents=patterns,
            access=access,
            salt=data["salt"],
            hash=data["hash"],
            created_at=_moment(data["created_at"], "created_at"),
            revoked_at=None if revoked is None else _moment(revoked, "revoked_at"),
        )


@dataclass(frozen=True)
class TokenSnapshot:
    """What a token store holds at one moment. `issued`: tokens were issued here (so no
    request is let in without one); `damage`: why the tokens cannot be trusted (None when
    they can). A damaged store is always `issued`: damage never opens a server."""

    records: Mapping[str, TokenRecord] = field(default_factory=dict)
    issued: bool = False
    damage: str | None = None

    def find(self, token_id: str) -> TokenRecord | None:
        return self.records.get(token_id)


class TokenStore(Protocol):
    where: str  # what holds the tokens, for an operator (a path, a table)
    public_name: str  # the same, as a caller without a token may be told it

    def snapshot(self) -> TokenSnapshot:
        """The tokens now, checked (cheap when nothing changed: once per request)."""

    def add(self, record: TokenRecord) -> None:
        """Keep a new record (its id is new), after recording that tokens are issued
        here. `TokenStoreDamaged` rather than writing over damaged tokens."""

    def find(self, token_id: str) -> TokenRecord | None:
        """The record with this id, revoked or not; None when there is none (or it is
        damaged)."""

    def all(self) -> list[TokenRecord]:
        """Every readable record, revoked ones included, oldest first."""

    def revoke(self, token_id: str, at: datetime) -> TokenRecord | None:
        """Mark the record revoked (idempotent); None when there is no such id."""

    def issued(self) -> bool:
        """True once any token was issued, revoked ones included, and whenever the store
        is damaged: revoking the last token, or losing the file, never turns a guarded
        server into an open one."""

    def mark_issued(self) -> None:
        """Record that tokens are issued here (idempotent): `migrate` carries it over."""


class Sticky:
    """A process that once saw tokens issued never forgets it: if the token store and the
    mark both disappear while it runs, that is damage, not an open server."""

    def __init__(self) -> None:
        self._seen_issued = False

    def _sticky(self, snapshot: TokenSnapshot, where: str) -> TokenSnapshot:
        if snapshot.issued:
            self._seen_issued = True
        elif self._seen_issued:
            return replace(
                snapshot,
                issued=True,
                damage=f"{where} holds no token and no mark that tokens were issued, but "
                "this process saw tokens issued there",
            )
        return snapshot


def damaged_message(store: TokenStore) -> str:
    """What a refused request is told: the store by name, not what is wrong with it (that
    is in the server's log, for the operator)."""
    return (
        f"this server's access tokens ({store.public_name}) are damaged, so it refuses "
        "every request until an operator repairs or restores them (the server's log says "
        "what is wrong)"
    )


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


class FindsTokens(Protocol):
    def find(self, token_id: str) -> TokenRecord | None: ...


def verify(store: FindsTokens, presented: str) -> Grant | None:
    """The grant of an active token whose secret matches; None otherwise. `store` is a
    `TokenStore` or one `TokenSnapshot` of it (what the guard checked for damage)."""
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


class FileTokenStore(Sticky):
    """`{data}/access/tokens.json`, replaced atomically under a lock file; readers keep
    the checked snapshot and read the file again only when it, its directory or the
    store identity changed (a few `lstat`s per request), so a revocation is seen by the
    next request."""

    def __init__(self, data_dir: Path | str) -> None:
        super().__init__()
        self.root = Path(data_dir)
        self.path = self.root / DIR / FILE
        self.where = str(self.path)
        self.public_name = f"{DIR}/{FILE} in the data directory"
        self._lock = path_lock(self.root / DIR / ".lock", within=self.root / DIR)
        self._cache: tuple[tuple[Any, ...], TokenSnapshot] | None = None
        self._guard = threading.Lock()

    def _stamp(self) -> tuple[Any, ...]:
        stamps: list[Any] = []
        for path in (self.path, self.path.parent, self.root / IDENTITY_FILE):
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                stamps.append(None)
                continue
            stamps.append((st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
        return tuple(stamps)

    def snapshot(self) -> TokenSnapshot:
        stamp = self._stamp()
        with self._guard:
            if self._cache is not None and self._cache[0] == stamp:
                return self._cache[1]
            found = self._sticky(self._read(), self.where)
            if found.damage and (self._cache is None or self._cache[1].damage != found.damage):
                log.error("access tokens damaged: %s", found.damage)
            self._cache = (stamp, found)
            return found

    def _read(self) -> TokenSnapshot:
        try:
            marked = tokens_issued(self.root)
        except InvalidInput as exc:
            return TokenSnapshot({}, True, f"cannot tell whether tokens were issued here: {exc}")
        try:
            folder = os.lstat(self.path.parent)
        except FileNotFoundError:
            folder = None
        if folder is not None and not stat.S_ISDIR(folder.st_mode):
            return TokenSnapshot({}, True, f"{self.path.parent} is not a plain directory")
        try:
            raw = safe_json.load_file(self.path, max_bytes=MAX_FILE_BYTES)
        except FileNotFoundError:
            if marked:
                return TokenSnapshot(
                    {}, True, f"{self.path} is missing, but tokens were issued here"
                )
            return TokenSnapshot()
        except (OSError, ValueError) as exc:
            return TokenSnapshot({}, True, f"{self.path} cannot be read ({exc})")
        records, damage = parse_token_file(raw)
        if damage is None and not records:
            damage = "it holds no token, but tokens were issued here"
        if damage is not None:
            return TokenSnapshot(records, True, f"{self.path}: {damage}")
        if not marked:
            # Tokens issued before the store identity kept the mark: keep it now, so
            # losing this file later does not open the server.
            try:
                mark_tokens_issued(self.root)
            except (OSError, InvalidInput) as exc:
                log.warning("cannot record in the store identity that tokens are issued: %s", exc)
        return TokenSnapshot(records, True)

    def _save(self, records: dict[str, TokenRecord]) -> None:
        body = {"version": FILE_VERSION, "tokens": [r.to_json() for r in records.values()]}
        atomic_write_text(self.path, json.dumps(body, indent=2) + "\n", within=self.root / DIR)
        os.chmod(self.path, 0o600)

    def _writable(self) -> dict[str, TokenRecord]:
        """The records to write the next file from; refuses to write over damage that an
        operator could still repair (a file that is there but does not check out)."""
        found = self.snapshot()
        if found.damage is None:
            return dict(found.records)
        if os.path.lexists(self.path):
            raise TokenStoreDamaged(
                f"{found.damage}. Nothing was changed: repair it or restore it from a backup "
                f"(or move it away and issue new tokens: every token it held then stops "
                "working)"
            )
        return {}  # gone: a new file, and the tokens it held stay unusable

    def add(self, record: TokenRecord) -> None:
        with self._lock.hold():
            records = self._writable()
            if record.id in records:
                raise InvalidInput(f"token {record.id} exists already")
            mark_tokens_issued(self.root)  # first: from here on the server stays closed
            records[record.id] = record
            self._save(records)

    def find(self, token_id: str) -> TokenRecord | None:
        return self.snapshot().find(token_id)

    def all(self) -> list[TokenRecord]:
        return sorted(self.snapshot().records.values(), key=lambda r: (r.created_at, r.id))

    def revoke(self, token_id: str, at: datetime) -> TokenRecord | None:
        with self._lock.hold():
            records = self._writable()
            record = records.get(token_id)
            if record is None:
                return None
            if record.active:
                record = replace(record, revoked_at=at)
                records[token_id] = record
                self._save(records)
            return record

    def issued(self) -> bool:
        return self.snapshot().issued

    def mark_issued(self) -> None:
        mark_tokens_issued(self.root)


def parse_token_file(raw: object) -> tuple[dict[str, TokenRecord], str | None]:
    """The records of a token file's JSON, and what is wrong with it (None: nothing). A
    damaged record is left out of the records, and makes the whole file damaged."""
    if not isinstance(raw, dict) or set(raw) != {"version", "tokens"}:
        return {}, 'not a token file (an object with "version" and "tokens")'
    if raw["version"] != FILE_VERSION:
        return {}, f"version {raw['version']!r} is not {FILE_VERSION}"
    items = raw["tokens"]
    if not isinstance(items, list):
        return {}, '"tokens" is not a list'
    records: dict[str, TokenRecord] = {}
    damage = None
    for number, item in enumerate(items, start=1):
        try:
            record = TokenRecord.from_json(item)
        except (ValueError, TypeError) as exc:
            damage = damage or f"token record {number} is damaged ({exc})"
            continue
        if record.id in records:
            damage = damage or f"token {record.id} is in the file twice"
            continue
        records[record.id] = record
    return records, damage
