"""Per-agent payload data keys: crypto-shredding of Temporal histories (docs/design.md,
invariant 22).

Temporal keeps a workflow's payloads until the namespace's retention, out of our reach.
So each agent's payloads are sealed with a data key of its own (AES-256-GCM), and that
key is kept only wrapped by the configured payload key (`client.codec`). Forgetting
destroys the agent's data key: every payload it sealed, in every history, can no longer
be decoded by anyone, with any key the system still has. The next payload of the agent
gets a new key.

The store is a tiny interface (`AgentKeyStore`), and each backend keeps it
(`StoreBackend.agent_keys`): files under the data directory (`stores.files.agent_keys`:
the wrapped key per agent, and the ids of destroyed keys, so a decoder can say "erased"
rather than "unknown key"), or rows of the database (`stores.postgres.agent_keys`),
wrapped by a key-encryption key of a keyring kept outside the database
(`stores.postgres.keyring`, rotated by every forget that destroys a key), so every worker
and client on the database seals and opens with the same key — its memory content at
rest too — and one `forget` destroys it for all of them. The client layer cannot load
the stores: a caller that can passes the backend's factory in (`PayloadKeys.key_store`).
What both backends need is here: the key, the wrapping, and the "erased" error.
Rotation of the payload key keeps working: a data key records which payload key wrapped
it, and any configured key (the sealing one or a decode-only one) unwraps it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeAlias

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_BYTES = 32
NONCE_BYTES = 12


class AgentKeyError(RuntimeError):
    """An agent data key that cannot be used here."""


class AgentKeyErased(AgentKeyError):
    """The data key was destroyed by `forget`: what it sealed is gone for good."""


@dataclass(frozen=True)
class DataKey:
    key_id: str
    secret: bytes = field(repr=False)
    cipher: AESGCM = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Made once per key, not per payload: the codec seals thousands a second.
        object.__setattr__(self, "cipher", AESGCM(self.secret))


class AgentKeyStore(Protocol):
    def current(self, agent_id: str) -> DataKey:
        """The agent's data key, made (and stored wrapped) on first use."""
        ...

    def find(self, agent_id: str, key_id: str) -> DataKey:
        """The data key `key_id` of the agent; `AgentKeyErased` when it was destroyed,
        `AgentKeyError` when it is not known here."""
        ...

    def destroy(self, agent_id: str) -> int:
        """Destroy the agent's data key (the next payload gets a new one); how many
        keys were destroyed (0 when the agent had none)."""
        ...


Wrapping: TypeAlias = Sequence[tuple[str, bytes]]


class AgentKeyStoreFactory(Protocol):
    """Makes the agent key store of a process from its payload keys (the first wraps
    new data keys, or the key-encryption keys that wrap them; any of them unwraps) and
    its data directory (where a database's keyring is kept by default)."""

    def __call__(self, wrapping: Wrapping, data_dir: Path | None) -> AgentKeyStore: ...


@dataclass(frozen=True)
class WrappedKey:
    """A data key as stored: never the key in clear."""

    key_id: str
    wrapped_by: str  # the id of the payload key that wrapped it
    nonce: bytes
    wrapped: bytes


class KeyWrapper:
    """Wraps new data keys with the first payload key and unwraps with any configured
    one; the agent id and key id are bound in as associated data, so a wrapped key moved
    to another agent (or renamed) fails authentication instead of opening."""

    def __init__(self, wrapping: Wrapping) -> None:
        if not wrapping:
            raise ValueError("a data key store needs a payload key to wrap with")
        self._wrap_id = wrapping[0][0]
        self._wrappers = {key_id: AESGCM(secret) for key_id, secret in wrapping}

    def new(self, agent_id: str) -> WrappedKey:
        key_id = os.urandom(8).hex()
        secret = os.urandom(KEY_BYTES)
        nonce = os.urandom(NONCE_BYTES)
        wrapped = self._wrappers[self._wrap_id].encrypt(
            nonce, secret, data_key_aad(agent_id, key_id)
        )
        return WrappedKey(key_id, self._wrap_id, nonce, wrapped)

    def unwrap(self, agent_id: str, stored: WrappedKey, where: str) -> DataKey:
        wrapper = self._wrappers.get(stored.wrapped_by)
        if wrapper is None:
            raise AgentKeyError(
                f"the data key of agent {agent_id!r} is wrapped by payload key "
                f"{stored.wrapped_by!r}, which is not configured: keep it as a decode-only "
                "key after a rotation"
            )
        try:
            secret = wrapper.decrypt(
                stored.nonce, stored.wrapped, data_key_aad(agent_id, stored.key_id)
            )
        except InvalidTag:
            raise AgentKeyError(f"the data key {where} failed authentication") from None
        return DataKey(stored.key_id, secret)


def erased(agent_id: str, key_id: str) -> AgentKeyErased:
    return AgentKeyErased(
        f"this payload was sealed with data key {key_id!r} of agent {agent_id!r}, "
        "which was destroyed when the agent's memories were forgotten: it cannot "
        "be decoded by anyone, by design"
    )


def data_key_aad(agent_id: str, key_id: str) -> bytes:
    """What a data key is wrapped with as associated data, by whatever key wraps it: a
    wrapped key moved to another agent (or renamed) fails authentication."""
    return f"dreamkeeper agent data key\0{agent_id}\0{key_id}".encode()
