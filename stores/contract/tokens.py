"""The access tokens' contract: a `TokenStore` keeps `serve`'s token records (never a
secret) and says when they cannot be trusted. Issuing and verifying are written once
over any store (`stores.tokens`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Protocol

from dreamkeeper.core.errors import Unavailable
from dreamkeeper.policies.access import Access, Grant, validate_patterns

TOKEN_ID = re.compile(r"[0-9a-f]{12}")
TOKEN_NAME = re.compile(r"[^\x00-\x1f\x7f]{1,100}")
_SALT = re.compile(r"[0-9a-f]{32}")
_HASH = re.compile(r"[0-9a-f]{64}")
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
        if not isinstance(token_id, str) or not TOKEN_ID.fullmatch(token_id):
            raise ValueError("id is not 12 lowercase hex characters")
        if not isinstance(name, str) or not TOKEN_NAME.fullmatch(name):
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

    def in_order(self) -> list[TokenRecord]:
        """Every record, oldest first (what `TokenStore.all` answers)."""
        return sorted(self.records.values(), key=lambda r: (r.created_at, r.id))


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
