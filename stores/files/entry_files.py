"""Where an entry's file lives, and what a file on disk must be to be loaded.

`memory/{category segments...}/{id}.json` (an uncategorized entry at `memory/{id}.json`),
built only from a validated id and category. A file is loaded only if it parses as an
entry and its id and category agree with where it lies: a planted file whose JSON says
`"category": "../../x"`, or whose id is not its name, is skipped and reported — so no
later write can be aimed outside the store through it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.core.validation import (
    validate_category,
    validate_content,
    validate_entry_id,
    validate_metadata,
    validate_tags,
)
from dreamkeeper.stores.files.agent_files import AgentFiles, SymlinkRefused

MEMORY = "memory"
EMBEDDINGS_DIR = ".embeddings"
MAX_ENTRY_FILE_BYTES = 1_048_576  # content is capped far below this; larger is not ours

Parts = tuple[str, ...]


def entry_parts(entry_id: str, category: str | None) -> Parts:
    validate_entry_id(entry_id)
    segments = () if category is None else tuple(category.split("/"))
    validate_category(category)
    return (MEMORY, *segments, f"{entry_id}.json")


@dataclass(frozen=True)
class Loaded:
    entry: MemoryEntry | None
    problem: str | None = None


def load_entry(files: AgentFiles, parts: Parts) -> Loaded:
    """The entry at `parts`, or why it cannot be used (entry None, problem None: absent)."""
    try:
        data = files.read(parts, MAX_ENTRY_FILE_BYTES)
    except FileNotFoundError:
        return Loaded(None)
    except SymlinkRefused:
        return Loaded(None, "a symlink: refused")
    except OSError as exc:
        return Loaded(None, f"{type(exc).__name__}: {exc.strerror or exc}")
    if len(data) > MAX_ENTRY_FILE_BYTES:
        return Loaded(None, f"more than {MAX_ENTRY_FILE_BYTES} bytes: larger than any entry can be")
    try:
        # pydantic's parser bounds nesting itself (without recursing in Python).
        entry = MemoryEntry.from_json(data)
    except (ValidationError, ValueError, RecursionError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return Loaded(None, f"not a memory entry ({first[:200]})")
    try:
        expected = entry_parts(entry.id, entry.category)
    except InvalidInput as exc:
        return Loaded(None, f"its id or category is invalid ({exc})")
    try:
        # What the store would refuse to write, it does not load: every loaded entry can
        # be reinforced, merged or archived without a write failing half-way.
        validate_content(entry.content)
        validate_tags(entry.tags)
        validate_metadata(entry.metadata)
    except InvalidInput as exc:
        return Loaded(None, f"it breaks the store's limits ({str(exc)[:200]})")
    if expected != tuple(parts):
        return Loaded(
            None,
            f"its id {entry.id!r} and category {entry.category!r} say it "
            f"belongs at {'/'.join(expected)}",
        )
    return Loaded(entry)


def scan(files: AgentFiles) -> Iterator[tuple[Parts, bool]]:
    """Every `*.json` under memory/ as (parts, is_symlink), not descending into hidden or
    symlinked directories (a symlinked directory is reported as one symlink)."""
    root = files.path(MEMORY)
    if not root.is_dir() or root.is_symlink():
        return
    for dirpath, dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root).parts
        kept = []
        for name in sorted(dirnames):
            if name.startswith("."):
                continue
            if os.path.islink(os.path.join(dirpath, name)):
                yield (MEMORY, *rel, name), True
                continue
            kept.append(name)
        dirnames[:] = kept
        for name in filenames:
            if name.endswith(".json") and not name.startswith("."):
                yield (MEMORY, *rel, name), os.path.islink(os.path.join(dirpath, name))
