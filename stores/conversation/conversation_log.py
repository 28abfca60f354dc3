"""The append-only conversation log read by preference inference: the document
`conversation-log/turns.jsonl` of the agent's documents (`stores.contract.documents`: a file
under the agent's directory, or rows in the database), one JSON object per turn.

A pass rotates the log first (one rename to `conversation-log/processed/`), so turns
written during the pass land in a fresh log and nothing is read twice or lost. Rotated
logs are kept — the last `KEEP_ROTATED` of them — rather than destroyed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.models import as_utc
from dreamkeeper.stores import safe_json
from dreamkeeper.stores.contract.documents import AgentDocuments, check_name
from dreamkeeper.stores.contract.names import check_component

LOG = "conversation-log/turns.jsonl"
PROCESSED = "conversation-log/processed/"
KEEP_ROTATED = 20
MAX_TURN_CHARS = 4_000
MAX_LINE_BYTES = 8 * MAX_TURN_CHARS + 1_024  # escapes included; longer is not ours
MAX_SESSION_ID_CHARS = 1_100  # 8 segments of 128, and slashes
MAX_READ_BYTES = 256 * 1_048_576  # one rotated log; preference inference uses its tail


_NEVER = datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True)
class LoggedTurn:
    session_id: str
    role: str
    content: str
    at: datetime


def rotated_name(reference: str, agent_id: str) -> str:
    """The document name of a rotated log named by `reference`: a name under
    `conversation-log/processed/`, or — from a workflow started before logs were
    documents — the absolute path of that file under this agent's own directory.
    `InvalidInput` for anything else (another agent's log, any other document)."""
    parts = reference.split("/")
    if reference.startswith("/"):
        # {data}/agents/{agent}/conversation-log/processed/{name}
        tail = parts[-5:]
        if len(parts) < 6 or tail[:4] != ["agents", agent_id, "conversation-log", "processed"]:
            raise InvalidInput(f"{reference} is not a rotated log of agent {agent_id}")
        parts = parts[-3:]
    name = "/".join(parts)
    if not name.startswith(PROCESSED) or len(parts) != 3 or not name.endswith(".jsonl"):
        raise InvalidInput(f"{reference} is not a rotated log of agent {agent_id}")
    check_name(name)
    return name


class ConversationLog:
    def __init__(self, documents: AgentDocuments) -> None:
        self.documents = documents

    def append(self, session_id: str, role: str, content: str, at: datetime) -> None:
        line = json.dumps(
            {
                "sessionId": session_id,
                "role": role,
                "content": content[:MAX_TURN_CHARS],
                "at": as_utc(at).isoformat(),
            }
        )
        self.documents.append(LOG, (line + "\n").encode("utf-8"))

    def rotate(self, name: str) -> str | None:
        """Move the live log to `processed/{name}.jsonl` and return that document's
        name; idempotent per name (a retry finds the rotated log). None when there was
        nothing to rotate."""
        target = f"{PROCESSED}{check_component(name)}.jsonl"
        if self.documents.written(target) is not None:
            return target
        try:
            present = bool(self.documents.read(LOG, max_bytes=0))
        except OSError:  # not a log (a link, a FIFO): moved aside all the same, never read
            present = self.documents.written(LOG) is not None
        if not present:
            return None
        if not self.documents.rename(LOG, target):
            return None
        rotated = sorted(
            self.documents.names(PROCESSED),
            key=lambda n: (self.documents.written(n) or _NEVER, n),
        )
        for old in [n for n in rotated if n.endswith(".jsonl")][:-KEEP_ROTATED]:
            self.documents.delete(old)
        return target

    def read(self, name: str = LOG) -> list[LoggedTurn]:
        """Turns in a log; torn or malformed lines (a crash mid-append, garbage, deep
        nesting, oversized) are skipped; a symlink, FIFO or directory in the log's
        place reads as no turns."""
        try:
            data = self.documents.read(name, max_bytes=MAX_READ_BYTES) or b""
        except OSError:  # NotRegularFile, SymlinkRefused
            return []
        return parse_turns(data)

    def scrub(self, mentions: Callable[[str], bool]) -> dict[str, int]:
        """Rewrite the live log and every rotated one without the turns that `mentions`
        the forgotten text (`stores.forget`); per document name, how many went. A turn
        is appended outside any lock: the rewrite reads again until the log did not
        change between its read and its check, so no turn appended meanwhile is lost."""
        removed: dict[str, int] = {}
        for name in [LOG, *[n for n in self.documents.names(PROCESSED) if n.endswith(".jsonl")]]:
            for _ in range(8):
                try:
                    data = self.documents.read(name, max_bytes=MAX_READ_BYTES) or b""
                except OSError:  # not a log: nothing of ours is in it
                    break
                lines = data.splitlines(keepends=True)
                kept = [line for line in lines if not _mentioned(line, mentions)]
                if len(kept) == len(lines):
                    break
                try:
                    again = self.documents.read(name, max_bytes=MAX_READ_BYTES) or b""
                except OSError:
                    break
                if again != data:
                    continue  # appended to meanwhile: read again
                self.documents.write(name, b"".join(kept))
                removed[name] = len(lines) - len(kept)
                break
        return removed


def _mentioned(line: bytes, mentions: Callable[[str], bool]) -> bool:
    if mentions(line.decode("utf-8", "replace")):
        return True
    turns = parse_turns(line)
    return bool(turns) and mentions(turns[0].content)


def parse_turns(data: bytes) -> list[LoggedTurn]:
    """The turns of a log's bytes; a line that is not one (torn, garbage) is skipped."""
    turns = []
    for line in data.splitlines():
        try:
            raw = safe_json.loads(line, max_bytes=MAX_LINE_BYTES, max_depth=1)
            if not isinstance(raw, dict):
                continue
            session, role, content, at = (raw["sessionId"], raw["role"], raw["content"], raw["at"])
            if not all(isinstance(v, str) for v in (session, role, content, at)):
                continue
            if role not in ("user", "assistant") or len(session) > MAX_SESSION_ID_CHARS:
                continue
            turns.append(
                LoggedTurn(
                    session, role, content[:MAX_TURN_CHARS], as_utc(datetime.fromisoformat(at))
                )
            )
        except (ValueError, KeyError):
            continue
    return turns
