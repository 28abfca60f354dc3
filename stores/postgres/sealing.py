"""Memory content sealed at rest on PostgreSQL (docs/storage.md, erasure on PostgreSQL).

With a payload key configured, every value that can carry memory content — an entry's
document, a vector, the index snapshot, a document row, a working-memory entry and its
vector, a conversation turn — is stored sealed with its agent's data key
(`stores.postgres.agent_keys`): AES-256-GCM, a random 96-bit nonce per value, and the
value's purpose, the agent and the key id as associated data (a value moved to another
agent, table or key fails authentication). What SQL must compare without opening a value
(a working-memory key and its namespace) is stored as a keyed tag: HMAC-SHA256 under a
key derived from the data key, 128 bits. So once the agent's keys are destroyed, and the
key-encryption key that wrapped them is rotated out (`stores.postgres.keyring`), nothing
the database keeps of the agent — dead tuples, WAL, backups — can be read.

`Sealing` is the process's sealer for one database: data keys are cached once opened (a
key destroyed elsewhere fails the next write that names it: the foreign key from every
sealed row to its key), never their wrapped form, and for at most `KEY_CACHE_SECONDS`: a
key another process destroyed does not outlive that in this one's memory (the process
that destroys one drops it at once, `drop`). Without a payload key nothing is
sealed; a process without one refuses a database that seals (`SealedWithoutKey`): it could
read nothing there, and would write content in plaintext.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
from collections import OrderedDict
from pathlib import Path
from time import monotonic
from typing import Any

from cryptography.exceptions import InvalidTag

from dreamkeeper.client.agent_keys import NONCE_BYTES, AgentKeyError, DataKey
from dreamkeeper.core.errors import StoreMismatch
from dreamkeeper.core.payload_keys import find_payload_keys
from dreamkeeper.core.settings import load_settings
from dreamkeeper.stores.postgres.agent_keys import PostgresAgentKeyStore
from dreamkeeper.stores.postgres.database import Database
from dreamkeeper.stores.postgres.keyring import keyring_dir

FORMAT = b"\x01"  # the sealed value's first byte: its layout (nonce, then ciphertext+tag)
TAG_BYTES = 16
MAX_CACHED_KEYS = 65_536
KEY_CACHE_SECONDS = 300.0

# What each sealed value is, bound in as associated data.
MEMORY = "memory"
VECTOR = "vector"
SNAPSHOT = "snapshot"
DOCUMENT = "document"
WORKING = "working"
WORKING_VECTOR = "working-vector"
TURN = "turn"


class SealedWithoutKey(StoreMismatch):
    """The database seals memory content and this process has no payload key."""


class SealBroken(ValueError):
    """A sealed value that does not open: altered, or moved from another row."""


class Sealing:
    """Seals and opens one database's content with its agents' data keys."""

    def __init__(self, keys: PostgresAgentKeyStore) -> None:
        self.keys = keys
        self.db = keys.db
        # (agent, key id) -> (when opened, the key), oldest first
        self._opened: OrderedDict[tuple[str, str], tuple[float, DataKey]] = OrderedDict()
        self._current: dict[str, str] = {}
        self._guard = threading.Lock()

    # -- keys ------------------------------------------------------------------------------

    def current(self, agent_id: str) -> DataKey:
        """The agent's current data key (made on first use), as this process last saw
        it: a write sealed with one a forget has since retired fails on the row's foreign
        key, and the writer asks again after `forget_current`."""
        with self._guard:
            key_id = self._current.get(agent_id)
        if key_id is not None:
            try:
                return self.key(agent_id, key_id)
            except AgentKeyError:
                self.forget_current(agent_id)  # destroyed since: the current one is another
        key = self.keys.current(agent_id)
        self._remember(agent_id, key)
        with self._guard:
            if len(self._current) >= MAX_CACHED_KEYS:
                self._current.clear()
            self._current[agent_id] = key.key_id
        return key

    def forget_current(self, agent_id: str) -> None:
        with self._guard:
            self._current.pop(agent_id, None)

    def drop(self, agent_id: str, key_ids: list[str] | None = None) -> None:
        """Let go of the agent's keys `key_ids` (None: all of them), destroyed now."""
        with self._guard:
            for held in [k for k in self._opened if k[0] == agent_id]:
                if key_ids is None or held[1] in key_ids:
                    del self._opened[held]
            self._current.pop(agent_id, None)

    def key(self, agent_id: str, key_id: str) -> DataKey:
        """The data key `key_id` of the agent (opened at most once per
        `KEY_CACHE_SECONDS` in this process)."""
        now = monotonic()
        with self._guard:
            while self._opened:
                oldest = next(iter(self._opened.values()))
                if now - oldest[0] < KEY_CACHE_SECONDS:
                    break
                self._opened.popitem(last=False)
            found = self._opened.get((agent_id, key_id))
        if found is not None:
            return found[1]
        key = self.keys.find(agent_id, key_id)
        self._remember(agent_id, key)
        return key

    def _remember(self, agent_id: str, key: DataKey) -> None:
        with self._guard:
            self._opened[(agent_id, key.key_id)] = (monotonic(), key)
            while len(self._opened) > MAX_CACHED_KEYS:
                self._opened.popitem(last=False)

    # -- values ----------------------------------------------------------------------------

    def seal(self, agent_id: str, key: DataKey, purpose: str, plain: bytes) -> bytes:
        """`plain` sealed with `key`; empty stays empty (it carries nothing, and readers
        that only ask whether a value is empty keep working)."""
        if not plain:
            return b""
        nonce = os.urandom(NONCE_BYTES)
        sealed = key.cipher.encrypt(nonce, bytes(plain), _aad(purpose, agent_id, key.key_id))
        return FORMAT + nonce + sealed

    def open(
        self, agent_id: str, key_id: str, purpose: str, sealed: bytes | bytearray | memoryview
    ) -> bytes:
        """The plaintext of a value sealed with the agent's key `key_id`; `SealBroken`
        when it does not open."""
        data = bytes(sealed)
        if not data:
            return b""
        if data[:1] != FORMAT or len(data) < 1 + NONCE_BYTES + TAG_BYTES:
            raise SealBroken(f"a sealed {purpose} value of agent {agent_id} is not sealed")
        key = self.key(agent_id, key_id)
        try:
            return key.cipher.decrypt(
                data[1 : 1 + NONCE_BYTES],
                data[1 + NONCE_BYTES :],
                _aad(purpose, agent_id, key_id),
            )
        except InvalidTag:
            raise SealBroken(
                f"a sealed {purpose} value of agent {agent_id} failed authentication: altered, "
                "or moved from another row"
            ) from None

    def tag(self, key: DataKey, text: str) -> str:
        """A keyed tag of `text` for SQL to compare (32 hex characters), under a key
        derived from the data key."""
        tag_key = hmac.new(key.secret, b"dreamkeeper at-rest tag", hashlib.sha256).digest()
        return hmac.new(tag_key, text.encode("utf-8"), hashlib.sha256).hexdigest()[:32]


