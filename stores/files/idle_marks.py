"""The dream idle check's marks on files (`stores.dream_state.workload`): `idle.json` in
each agent's directory, sizes and times, never content. The state a mark rests on is the
files every write changes: the journal, the clusters file and the ledger folder (and the
settings), read before the store is, so a write in between makes the mark not hold."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from dreamkeeper.core.dream_payloads import DreamWork
from dreamkeeper.core.models import as_utc
from dreamkeeper.stores.contract.idle_marks import IdleCheck
from dreamkeeper.stores.dream_state.dream_ledger import DIR as LEDGERS
from dreamkeeper.stores.dream_state.workload import conversation_waiting
from dreamkeeper.stores.files.agent_files import AgentFiles, atomic_write_text
from dreamkeeper.stores.files.documents import FileDocuments

MARK = "idle.json"
MAX_MARK_BYTES = 4_096


def state_key(root: Path, settings: str) -> str | None:
    """The state an idle decision rests on; None when the store has no journal yet.
    Taken before the store is read, so a write in between makes the mark not hold."""
    parts: list[object] = [settings]
    for path in (root / "journal.jsonl", root / "consolidation" / "clusters.json", root / LEDGERS):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            if path.name == "journal.jsonl":
                return None
            parts.append(None)
            continue
        parts.append((st.st_size, st.st_mtime_ns, st.st_ino))
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def idle_by_mark(files: AgentFiles, as_of: datetime, settings: str) -> DreamWork | None:
    """The agent's work (none) when its idle mark holds as of `as_of`, else None (always
    for a store that is not on files: the mark stands on the files' state)."""
    root, agent_id = files.root, files.base[-1]
    key = state_key(root, settings)
    if key is None or conversation_waiting(FileDocuments(files)):
        return None
    try:
        with open(root / MARK, "rb") as f:
            raw = json.loads(f.read(MAX_MARK_BYTES))
        if raw["state"] != key:
            return None
        until = raw["until"]
        if until is not None and as_of >= as_utc(datetime.fromisoformat(until)):
            return None
        return DreamWork(agent_id=agent_id, live=int(raw["live"]), held_back=int(raw["heldBack"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # no mark, or not one we wrote: count from the store


class FileIdleMarks:
    """`idle.json` in each agent's directory under a data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir

    def check(self, agent_ids: Sequence[str], as_of: datetime, settings: str) -> list[IdleCheck]:
        found: list[IdleCheck] = []
        for agent in agent_ids:
            files = AgentFiles(self.data_dir, agent)
            held = idle_by_mark(files, as_of, settings)
            found.append((None, held) if held else (state_key(files.root, settings), None))
        return found

    def mark(self, agent_id: str, state: str, until: datetime | None, work: DreamWork) -> None:
        mark_idle(AgentFiles(self.data_dir, agent_id).root, state, until, work)


def mark_idle(root: Path, state: str, until: datetime | None, work: DreamWork) -> None:
    mark = {
        "state": state,
        "until": until.isoformat() if until else None,
        "live": work.live,
        "heldBack": work.held_back,
    }
    atomic_write_text(root / MARK, json.dumps(mark), within=root)
