"""Per-agent payload data keys as files (`client.agent_keys`): `{data}/agent-keys/
{agent}.json` holds the key id, the id of the payload key that wrapped it and the wrapped
key; `{data}/agent-keys/destroyed.jsonl` the ids of destroyed keys and when (no agent id,
no key material), so a decoder can say "erased" rather than "unknown key"."""

from __future__ import annotations

import base64
import json
import os
import threading
from datetime import UTC, datetime
from pathlib import Path

from dreamkeeper.client.agent_keys import (
    AgentKeyError,
    DataKey,
    KeyWrapper,
    WrappedKey,
    Wrapping,
    erased,
)
from dreamkeeper.core.validation import validate_agent_id

DIR = "agent-keys"
DESTROYED = "destroyed.jsonl"
MAX_FILE_BYTES = 65_536


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