def _aad(purpose: str, agent_id: str, key_id: str) -> bytes:
    return f"dreamkeeper at rest\0{purpose}\0{agent_id}\0{key_id}".encode()


def without_key(db: Database, looked_in: str) -> SealedWithoutKey:
    return SealedWithoutKey(
        f"the database at {db.location} keeps memory content sealed with the agents' data "
        f"keys, and this process has no payload key ({looked_in}): give it the same "
        "payload key (and keyring, DREAMKEEPER_KEYRING) as the other processes on the "
        "database"
    )


_sealings: dict[tuple[int, str, tuple[str, ...]], Sealing] = {}
_sealings_guard = threading.Lock()
_sealed_urls: set[str] = set()


def sealing_for(db: Database, data_dir: Path | None, env: Any = None) -> Sealing | None:
    """The sealer of a process on `db`, from the payload keys it is configured with (the
    codec's, `core.payload_keys`) and its keyring (`DREAMKEEPER_KEYRING` or
    `{data}/keyring`); None without a payload key, which a database that seals refuses
    (`SealedWithoutKey`)."""
    codec = load_settings(env).codec
    found = find_payload_keys(codec.payload_key, codec.payload_key_file, data_dir)
    if not found.keys:
        if _seals(db):
            raise without_key(db, found.looked_in)
        return None
    directory = keyring_dir(data_dir, env)
    marker = (id(db), os.path.abspath(directory), tuple(k for k, _ in found.keys))
    with _sealings_guard:
        sealing = _sealings.get(marker)
        if sealing is None or sealing.db is not db:
            keys = PostgresAgentKeyStore(db, list(found.keys), directory)
            sealing = _sealings[marker] = Sealing(keys)
        return sealing


def _seals(db: Database) -> bool:
    """Whether the database seals content: it lists a key-encryption key, made by the
    first process with a payload key that sealed anything there (once it does, it always
    will: remembered)."""
    if db.url in _sealed_urls:
        return True
    if db.fetch("SELECT 1 FROM dreamkeeper_keks LIMIT 1"):
        _sealed_urls.add(db.url)
        return True
    return False
