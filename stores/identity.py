"""Store identity: which data directory a worker or client is talking about.

`{data}/dreamkeeper-store.json` holds a random id, made once by the first worker to use
the directory. Workers claim their task queue with it, clients compare theirs with the
worker's, and store activities check the id a client sent: a client whose `--data`
differs from the worker's, or a second worker with another directory on the same task
queue, fails loudly naming both locations — never a silent split of an agent's memories.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path

from dreamkeeper.core.errors import InvalidInput, StoreMismatch
from dreamkeeper.core.models import utc_now
from dreamkeeper.stores import safe_json
from dreamkeeper.stores.files import atomic_write_text

IDENTITY_FILE = "dreamkeeper-store.json"


@dataclass(frozen=True)
class StoreIdentity:
    store_id: str
    location: str  # host:absolute path, for messages

    def describe(self) -> str:
        return f"store {self.store_id} at {self.location}"


def location_of(data_dir: Path) -> str:
    return f"{socket.gethostname()}:{os.path.abspath(data_dir)}"


def read_identity(data_dir: Path) -> StoreIdentity | None:
    """The directory's identity, or None when no worker has used it yet."""
    try:
        raw = safe_json.load_file(Path(data_dir) / IDENTITY_FILE, max_bytes=65_536, max_depth=2)
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        store_id = raw["storeId"]
        if not isinstance(store_id, str) or not store_id.isalnum() or len(store_id) > 64:
            raise ValueError("storeId is not an id")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InvalidInput(f"{Path(data_dir) / IDENTITY_FILE} is unreadable ({exc})") from None
    return StoreIdentity(store_id, location_of(data_dir))


def ensure_identity(data_dir: Path) -> StoreIdentity:
    """The directory's identity, created if it has none (a worker's first start)."""
    found = read_identity(data_dir)
    if found is not None:
        return found
    identity = StoreIdentity(secrets.token_hex(8), location_of(data_dir))
    atomic_write_text(
        Path(data_dir) / IDENTITY_FILE,
        json.dumps(
            {
                "storeId": identity.store_id,
                "createdAt": utc_now().isoformat(),
                "createdIn": identity.location,
            },
            indent=1,
        ),
    )
    return read_identity(data_dir) or identity


def check_same(expected: StoreIdentity | str | None, actual: StoreIdentity, who: str) -> None:
    """Raise `StoreMismatch` naming both sides unless `expected` is `actual`'s store."""
    if expected is None:
        return
    expected_id = expected if isinstance(expected, str) else expected.store_id
    if expected_id == actual.store_id:
        return
    theirs = expected.describe() if isinstance(expected, StoreIdentity) else f"store {expected_id}"
    raise StoreMismatch(
        f"{who} uses {theirs}, but this worker uses {actual.describe()}: they must share one "
        "data directory (set DREAMKEEPER_DATA / --data to the same place) or database "
        "(DREAMKEEPER_DATABASE_URL)"
    )


def probe_writable(data_dir: Path) -> None:
    """Raise InvalidInput with a plain message if the directory cannot be written."""
    probe = Path(data_dir) / f".write-probe-{os.getpid()}"
    try:
        Path(data_dir).mkdir(parents=True, exist_ok=True)
        atomic_write_text(probe, "probe")
        probe.unlink()
    except OSError as exc:
        raise InvalidInput(
            f"data directory {os.path.abspath(data_dir)} is not writable "
            f"({exc.strerror or exc}): fix its permissions or point DREAMKEEPER_DATA elsewhere"
        ) from None
