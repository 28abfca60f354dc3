"""Conversation memory as files: `conversations/sessions/{session}.json` holds the last
`max_retained` turns; older turns are appended to `conversations/archive/{session}.jsonl`
(the last `max_archived` kept). A session id's `/`-separated segments are nested
directories (`sessions/session/blazor-session.json`). Eviction appends to the archive
before the session file is replaced; a crash between the two can archive a turn twice,
and readers keep one copy per number. The rules are
`stores.conversation.conversation_memory`'s (`ConversationMemory`); this module is its
`ConversationStorage` (`ConversationFiles`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Unpack

from pydantic import BaseModel, ValidationError

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.models import UtcDatetime
from dreamkeeper.core.validation import validate_agent_id
from dreamkeeper.stores import safe_json
from dreamkeeper.stores.contract.conversation import MAX_TURN_CHARS, Turn
from dreamkeeper.stores.conversation import conversation_memory as rules
from dreamkeeper.stores.files.agent_files import (
    AgentFiles,
    append_line,
    atomic_write_text,
    path_lock,
    real_directory,
    unlink_within,
)
from dreamkeeper.stores.files.documents import FileDocuments

ARCHIVE_SLACK = 100  # the archive file is trimmed to MAX_ARCHIVED once it is this far over
# A stored turn is at most ~6 bytes a character (JSON escapes) plus its fields; a session
# file holds at most MAX_RETAINED of them. Anything larger was not written by us.
MAX_TURN_LINE_BYTES = 6 * MAX_TURN_CHARS + 1_024
MAX_SESSION_FILE_BYTES = 64 * 1_048_576
MAX_ARCHIVE_READ_BYTES = 1_024 * 1_048_576


class _SessionFile(BaseModel):
    started_at: UtcDatetime
    last_at: UtcDatetime
    next_n: int = 1
    archived_lines: int = 0
    turns: list[Turn]


@dataclass(frozen=True)
class _ArchiveCache:
    signature: tuple[int, int, int]
    size: int  # bytes parsed (whole lines)
    by_n: dict[int, Turn]
    turns: tuple[Turn, ...]


class FileConversationStore(rules.ConversationMemory):
    """Conversation memory in `conversations/` files (this module's docstring): the
    shared rules over `ConversationFiles`."""

    def __init__(
        self, data_dir: Path | str, agent_id: str, **options: Unpack[rules.ConversationOptions]
    ) -> None:
        storage = ConversationFiles(Path(data_dir), validate_agent_id(agent_id))
        documents = FileDocuments(AgentFiles(data_dir, agent_id))
        super().__init__(agent_id, storage, documents, **options)
        self.agent_root = storage.agent_root
        self.root = storage.root


class ConversationFiles:
    """An agent's sessions as `conversations/` files under one lock file
    (`stores.conversation.conversation_memory.ConversationStorage`), read through caches
    keyed by each file's stat, so a reader sees another process's writes."""

    def __init__(self, data_dir: Path, agent_id: str) -> None:
        self.agent_root = data_dir / "agents" / agent_id
        self.root = self.agent_root / "conversations"
        self._lock = path_lock(self.root / ".lock", within=self.agent_root)
        self._sessions: dict[str, tuple[tuple[int, int, int] | None, _SessionFile | None]] = {}
        self._archives: dict[str, _ArchiveCache] = {}

    def _session_path(self, session_id: str) -> Path:
        return _nested(self.root / "sessions", session_id, ".json")

    def _archive_path(self, session_id: str) -> Path:
        return _nested(self.root / "archive", session_id, ".jsonl")

    # -- reads (cached by file signature: a reader sees another process's writes) -------

    def _reachable(self, path: Path) -> bool:
        """The file's directories are real ones under the agent's (a link planted in
        their place reads as nothing there)."""
        try:
            return real_directory(self.agent_root, path.parent, create=False)
        except OSError:
            return False

    def _session(self, session_id: str) -> _SessionFile | None:
        path = self._session_path(session_id)
        signature = _signature(path) if self._reachable(path) else None
        cached = self._sessions.get(session_id)
        if cached is not None and cached[0] == signature:
            return cached[1]
        state = None
        if signature is not None:
            try:
                data = safe_json.read_regular(path, MAX_SESSION_FILE_BYTES)
                if len(data) > MAX_SESSION_FILE_BYTES:
                    raise ValueError("larger than any session file")
                # pydantic's parser bounds nesting itself (without recursing in Python).
                state = _SessionFile.model_validate_json(data)
            except (OSError, ValueError):  # ValidationError is a ValueError
                state = None  # unreadable: treated as a fresh session (and rewritten)
        self._sessions[session_id] = (signature, state)
        return state

    def _archive(self, session_id: str) -> tuple[Turn, ...]:
        """Archived turns, one per number; after an append only the new bytes are read."""
        path = self._archive_path(session_id)
        signature = _signature(path) if self._reachable(path) else None
        if signature is None:
            self._archives.pop(session_id, None)
            return ()
        cached = self._archives.get(session_id)
        if cached is not None and cached.signature == signature:
            return cached.turns
        if (
            cached is not None
            and cached.signature[2] == signature[2]
            and cached.size <= signature[1]
        ):
            offset, by_n = cached.size, dict(cached.by_n)  # same file, grown: appended lines
        else:
            offset, by_n = 0, {}
        try:
            data = safe_json.read_regular(path, MAX_ARCHIVE_READ_BYTES, offset=offset)
        except OSError:
            data = b""  # a symlink, FIFO or directory where the archive should be
        end = data.rfind(b"\n") + 1  # a line without its newline is still being written
        for line in data[:end].splitlines():
            if len(line) > MAX_TURN_LINE_BYTES:
                continue
            try:
                turn = Turn.model_validate_json(line)
            except ValidationError:
                continue  # a torn line from a crash mid-append
            by_n[turn.n] = turn
        turns = tuple(by_n[n] for n in sorted(by_n))
        self._archives[session_id] = _ArchiveCache(signature, offset + end, by_n, turns)
        return turns

    def read(
        self, session_id: str, retention: rules.Retention, live: rules.LiveRule
    ) -> rules.Turns | None:
        state = self._session(session_id)
        if state is None or not live(state.last_at):
            return None
        first = state.turns[0].n if state.turns else state.next_n
        archived = tuple(t for t in self._archive(session_id) if t.n < first)
        return archived, tuple(state.turns)

    def sessions(self) -> dict[str, datetime | None]:
        found = {}
        for session_id in _stored_ids(self.root / "sessions"):
            state = self._session(session_id)
            found[session_id] = None if state is None else state.last_at
        return found

    # -- writes ------------------------------------------------------------------------

    def append(
        self, session_id: str, retention: rules.Retention, next_turn: rules.NextTurnRule
    ) -> Turn:
        with self._lock.hold():
            state = self._session(session_id)
            step = next_turn(
                None
                if state is None
                else rules.SessionHead(state.started_at, state.last_at, state.next_n)
            )
            if state is None or step.fresh:  # (no session is always a fresh one)
                # Its archive belonged to a conversation that ended.
                unlink_within(self._archive_path(session_id), self.agent_root)
                self._archives.pop(session_id, None)
                earlier, archived_lines = [], 0
            else:
                earlier, archived_lines = state.turns, state.archived_lines
            turns = [*earlier, step.turn]
            evicted, turns = turns[: -retention.retained], turns[-retention.retained :]
            if evicted:
                archived_lines = self._append_archive(
                    session_id, evicted, archived_lines, retention
                )
            new_state = _SessionFile(
                started_at=step.started_at,
                last_at=step.turn.at,
                next_n=step.turn.n + 1,
                archived_lines=archived_lines,
                turns=turns,
            )
            path = self._session_path(session_id)
            atomic_write_text(path, new_state.model_dump_json(), within=self.agent_root)
            self._sessions[session_id] = (_signature(path), new_state)
        return step.turn

    def _append_archive(
        self, session_id: str, evicted: list[Turn], lines: int, retention: rules.Retention
    ) -> int:
        path = self._archive_path(session_id)
        for turn in evicted:
            append_line(path, turn.model_dump_json(), within=self.agent_root)
        lines += len(evicted)
        if retention.archived <= 0:
            unlink_within(path, self.agent_root)
            return 0
        if lines > retention.archived + ARCHIVE_SLACK:
            data = safe_json.read_regular(path, MAX_ARCHIVE_READ_BYTES)
            kept = data.splitlines()[-retention.archived :]
            atomic_write_text(
                path,
                "\n".join(x.decode("utf-8", "replace") for x in kept) + "\n",
                within=self.agent_root,
            )
            lines = len(kept)
        return lines

    def erase_matching(self, mentions: Callable[[str], bool]) -> dict[str, int]:
        """Per file (relative to the agent's directory), how many turns went from the
        session files and their archives."""
        removed: dict[str, int] = {}
        with self._lock.hold():
            for session_id in _stored_ids(self.root / "sessions"):
                state = self._session(session_id)
                if state is None:
                    continue
                kept = [t for t in state.turns if not mentions(t.content)]
                if len(kept) < len(state.turns):
                    path = self._session_path(session_id)
                    new_state = state.model_copy(update={"turns": kept})
                    atomic_write_text(path, new_state.model_dump_json(), within=self.agent_root)
                    self._sessions.pop(session_id, None)
                    removed[self._relative(path)] = len(state.turns) - len(kept)
            for path in sorted((self.root / "archive").rglob("*.jsonl")):
                gone = _rewrite_archive(path, self.agent_root, mentions)
                if gone:
                    removed[self._relative(path)] = gone
            self._archives.clear()
        return removed

    def _relative(self, path: Path) -> str:
        return str(path.relative_to(self.agent_root))

    def clear(self, session_id: str) -> None:
        with self._lock.hold():
            unlink_within(self._session_path(session_id), self.agent_root)
            unlink_within(self._archive_path(session_id), self.agent_root)
            self._sessions.pop(session_id, None)
            self._archives.pop(session_id, None)


def _nested(base: Path, session_id: str, suffix: str) -> Path:
    """`base/seg/…/last{suffix}`, from the validated segments only."""
    *dirs, last = rules.validate_session_id(session_id).split("/")
    return base.joinpath(*dirs, last + suffix)


def _stored_ids(base: Path) -> list[str]:
    """Session ids of the `*.json` files under `base` (symlinks not followed); files
    whose path is not a valid session id — temp files, strays — are skipped."""
    ids = []
    for directory, _, files in os.walk(base):
        relative = Path(directory).relative_to(base).parts
        for name in files:
            if not name.endswith(".json"):
                continue
            candidate = "/".join([*relative, name[: -len(".json")]])
            try:
                ids.append(rules.validate_session_id(candidate))
            except InvalidInput:
                continue
    return sorted(ids)


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _rewrite_archive(path: Path, within: Path, mentions: Callable[[str], bool]) -> int:
    """Rewrite an archive file without the turns that mention the forgotten text
    (`stored_turn_mentions`); how many went."""
    for _ in range(8):
        try:
            data = safe_json.read_regular(path, MAX_ARCHIVE_READ_BYTES)
        except OSError:
            return 0
        lines = data.splitlines(keepends=True)
        kept = [
            line
            for line in lines
            if not rules.stored_turn_mentions(line.decode("utf-8", "replace"), mentions)
        ]
        if len(kept) == len(lines):
            return 0
        sig = _signature(path)
        if sig is not None and sig[1] != len(data):
            continue  # appended to meanwhile: read again
        atomic_write_text(path, b"".join(kept).decode("utf-8", "replace"), within=within)
        return len(lines) - len(kept)
    return 0
