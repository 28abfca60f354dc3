"""Key-encryption keys (KEKs) of a database's agent data keys (docs/storage.md, erasure on
PostgreSQL).

A data key row in `dreamkeeper_agent_keys` is wrapped by a KEK. KEKs live outside the
database, in one keyring file per store, `{keyring}/kek-{store id}.json`, each wrapped by
the payload key (the first configured one wraps, any unwraps); the database lists their
ids (`dreamkeeper_keks`, one current) and each data key row names its KEK. A destroyed
data key survives in the heap, the WAL and backups wrapped by the KEK current at the
time, so a forget that destroys one then rotates (`Keyring.rotate`): a new KEK, every
surviving data key wrapped by it, the others delisted and erased from the file. Copies the
database keeps are then wrapped by a key that exists nowhere.

Every write of the file (a first KEK, a rotation, a tidy) holds the database's advisory
lock `KEYRING_LOCK`, so processes on several hosts sharing the keyring directory never
write it at once; the file is replaced atomically (temp file, fsync, rename, fsync the
directory) and the replaced file's bytes are overwritten with zeros before it is let go.
Readers take no lock: a process that meets a KEK id it does not hold reads the file again,
and every process reads it again at least every `RELOAD_SECONDS`, so a KEK another
process rotated out does not stay in its memory.

Crash safety (`stores.faults`): the new KEK is in the file before the database lists it
(`KEK_WRITTEN`); a listed KEK is current before any data key is wrapped by it
(`KEK_LISTED`, `KEYS_HALF_REWRAPPED`); an old KEK is delisted only when no data key names
it (a foreign key: then the re-wrap runs again), and leaves the file after
(`KEK_RETIRED`). At every point each data key's KEK is both listed and in the file. A KEK
the database lists as retired (`dreamkeeper_retired_keks`) but the file still holds (a
rotation cut short after delisting it) is erased from the file the next time any process
loads the keyring; one neither listed nor retired wraps nothing here and is left to the
next rotation, which keeps only the new KEK.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from time import monotonic
from typing import Any

import psycopg
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from dreamkeeper.client.agent_keys import NONCE_BYTES, AgentKeyError, Wrapping, data_key_aad
from dreamkeeper.core.errors import StoreMismatch
from dreamkeeper.core.settings import load_settings
from dreamkeeper.stores import faults
from dreamkeeper.stores.postgres.database import Database

KEK_BYTES = 32
RELOAD_SECONDS = 300.0
DEFAULT_DIR = "keyring"  # under the data directory, unless DREAMKEEPER_KEYRING says where
FORMAT = 1
MAX_FILE_BYTES = 1_048_576
REWRAP_CHUNK = 1_000
RETIRE_ATTEMPTS = 5
# pg_advisory_lock key of every keyring write ("dkkeyrin"): a constant no other lock of
# Dreamkeeper's uses.
KEYRING_LOCK = 0x646B_6B65_7972_696E

log = logging.getLogger(__name__)


class KeyringMismatch(StoreMismatch, AgentKeyError):
    """The keyring here is not the one the database's data keys are wrapped under."""


def keyring_dir(data_dir: Path | None, env: Any = None) -> Path:
    """Where the keyring of a process lives: `DREAMKEEPER_KEYRING`, else
    `{data}/keyring`."""
    configured = load_settings(env).codec.keyring
    if configured is not None:
        return Path(configured).expanduser()
    if data_dir is None:
        data_dir = load_settings(env).store.data_dir
    return Path(data_dir) / DEFAULT_DIR


def _kek_aad(store_id: str, kek_id: str) -> bytes:
    return f"dreamkeeper key-encryption key\0{store_id}\0{kek_id}".encode()


@dataclass
class Rotation:
    """What a rotation did (for the receipt of the forget that asked for it)."""

    path: Path
    new: str
    retired: list[str] = field(default_factory=list)
    rewrapped: int = 0


