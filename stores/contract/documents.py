"""An agent's small documents: the medium of the state a dream cycle keeps between runs
(the undo ledgers, settled clusters, the approval setting, the coverage vocabulary) and
of the conversation log.

A document is named by a path-like name (`dreams/{cycle}.jsonl`): `/`-separated
components, each checked like a file name (`stores.contract.names.check_component`) and none
starting with `.` (a temp file's mark), so a name can never reach outside the agent.

`AgentDocuments` is the medium's contract; `stores.files.documents` keeps each document
as the file of that name under the agent's directory — the files Dreamkeeper always
wrote, so an existing data directory reads the same — and `stores.postgres.documents`
keeps them as rows. Guarantees, on every backend:

- `write` replaces a document whole and atomically: a reader sees the old or the new.
- `append` adds a record (newline-terminated lines) atomically with respect to other
  appends; a torn tail left by a crash mid-append is terminated before the new record,
  so the new lines never glue onto it (readers skip the torn line).
- `rename` moves a document in one step: an append racing with it lands either in the
  moved document or in a fresh one under the old name, never lost, never in both.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, runtime_checkable

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.stores.contract.names import check_component

MAX_NAME_CHARS = 1_024


@runtime_checkable
class AgentDocuments(Protocol):
    """One agent's documents (this module's docstring has the guarantees)."""

    def read(self, name: str, *, max_bytes: int | None = None) -> bytes | None:
        """The document's bytes, None when there is none — with `max_bytes`, at most that
        many plus one, so the caller sees it is larger. OSError when what is stored
        there is not a document (a link, a FIFO, a directory)."""
        ...

    def write(self, name: str, data: bytes) -> None:
        """Replace the document with `data`, atomically and durably."""
        ...

    def append(self, name: str, data: bytes) -> None:
        """Append `data` (whole lines), durably; a torn tail is terminated first."""
        ...

    def names(self, prefix: str) -> list[str]:
        """Names of the documents in `prefix`'s folder that start with `prefix`
        (`dreams/` lists the ledgers, not what is in folders below), sorted."""
        ...

    def delete(self, name: str) -> bool:
        """Remove the document; False when there was none."""
        ...

    def rename(self, name: str, to: str) -> bool:
        """Move `name` to `to` (replacing it) in one step; False when there was none."""
        ...

    def written(self, name: str) -> datetime | None:
        """When the document was last written or appended to; None when there is none."""
        ...

    def location(self, name: str) -> str:
        """Where the document is, for messages (a path, or the database and name)."""
        ...


def check_name(name: str) -> tuple[str, ...]:
    """The components of a document name, each a checked path component; `InvalidInput`
    (`UnsafePath`) for anything else."""
    if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARS:
        raise InvalidInput(f"invalid document name {str(name)[:80]!r}")
    parts = tuple(name.split("/"))
    for part in parts:
        check_component(part)
        if part.startswith("."):
            raise InvalidInput(f"invalid document name {name[:80]!r}: a part starts with '.'")
    return parts


def check_prefix(prefix: str) -> tuple[tuple[str, ...], str]:
    """The folder of `prefix` (checked components) and the start of the names in it."""
    folder, _, start = prefix.rpartition("/")
    return (check_name(folder) if folder else ()), start
