"""The identity of a data directory's store (`stores.contract.identity.StoreIdentity`).

`{data}/dreamkeeper-store.json` holds a random id, made once by the first worker to use
the directory. Workers claim their task queue with it, clients compare theirs with the
worker's, and store activities check the id a client sent: a client whose `--data`
differs from the worker's, or a second worker with another directory on the same task
queue, fails loudly naming both locations — never a silent split of an agent's memories.

The identity also carries one fact about the store that must outlive its other files:
`tokensIssuedAt`, written before `serve`'s first access token (`stores.tokens`). Damage
to the token file cannot erase it, so a server that issued tokens never opens again by
accident; removing it by hand is the one deliberate way back to an open server.

And, once `dreamkeeper migrate` has copied the directory into a database and verified
the copy, `movedTo`: that database's store id. A worker of that database finding the task
queue claimed by this directory's store reads it (`moved_into`) and takes the queue over:
the same memories moved, not a second store. Any other store is still refused.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
from pathlib import Path

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.models import utc_now
from dreamkeeper.stores import safe_json
from dreamkeeper.stores.contract.identity import StoreIdentity
from dreamkeeper.stores.files.agent_files import atomic_write_text

IDENTITY_FILE = "dreamkeeper-store.json"
TOKENS_ISSUED = "tokensIssuedAt"
MOVED_TO = "movedTo"


def location_of(data_dir: Path) -> str:
    return f"{socket.gethostname()}:{os.path.abspath(data_dir)}"


def _read_raw(data_dir: Path) -> dict[str, object] | None:
    """The identity file's object, checked; None when there is none."""
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
    return raw


def read_identity(data_dir: Path) -> StoreIdentity | None:
    """The directory's identity, or None when no worker has used it yet."""
    raw = _read_raw(data_dir)
    return None if raw is None else StoreIdentity(str(raw["storeId"]), location_of(data_dir))


def tokens_issued(data_dir: Path) -> bool:
    """Whether an access token was ever issued on this store (`mark_tokens_issued`).
    Any value counts, whatever it looks like: only removing the key reopens a server.
    Raises `InvalidInput` when the identity file cannot be read."""
    raw = _read_raw(data_dir)
    return raw is not None and TOKENS_ISSUED in raw


def mark_tokens_issued(data_dir: Path) -> None:
    """Record, before the first token is kept, that this store issues tokens (idempotent;
    makes the identity if the directory has none yet)."""
    ensure_identity(data_dir)
    raw = _read_raw(data_dir)
    if raw is None or TOKENS_ISSUED in raw:
        return
    raw[TOKENS_ISSUED] = utc_now().isoformat()
    atomic_write_text(Path(data_dir) / IDENTITY_FILE, json.dumps(raw, indent=1))


def record_move(data_dir: Path, target: StoreIdentity) -> bool:
    """Record that the directory's store moved into `target` (a verified `migrate`); the
    newest move wins. False when the directory has no identity: no worker ever used it,
    so no task queue names it and there is nothing to hand over."""
    raw = _read_raw(data_dir)
    if raw is None:
        return False
    moved = raw.get(MOVED_TO)
    if isinstance(moved, dict) and moved.get("storeId") == target.store_id:
        return True
    raw[MOVED_TO] = {
        "storeId": target.store_id,
        "location": target.location,
        "at": utc_now().isoformat(),
    }
    atomic_write_text(Path(data_dir) / IDENTITY_FILE, json.dumps(raw, indent=1))
    return True


def moved_into(data_dir: Path, store_id: str) -> str | None:
    """The store id that the store `store_id`, kept in `data_dir`, recorded moving into
    (`record_move`); None when the directory cannot be read here, holds another store,
    or records no move."""
    try:
        raw = _read_raw(data_dir)
    except InvalidInput:
        return None
    if raw is None or raw.get("storeId") != store_id:
        return None
    moved = raw.get(MOVED_TO)
    target = moved.get("storeId") if isinstance(moved, dict) else None
    return target if isinstance(target, str) else None


def directory_of(location: str) -> Path | None:
    """The data directory a file store's location (`host:/absolute/path`, as its workers
    claim a task queue) names, or None for any other location (a database's)."""
    _, colon, path = location.partition(":")
    return Path(path) if colon and os.path.isabs(path) else None


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