class Keyring:
    """The KEKs of one database's store, from the keyring file in `directory`, opened
    with the payload keys `wrapping`. One per process and database (`keyring_for`)."""

    def __init__(self, db: Database, directory: Path, wrapping: Wrapping) -> None:
        if not wrapping:
            raise ValueError("a keyring needs a payload key to wrap its keys with")
        self.db = db
        self.directory = Path(directory)
        self._wrap_id = wrapping[0][0]
        self._payload = {key_id: AESGCM(secret) for key_id, secret in wrapping}
        self._keks: dict[str, AESGCM] = {}
        self._loaded_at = float("-inf")
        self._guard = threading.Lock()
        self._store_id: str | None = None
        # The connection holding KEYRING_LOCK, per thread, while it is held: a session
        # lock is re-entrant only on its own connection, so a load inside a locked
        # section tidies on that one rather than wait on itself from another.
        self._holding = threading.local()

    # -- where ---------------------------------------------------------------------------

    @property
    def store_id(self) -> str:
        if self._store_id is None:
            rows = self.db.fetch("SELECT store_id FROM dreamkeeper_store")
            if not rows:
                raise AgentKeyError(f"the database at {self.db.location} has no store identity")
            self._store_id = str(rows[0][0])
        return self._store_id

    @property
    def path(self) -> Path:
        return self.directory / f"kek-{self.store_id}.json"

    # -- reading -------------------------------------------------------------------------

    def kek(self, kek_id: str) -> AESGCM:
        """The KEK `kek_id`, read again from the file when this process does not hold it
        (another process rotated); `KeyringMismatch` when the file does not have it."""
        with self._guard:
            found = self._keks.get(kek_id)
            fresh = monotonic() - self._loaded_at < RELOAD_SECONDS
        if found is not None and fresh:
            return found
        self._load()
        with self._guard:
            found = self._keks.get(kek_id)
        if found is None:
            raise KeyringMismatch(
                f"key-encryption key {kek_id!r} of the database at {self.db.location} is not "
                f"in the keyring {self.path}: every process on one database must share its "
                "keyring directory (DREAMKEEPER_KEYRING, a shared volume) and payload key"
            )
        return found

    def check(self) -> None:
        """Refuse now (`KeyringMismatch`, naming the keyring and the database) unless this
        keyring opens the KEK the database lists as current: a process started with
        another keyring fails at start, not at its first sealed read."""
        rows = self.db.fetch("SELECT kek_id FROM dreamkeeper_keks WHERE current")
        if rows:
            self.kek(str(rows[0][0]))

    def current(self) -> tuple[str, AESGCM]:
        """The KEK the database lists as current; the first one is made now (under the
        keyring lock) when it lists none."""
        rows = self.db.fetch("SELECT kek_id FROM dreamkeeper_keks WHERE current")
        if rows:
            kek_id = str(rows[0][0])
            return kek_id, self.kek(kek_id)
        with self._locked() as conn:
            row = conn.execute("SELECT kek_id FROM dreamkeeper_keks WHERE current").fetchone()
            if row is not None:
                return str(row[0]), self.kek(str(row[0]))
            entries = self._tidy(conn)
            kek_id, entry, cipher = self._make()
            self._write({**entries, kek_id: entry})
            with conn.transaction():
                conn.execute(
                    "INSERT INTO dreamkeeper_keks (kek_id, current) VALUES (%s, true)", (kek_id,)
                )
            with self._guard:
                self._keks[kek_id] = cipher
            return kek_id, cipher

    def _load(self) -> None:
        """Read the file into memory (keys gone from it are dropped here too); erase from
        the file, under the lock, keys the database lists as retired."""
        entries = self._read_entries()
        retired = {
            str(r[0])
            for r in self.db.fetch(
                "SELECT kek_id FROM dreamkeeper_retired_keks WHERE kek_id = ANY(%s)",
                (list(entries),),
            )
        }
        if retired:
            held = getattr(self._holding, "conn", None)
            if held is not None:
                entries = self._tidy(held)
            else:
                with self._locked() as conn:
                    entries = self._tidy(conn)
        opened = {kek_id: self._open(kek_id, entry) for kek_id, entry in entries.items()}
        with self._guard:
            self._keks = opened
            self._loaded_at = monotonic()

    def _read_entries(self) -> dict[str, dict[str, str]]:
        """The file's entries by KEK id ({} when there is no file). A reader that opened
        the file a writer is replacing may read the zeros it is wiped with: read again."""
        for attempt in range(3):
            try:
                with open(self.path, "rb") as handle:
                    raw = handle.read(MAX_FILE_BYTES + 1)
            except FileNotFoundError:
                return {}
            except OSError as exc:
                raise KeyringMismatch(f"cannot read the keyring {self.path}: {exc}") from None
            try:
                body = json.loads(raw)
                if len(raw) > MAX_FILE_BYTES or body.get("format") != FORMAT:
                    raise ValueError("not a keyring of this format")
                if body.get("store") != self.store_id:
                    raise KeyringMismatch(
                        f"the keyring {self.path} belongs to store {body.get('store')!r}, "
                        f"not to the database at {self.db.location} ({self.store_id})"
                    )
                entries = {str(e["id"]): dict(e) for e in body["keys"]}
                return entries
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                if attempt == 2:
                    raise KeyringMismatch(
                        f"the keyring {self.path} is unreadable ({exc})"
                    ) from None
        raise AssertionError("unreachable")

    def _open(self, kek_id: str, entry: dict[str, str]) -> AESGCM:
        wrapper = self._payload.get(entry.get("wrappedBy", ""))
        if wrapper is None:
            raise KeyringMismatch(
                f"key-encryption key {kek_id!r} in {self.path} is wrapped by payload key "
                f"{entry.get('wrappedBy')!r}, which is not configured: keep it as a "
                "decode-only key after a payload-key rotation"
            )
        try:
            secret = wrapper.decrypt(
                base64.b64decode(entry["nonce"]),
                base64.b64decode(entry["wrapped"]),
                _kek_aad(self.store_id, kek_id),
            )
        except (InvalidTag, ValueError, KeyError):
            raise KeyringMismatch(
                f"key-encryption key {kek_id!r} in {self.path} failed authentication"
            ) from None
        return AESGCM(secret)

    # -- writing (under the keyring lock) --------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[psycopg.Connection]:
        held = getattr(self._holding, "conn", None)
        if held is not None:
            yield held  # re-entrant
            return
        with self.db.dedicated() as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", (KEYRING_LOCK,))
            self._holding.conn = conn
            try:
                yield conn
            finally:
                self._holding.conn = None
                if not conn.closed and not conn.broken:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (KEYRING_LOCK,))

    def _tidy(self, conn: psycopg.Connection) -> dict[str, dict[str, str]]:
        """The file's entries, less any the database lists as retired (written back when
        some were dropped): a rotation delisted them and was cut short before it erased
        them from the file. They wrap no data key (the foreign key)."""
        entries = self._read_entries()
        retired = {
            str(r[0])
            for r in conn.execute(
                "SELECT kek_id FROM dreamkeeper_retired_keks WHERE kek_id = ANY(%s)",
                (list(entries),),
            )
        }
        kept = {k: v for k, v in entries.items() if k not in retired}
        if len(kept) < len(entries):
            log.warning(
                "keyring %s: erased %d key-encryption key(s) a rotation retired",
                self.path,
                len(entries) - len(kept),
            )
            self._write(kept)
        return kept

    def _make(self) -> tuple[str, dict[str, str], AESGCM]:
        kek_id = os.urandom(8).hex()
        secret = os.urandom(KEK_BYTES)
        nonce = os.urandom(NONCE_BYTES)
        wrapped = self._payload[self._wrap_id].encrypt(
            nonce, secret, _kek_aad(self.store_id, kek_id)
        )
        entry = {
            "id": kek_id,
            "wrappedBy": self._wrap_id,
            "nonce": base64.b64encode(nonce).decode(),
            "wrapped": base64.b64encode(wrapped).decode(),
            "madeAt": datetime.now(UTC).isoformat(),
        }
        return kek_id, entry, AESGCM(secret)

    def _write(self, entries: dict[str, dict[str, str]]) -> None:
        """Replace the file with `entries`: temp file, fsync, rename, fsync the directory;
        then overwrite the replaced file's bytes with zeros (best effort: a copy-on-write
        or journaling filesystem may keep old blocks; docs/operations.md)."""
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        body = json.dumps(
            {"format": FORMAT, "store": self.store_id, "keys": list(entries.values())},
            separators=(",", ":"),
        ).encode()
        temp = self.directory / f".kek-{self.store_id}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, body)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            old = os.open(self.path, os.O_WRONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            old = None
        try:
            os.replace(temp, self.path)
            directory = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
            if old is not None:
                size = os.fstat(old).st_size
                os.pwrite(old, b"\0" * size, 0)
                os.fsync(old)
        finally:
            if old is not None:
                os.close(old)

    # -- rotation --------------------------------------------------------------------------

    def rotate(self) -> Rotation:
        """A new KEK; every data key wrapped by it; every other KEK delisted and erased
        from the file. Converges from any crash: a second call finishes what the first
        left (it makes yet another KEK and retires all the rest)."""
        with self._locked() as conn:
            entries = self._tidy(conn)
            kek_id, entry, cipher = self._make()
            self._write({**entries, kek_id: entry})
            with self._guard:
                self._keks[kek_id] = cipher
            faults.crash_point(faults.KEK_WRITTEN)
            with conn.transaction():
                conn.execute("UPDATE dreamkeeper_keks SET current = false WHERE current")
                conn.execute(
                    "INSERT INTO dreamkeeper_keks (kek_id, current) VALUES (%s, true)", (kek_id,)
                )
            faults.crash_point(faults.KEK_LISTED)
            rotation = Rotation(self.path, kek_id)
            for attempt in range(RETIRE_ATTEMPTS):
                rotation.rewrapped += self._rewrap(conn, kek_id, cipher)
                try:
                    with conn.transaction():
                        rows = conn.execute(
                            "DELETE FROM dreamkeeper_keks WHERE kek_id <> %s RETURNING kek_id",
                            (kek_id,),
                        ).fetchall()
                        conn.execute(
                            "INSERT INTO dreamkeeper_retired_keks (kek_id) "
                            "SELECT unnest(%s::text[]) ON CONFLICT DO NOTHING",
                            ([str(r[0]) for r in rows],),
                        )
                    rotation.retired += [str(r[0]) for r in rows]
                    break
                except psycopg.errors.ForeignKeyViolation:
                    # A data key made meanwhile under the KEK that was current before.
                    if attempt == RETIRE_ATTEMPTS - 1:
                        raise
            faults.crash_point(faults.KEK_RETIRED)
            self._write({kek_id: entry})
            with self._guard:
                self._keks = {kek_id: cipher}
        return rotation

    def _rewrap(self, conn: psycopg.Connection, kek_id: str, cipher: AESGCM) -> int:
        """Wrap every data key not wrapped by `kek_id` by it, a chunk per transaction."""
        done = 0
        while True:
            rows = conn.execute(
                "SELECT agent_id, key_id, kek_id, wrapped_by, nonce, wrapped "
                "FROM dreamkeeper_agent_keys WHERE kek_id IS DISTINCT FROM %s "
                "ORDER BY agent_id, key_id LIMIT %s",
                (kek_id, REWRAP_CHUNK),
            ).fetchall()
            if not rows:
                return done
            agents, keys, nonces, wrapped = [], [], [], []
            for agent_id, key_id, old_kek, wrapped_by, nonce, data in rows:
                secret = self.unwrap_data_key(
                    str(agent_id), str(key_id), old_kek, str(wrapped_by), bytes(nonce), bytes(data)
                )
                fresh = os.urandom(NONCE_BYTES)
                agents.append(agent_id)
                keys.append(key_id)
                nonces.append(fresh)
                wrapped.append(cipher.encrypt(fresh, secret, data_key_aad(agent_id, key_id)))
            with conn.transaction():
                conn.execute(
                    "UPDATE dreamkeeper_agent_keys k SET kek_id = %s, wrapped_by = %s, "
                    "nonce = n.nonce, wrapped = n.wrapped "
                    "FROM unnest(%s::text[], %s::text[], %s::bytea[], %s::bytea[]) "
                    "AS n(agent_id, key_id, nonce, wrapped) "
                    "WHERE k.agent_id = n.agent_id AND k.key_id = n.key_id",
                    (kek_id, kek_id, agents, keys, nonces, wrapped),
                )
            done += len(rows)
            faults.crash_point(faults.KEYS_HALF_REWRAPPED)

    def unwrap_data_key(
        self,
        agent_id: str,
        key_id: str,
        kek_id: str | None,
        wrapped_by: str,
        nonce: bytes,
        wrapped: bytes,
    ) -> bytes:
        """A data key's secret from its row: wrapped by a KEK (`kek_id`), or, for a key
        made before KEKs (or carried in by `migrate`), by the payload key `wrapped_by`."""
        aad = data_key_aad(agent_id, key_id)
        if kek_id is not None:
            cipher = self.kek(str(kek_id))
        else:
            found = self._payload.get(wrapped_by)
            if found is None:
                raise AgentKeyError(
                    f"the data key of agent {agent_id!r} is wrapped by payload key "
                    f"{wrapped_by!r}, which is not configured: keep it as a decode-only key "
                    "after a rotation"
                )
            cipher = found
        try:
            return cipher.decrypt(nonce, wrapped, aad)
        except InvalidTag:
            raise AgentKeyError(
                f"the data key {key_id!r} of agent {agent_id!r} in {self.db.location} failed "
                "authentication"
            ) from None

    def wrap_data_key(self, agent_id: str, key_id: str, secret: bytes) -> tuple[str, bytes, bytes]:
        """(KEK id, nonce, wrapped) of a new data key, wrapped by the current KEK."""
        kek_id, cipher = self.current()
        nonce = os.urandom(NONCE_BYTES)
        return kek_id, nonce, cipher.encrypt(nonce, secret, data_key_aad(agent_id, key_id))

    def held(self) -> list[str]:
        """The KEK ids in the keyring file now (read again)."""
        return sorted(self._read_entries())


_keyrings: dict[tuple[str, str, tuple[str, ...]], Keyring] = {}
_keyrings_guard = threading.Lock()


def keyring_for(db: Database, directory: Path, wrapping: Wrapping) -> Keyring:
    """The process's one keyring for this database, directory and payload keys (every
    key store and sealer of the process shares what it has read)."""
    marker = (db.url, os.path.abspath(directory), tuple(k for k, _ in wrapping))
    with _keyrings_guard:
        found = _keyrings.get(marker)
        if found is None or found.db is not db:
            found = _keyrings[marker] = Keyring(db, directory, wrapping)
        return found
