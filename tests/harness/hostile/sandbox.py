"""The sandbox every hostile input runs in, and the judge of each run.

A `Sandbox` is a temp root that watches the whole disk around a store; a `Surface` is
one entry point with its hypothesis strategy. A surface's `run(sandbox, example)` feeds
one generated input and says whether it was refused (True) or accepted (False); it
raises only for what must never happen (an exception the surface should have turned
into a refusal, or a broken invariant). `check` adds the disk checks: nothing outside
`agents/{agent}/` ever changes, and a refused input leaves the agent's directory as it
was.
"""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.validation import MAX_METADATA_KEYS, MAX_TAGS
from dreamkeeper.stores.files.agent_files import AgentFiles
from dreamkeeper.stores.files.documents import FileDocuments
from dreamkeeper.stores.files.memory_store import FileMemoryStore

AGENT = "a1"
OTHER_AGENT = "b2"
T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
SEEDED = {
    "aaaaaaaaaaa1": (
        "Alice Moreau's phone is 555-0100; she leads ACME's Berlin office.",
        "people/colleagues",
    ),
    "aaaaaaaaaaa2": (
        "The user prefers answers in French, short and without emoji.",
        "user-preferences",
    ),
    "aaaaaaaaaaa3": ("Deploy window for project Falcon is Tuesday 14:00 UTC, ticket FAL-42.", None),
}
ARCHIVED = "aaaaaaaaaaa3"
FULL_TAGS = [f"tag{n}" for n in range(MAX_TAGS)]  # an entry already at the store's limit
BAIT = "the bait outside the agent's directory"


# -- the disk ---------------------------------------------------------------------------


def disk_state(root: Path) -> dict[str, tuple]:
    """Everything under root without following a link: files with their bytes, links
    with their targets, directories, FIFOs and the like by kind."""
    state: dict[str, tuple] = {}
    for directory, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            path = os.path.join(directory, name)
            rel = os.path.relpath(path, root)
            st_ = os.lstat(path)
            if stat.S_ISLNK(st_.st_mode):
                state[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st_.st_mode):
                state[rel] = ("dir",)
            elif stat.S_ISREG(st_.st_mode):
                with open(path, "rb") as handle:
                    state[rel] = ("file", handle.read())
            else:
                state[rel] = ("other", stat.S_IFMT(st_.st_mode))
    return state


def changed_paths(before: dict[str, tuple], after: dict[str, tuple]) -> list[str]:
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


class Sandbox:
    """A temp root: `data/` (the data directory) with the agent's store seeded, another
    agent beside it, and `outside/` (a sibling of the data directory) holding bait — a
    valid entry file and a directory — for planted links to point at. Built once into a
    template, then copied for each example."""

    _template: Path | None = None

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = root / "data"
        self.outside = root / "outside"
        self.agent_dir = self.data / "agents" / AGENT
        self.documents = FileDocuments(AgentFiles(self.data, AGENT))
        # The agent directory's state as last observed (set by mark_before and the
        # surfaces that observe a settled refusal), compared against after a call.
        self.before: dict[str, tuple] = {}
        self.after: dict[str, tuple] | None = None

    @classmethod
    def create(cls, root: Path) -> Sandbox:
        if cls._template is None or not cls._template.is_dir():
            template = Path(tempfile.mkdtemp(prefix="dk-fuzz-template-")) / "root"
            cls(template)._build()
            cls._template = template
            atexit.register(shutil.rmtree, template.parent, True)
        shutil.copytree(cls._template, root, symlinks=True, dirs_exist_ok=True)
        sandbox = cls(root)
        sandbox.store = sandbox.fresh_store()
        return sandbox

    def _build(self) -> None:
        root = self.root
        self.outside.mkdir(parents=True)
        (self.outside / "dir").mkdir()
        (self.outside / "secret.txt").write_text(BAIT)
        other = self.data / "agents" / OTHER_AGENT / "memory"
        other.mkdir(parents=True)
        (other / "note.txt").write_text("another agent's file")
        (root / "next-to-data.txt").write_text("the data directory's parent")
        self.store = FileMemoryStore(self.data, AGENT, clock=lambda: T0)
        for entry_id, (content, category) in SEEDED.items():
            self.store.create(
                content,
                category=category,
                entry_id=entry_id,
                tags=FULL_TAGS if entry_id == "aaaaaaaaaaa1" else ["seed"],
                metadata={f"k{n}": "v" for n in range(MAX_METADATA_KEYS - 1)}
                if entry_id == "aaaaaaaaaaa1"
                else None,
                importance=0.5,
                now=T0 - timedelta(days=400),
            )
        self.store.archive(ARCHIVED, "seeded archived", now=T0 - timedelta(days=200))
        bait = self.store.get("aaaaaaaaaaa2")
        assert bait is not None
        (self.outside / "aaaaaaaaaaa9.json").write_text(
            bait.model_copy(update={"id": "aaaaaaaaaaa9", "category": None}).to_json()
        )
        (self.outside / "dir" / "aaaaaaaaaaa8.json").write_text(
            bait.model_copy(update={"id": "aaaaaaaaaaa8", "category": "linked"}).to_json()
        )
        inputs = root / "inputs"  # files the CLI's --file may name
        inputs.mkdir()
        (inputs / "binary").write_bytes(b"\xff\xfe\x00bad")
        (inputs / "big").write_bytes(b"x" * 90_000)
        (inputs / "ok").write_text("Carol's birthday is 1990-04-02.")
        (inputs / "dir").mkdir()

    def fresh_store(self) -> FileMemoryStore:
        return FileMemoryStore(self.data, AGENT, clock=lambda: T0)

    def outside_state(self, agent: str = AGENT) -> dict[str, tuple]:
        inside = os.path.join("data", "agents", agent)
        return {
            k: v
            for k, v in disk_state(self.root).items()
            if k != inside and not k.startswith(inside + os.sep)
        }

    def agent_state(self, agent: str = AGENT) -> dict[str, tuple]:
        path = self.data / "agents" / agent
        return disk_state(path) if path.is_dir() and not path.is_symlink() else {}

    def plant(self, rel: str, kind: str, payload: bytes = b"") -> None:
        """Put something hostile at `rel` under the agent's directory."""
        path = self.agent_dir / rel
        probe = self.agent_dir
        for part in Path(rel).parts[:-1]:  # never plant *through* an earlier planted link
            probe = probe / part
            if probe.is_symlink() or (probe.exists() and not probe.is_dir()):
                return
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.exists() and kind != "directory":
            return  # a directory or FIFO planted before stays
        if kind == "bytes":
            path.write_bytes(payload)
        elif kind == "link-file":
            path.symlink_to(self.outside / "aaaaaaaaaaa9.json")
        elif kind == "link-secret":
            path.symlink_to(self.outside / "secret.txt")
        elif kind == "link-dir":
            if path.is_dir():
                return
            path.symlink_to(self.outside / "dir", target_is_directory=True)
        elif kind == "link-dangling":
            path.symlink_to(self.root / "nowhere" / path.name)
        elif kind == "fifo":
            os.mkfifo(path)
        elif kind == "directory":
            path.mkdir(exist_ok=True)
        else:
            raise AssertionError(kind)


