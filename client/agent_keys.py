"""Per-agent payload data keys: crypto-shredding of Temporal histories (docs/design.md,
invariant 22).

Temporal keeps a workflow's payloads until the namespace's retention, out of our reach.
So each agent's payloads are sealed with a data key of its own (AES-256-GCM), and that
key is kept only wrapped by the configured payload key (`client.codec`). Forgetting
destroys the agent's data key: every payload it sealed, in every history, can no longer
be decoded by anyone, with any key the system still has. The next payload of the agent
gets a new key.

The store is a tiny interface (`AgentKeyStore`); the file implementation keeps
`{data}/agent-keys/{agent}.json` (the key id, the id of the payload key that wrapped it,
the wrapped key) and `{data}/agent-keys/destroyed.jsonl` (ids of destroyed keys and when:
no agent id, no key material), so a decoder can say "erased" rather than "unknown key".
With a database configured the keys are rows instead (`stores.postgres.agent_keys`),
wrapped by a key-encryption key of a keyring kept outside the database
(`stores.postgres.keyring`, rotated by every forget that destroys a key), so every worker
and client on the database seals and opens with the same key — its memory content at
rest too — and one `forget` destroys it for all of them. The client layer
cannot load the stores: a caller that can passes the store's factory in
(`PayloadKeys.key_store`).
Rotation of the payload key keeps working: a data key records which payload key wrapped
it, and any configured key (the sealing one or a decode-only one) unwraps it.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol, TypeAlias

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from dreamkeeper.core.validation import validate_agent_id

DIR = "agent-keys"
DESTROYED = "destroyed.jsonl"
KEY_BYTES = 32
NONCE_BYTES = 12
MAX_FILE_BYTES = 65_536


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


class FileAgentKeyStore:
    """Data keys in `{data}/agent-keys/`, wrapped by the payload keys `wrapping` (the
    first wraps new ones; any of them unwraps)."""

    def __init__(self, data_dir: Path | str, wrapping: Wrapping) -> None:
        self._wrapper = KeyWrapper(wrapping)
        self.root = Path(data_dir) / DIR
        self._cache: dict[str, tuple[tuple[int, int], DataKey]] = {}
        self._guard = threading.Lock()
        self._paths: dict[str, Path] = {}

    def _path(self, agent_id: str) -> Path:
        path = self._paths.get(agent_id)
        if path is None:
            path = self.root / f"{validate_agent_id(agent_id)}.json"
            with self._guard:
                if len(self._paths) > 65_536:
                    self._paths.clear()
                self._paths[agent_id] = path
        return path

    def current(self, agent_id: str) -> DataKey:
        path = self._path(agent_id)
        key = self._load(agent_id, path)
        if key is not None:
            return key
        self._create(agent_id, path)
        key = self._load(agent_id, path)
        if key is None:
            raise AgentKeyError(f"the data key of agent {agent_id!r} could not be stored")
        return key

    def find(self, agent_id: str, key_id: str) -> DataKey:
        key = self._load(agent_id, self._path(agent_id))
        if key is not None and key.key_id == key_id:
            return key
        if key_id in self.destroyed():
            raise erased(agent_id, key_id)
        raise AgentKeyError(
            f"data key {key_id!r} of agent {agent_id!r} is not in {self.root}: this "
            "process uses another data directory than the one that sealed the payload"
        )

    def destroy(self, agent_id: str) -> int:
        path = self._path(agent_id)
        with self._guard:
            self._cache.pop(agent_id, None)
        key = self._load(agent_id, path)
        if key is None:
            return 0
        # The id goes on the destroyed list first (durably), then the key: a crash in
        # between leaves the key, and the retry of the forget destroys it.
        line = json.dumps({"keyId": key.key_id, "at": datetime.now(UTC).isoformat()})
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / DESTROYED, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, (line + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        with self._guard:
            self._cache.pop(agent_id, None)
        return 1

    def destroyed(self) -> set[str]:
        return read_destroyed(self.root)

    # -- the files -----------------------------------------------------------------------

    def _load(self, agent_id: str, path: Path) -> DataKey | None:
        """The stored key, re-read when its file changed (another process destroyed or
        made it): a stat per use, so a destroyed key stops working everywhere."""
        try:
            st = os.stat(path)
        except FileNotFoundError:
            with self._guard:
                self._cache.pop(agent_id, None)
            return None
        signature = (st.st_ino, st.st_mtime_ns)
        with self._guard:
            cached = self._cache.get(agent_id)
        if cached is not None and cached[0] == signature:
            return cached[1]
        try:
            stored = read_key_file(path)
        except FileNotFoundError:
            return None
        key = self._wrapper.unwrap(agent_id, stored, f"file {path}")
        with self._guard:
            self._cache[agent_id] = (signature, key)
        return key

    def _create(self, agent_id: str, path: Path) -> None:
        """A new key, published with link(2): of two processes making one at once, the
        first link wins and the other reads it."""
        new = self._wrapper.new(agent_id)
        body = {
            "keyId": new.key_id,
            "wrappedBy": new.wrapped_by,
            "nonce": base64.b64encode(new.nonce).decode(),
            "wrapped": base64.b64encode(new.wrapped).decode(),
        }
        self.root.mkdir(parents=True, exist_ok=True)
        temp = self.root / f".{agent_id}.{os.getpid()}.{new.key_id}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, json.dumps(body).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temp, path)
        except FileExistsError:
            pass
        finally:
            temp.unlink()


def read_destroyed(root: Path) -> set[str]:
    """The destroyed key ids listed in `root` (an `agent-keys` directory)."""
    try:
        data = (root / DESTROYED).read_bytes()
    except OSError:
        return set()
    ids = set()
    for line in data.splitlines():
        try:
            ids.add(str(json.loads(line)["keyId"]))
        except (ValueError, KeyError, TypeError):
            continue
    return ids


def read_key_file(path: Path) -> WrappedKey:
    """The wrapped key an `{agent}.json` holds (`FileNotFoundError` when there is none);
    also how `dreamkeeper migrate` carries file keys into a database, still wrapped."""
    try:
        raw = json.loads(path.read_bytes()[:MAX_FILE_BYTES])
        return WrappedKey(
            str(raw["keyId"]),
            str(raw["wrappedBy"]),
            base64.b64decode(raw["nonce"]),
            base64.b64decode(raw["wrapped"]),
        )
    except FileNotFoundError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise AgentKeyError(f"unreadable data key file {path}: {exc}") from None


def data_key_aad(agent_id: str, key_id: str) -> bytes:
    """What a data key is wrapped with as associated data, by whatever key wraps it: a
    wrapped key moved to another agent (or renamed) fails authentication."""
    return f"dreamkeeper agent data key\0{agent_id}\0{key_id}".encode()