# -- the harness --------------------------------------------------------------------------


class Violation(AssertionError):
    """An invariant broke (not an exception the surface should have refused with)."""


@dataclass
class Outcome:
    refused: bool = False
    error: str | None = None  # an uncaught exception or a broken invariant
    outside_writes: list[str] = field(default_factory=list)
    unintended: list[str] = field(default_factory=list)  # changes after a refusal

    @property
    def ok(self) -> bool:
        return self.error is None and not self.outside_writes and not self.unintended


@dataclass(frozen=True)
class Surface:
    name: str
    strategy: st.SearchStrategy
    run: Callable[[Sandbox, Any], bool]  # the example's type is the strategy's
    needs_disk: bool = True
    # The agent directory a run may write (the CLI may address another valid agent).
    agent_of: Callable[[Any], str] = lambda example: AGENT


def check(surface: Surface, example: object) -> Outcome:
    """Run one example in a fresh sandbox and judge it."""
    if not surface.needs_disk:
        outcome = Outcome()
        try:
            outcome.refused = surface.run(None, example)  # type: ignore[arg-type]
        except Exception as exc:  # noqa: BLE001 - reported, that is the point
            outcome.error = f"{type(exc).__name__}: {str(exc)[:300]}"
        return outcome
    with tempfile.TemporaryDirectory(prefix="dk-fuzz-") as tmp:
        sandbox = Sandbox.create(Path(tmp) / "root")
        agent = surface.agent_of(example)
        outside_before = sandbox.outside_state(agent)
        outcome = Outcome()
        try:
            refused, agent_before = _run(surface, sandbox, example, agent)
            outcome.refused = refused
            if refused and agent_before is not None:
                judged = sandbox.after if sandbox.after is not None else sandbox.agent_state(agent)
                outcome.unintended = changed_paths(agent_before, judged)
        except Exception as exc:  # noqa: BLE001 - reported, that is the point
            outcome.error = f"{type(exc).__name__}: {str(exc)[:300]}"
        outcome.outside_writes = changed_paths(outside_before, sandbox.outside_state(agent))
        return outcome


def _run(surface: Surface, sandbox: Sandbox, example: object, agent: str):
    # Surfaces that plant files take their own "before" (after planting); the others
    # are judged from the moment the input arrives.
    sandbox.before = sandbox.agent_state(agent)
    refused = surface.run(sandbox, example)
    return refused, sandbox.before


def mark_before(sandbox: Sandbox) -> None:
    """Called by a surface once its hostile files are planted: from here on, a refusal
    must change nothing in the agent's directory..."""
    sandbox.before = sandbox.agent_state()


def mark_after(sandbox: Sandbox) -> None:
    """...until here, where the input has been read and judged (writes the surface makes
    afterwards, to prove the store still works, are its own)."""
    sandbox.after = sandbox.agent_state()


def try_write(write: Callable[[], object]) -> None:
    """A write on a hostile tree may be refused — bad input (InvalidInput), or the disk
    in its way (a planted link, FIFO or directory: an OSError such as SymlinkRefused);
    anything else escapes. Reads get no such leeway."""
    try:
        write()
    except (InvalidInput, OSError):
        pass
