"""Hostile input for every surface that reads what it did not write: hypothesis
strategies, a sandbox that watches the whole disk around a store, and one `Surface` per
entry point. Shared by the property tests (`tests/test_hostile_input.py`) and the
fuzzing benchmark (`bench/fuzz.py`).

A surface's `run(sandbox, example)` feeds one generated input and says whether it was
refused (True) or accepted (False); it raises only for what must never happen (an
exception the surface should have turned into a refusal, or a broken invariant). The
harness (`check`) adds the disk checks: nothing outside `agents/{agent}/` ever changes,
and a refused input leaves the agent's directory as it was.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import io
import json
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from dreamkeeper.activities.dream_prompts import (
    parse_consolidation,
    parse_preferences,
    parse_repair,
)
from dreamkeeper.activities.llm import MAX_FACTS_PER_REPLY, MalformedLLMOutput, parse_enrichment
from dreamkeeper.activities.preferences import transcript
from dreamkeeper.activities.save import enrichment_result
from dreamkeeper.core.dream_payloads import ProposedMerge, ProposeResult
from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.core.payloads import FactProposal
from dreamkeeper.core.settings import (
    LLMSettings,
    StoreSettings,
    TemporalSettings,
    embedding_settings,
)
from dreamkeeper.core.validation import (
    validate_agent_id,
    validate_category,
    validate_content,
    validate_metadata,
    validate_tags,
)
from dreamkeeper.policies.consolidation import prune_candidates, review_merge
from dreamkeeper.policies.dedup import Candidate, content_tokens
from dreamkeeper.policies.gating import GateEntry, gate
from dreamkeeper.policies.merge import MergeProposal, merge_category, merged_entry, valid_tags
from dreamkeeper.stores.consolidation_state import ClusterState
from dreamkeeper.stores.conversation_log import ConversationLog
from dreamkeeper.stores.conversation_memory import FileConversationStore
from dreamkeeper.stores.dedup_save import save_fact
from dreamkeeper.stores.entry_files import entry_parts
from dreamkeeper.stores.journal import JournalAction, JournalRecord
from dreamkeeper.stores.memory_store import FileMemoryStore
from dreamkeeper.stores.vocabulary import FILE_NAME as VOCABULARY_FILE
from dreamkeeper.stores.vocabulary import load_vocabulary
from dreamkeeper.stores.working_memory import FileWorkingMemoryStore
from dreamkeeper.worker import cli

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
FULL_TAGS = [f"tag{n}" for n in range(32)]  # an entry already at the store's limit
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


def _diff(before: dict[str, tuple], after: dict[str, tuple]) -> list[str]:
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
                metadata={f"k{n}": "v" for n in range(31)} if entry_id == "aaaaaaaaaaa1" else None,
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
                outcome.unintended = _diff(agent_before, judged)
        except Exception as exc:  # noqa: BLE001 - reported, that is the point
            outcome.error = f"{type(exc).__name__}: {str(exc)[:300]}"
        outcome.outside_writes = _diff(outside_before, sandbox.outside_state(agent))
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


# -- text ---------------------------------------------------------------------------------

ANY_CHAR = st.characters(codec=None, exclude_categories=())  # surrogates and controls too
hostile_text = st.one_of(
    st.text(ANY_CHAR, max_size=40),
    st.sampled_from(
        [
            "",
            " ",
            "\t\n",
            "\x00",
            "a\x00b",
            "\ud800",
            "x\udcff",
            "../../outside",
            "/etc/passwd",
            "a/../b",
            ".",
            "..",
            "a//b",
            "a/",
            "-",
            "C:\\x",
            "%2e%2e/",
            "\u202e",
            "😀" * 3,
            "nan",
            "inf",
            "-0",
            "1e309",
            "²",
            "٣",
            "9" * 5_000,
            "Ⅻ",
            "0x10",
            " 12 ",
        ]
    ),
    st.integers(1, 5).map(lambda n: "x" * (20_000 + n)),
    st.integers(1, 300).map(lambda n: " " * (n * 1_000) + "x"),
)
number_text = st.one_of(
    st.sampled_from(
        [
            "nan",
            "inf",
            "-inf",
            "1e309",
            "-1",
            "2",
            "0.5",
            "1",
            "0",
            "abc",
            "",
            "99999999999",
            "-99999999999",
            "0x1",
            "1_0",
            "²",
            "9" * 5_000,
        ]
    ),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(10**15), 10**15).map(str),
)
entry_ids = st.one_of(
    st.sampled_from(
        [*SEEDED, "aaaaaaaaaaa7", "AAAAAAAAAAA1", "zzz", "../aaaaaaaaa1", "aaaaaaaaaaa1/", ""]
    ),
    hostile_text,
)
categories = st.one_of(
    st.sampled_from(
        [
            "people/colleagues",
            "notes",
            "linked",
            "a/b/c",
            "user-preferences",
            "../../outside",
            "/abs",
            "a/../b",
            "a//b",
            "x" * 201,
            "a" * 200,
        ]
    ),
    hostile_text,
)
tags_lists = st.one_of(
    st.lists(
        st.one_of(st.sampled_from(["t", "seed", "tag1", " spaced "]), hostile_text), max_size=5
    ),
    st.integers(30, 40).map(lambda n: [f"x{i}" for i in range(n)]),
    st.just(["y" * 65]),
)
times = st.one_of(
    st.sampled_from(
        [
            "2026-01-01T00:00:00Z",
            "2026-01-01",
            "0001-01-01T00:00:00+05:00",
            "9999-12-31T23:59:59-05:00",
            "0001-01-01T00:00:00",
            "9999-12-31",
            "2026-13-40",
            "yesterday",
            "",
            "2026-01-01T00:00:00+25:00",
        ]
    ),
    st.datetimes(timezones=st.sampled_from([UTC, None])).map(lambda d: d.isoformat()),
)


def deep(n: int, kind: str = "[") -> str:
    return ("[" * n + "]" * n) if kind == "[" else ('{"a":' * n + "1" + "}" * n)


garbage = st.one_of(
    st.binary(max_size=200),
    st.integers(33, 200_000).map(deep),
    st.integers(33, 50_000).map(lambda n: deep(n, "{")),
    st.sampled_from(
        [
            "",
            "null",
            "NaN",
            "[NaN]",
            '{"a": Infinity}',
            "[1e999]",
            "{",
            "[" * 10,
            '"\\ud800"',
            "\ufeff[]",
            "[" + "1," * 10 + "]",
            "9" * 5_000,
        ]
    ),
)


def _jsonable(value: object) -> str:
    return json.dumps(value, allow_nan=True)


json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**30), 10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    hostile_text,
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(hostile_text, inner, max_size=4)
    ),
    max_leaves=12,
)


def maybe(value_strategy: st.SearchStrategy, default: object) -> st.SearchStrategy:
    """A sensible value (`default`: a value or a strategy of them) or a hostile one.
    Hypothesis avoids repeating an example, so the sensible side varies too."""
    sane = default if isinstance(default, st.SearchStrategy) else st.just(default)
    # (one_of drops repeated branches: the weight comes from a draw instead)
    return st.integers(0, 7).flatmap(lambda n: value_strategy if n == 7 else sane)


sane_text = st.text(
    st.characters(categories=["L", "N", "Zs", "P"]), min_size=1, max_size=60
).filter(str.strip)
sane_category = st.sampled_from(
    ["people/colleagues", "notes", "user-preferences", "a/b/c", "projects/falcon", "linked"]
)
sane_tags = st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,15}", fullmatch=True), max_size=4)
sane_importance = st.floats(0, 1)
sane_time = st.datetimes(
    min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1), timezones=st.just(UTC)
).map(datetime.isoformat)


# -- surface: the CLI ---------------------------------------------------------------------

_valid_agents = st.sampled_from([AGENT, AGENT, OTHER_AGENT])
cli_agents = st.integers(0, 3).flatmap(lambda n: hostile_text if n == 3 else _valid_agents)


def _opt(flag: str, values: st.SearchStrategy) -> st.SearchStrategy:
    return st.integers(0, 3).flatmap(
        lambda n: values.map(lambda v: [flag, v]) if n == 3 else st.just([])
    )


def _argv(*parts: st.SearchStrategy) -> st.SearchStrategy:
    return st.tuples(*parts).map(lambda ps: [x for p in ps for x in p])


cli_commands = st.one_of(
    _argv(
        st.just(["save"]),
        maybe(hostile_text, sane_text).map(lambda c: [c]),
        _opt("--category", st.one_of(sane_category, categories)),
        st.lists(tags_lists.map(lambda t: t[:3]), max_size=1).map(
            lambda ts: [x for t in ts for tag in t for x in ("--tag", tag)]
        ),
        _opt("--importance", number_text),
        _opt("--entry-id", entry_ids),
        _opt(
            "--source",
            st.one_of(st.sampled_from(["user", "tool:x", "inferred", "bogus"]), hostile_text),
        ),
        _opt("--idempotency-key", hostile_text),
        st.just(["--direct"]),
    ),
    _argv(
        st.just(["save", "--direct", "--file"]),
        st.sampled_from(["@missing", "@dir", "@binary", "@big", "@ok"]).map(lambda f: [f]),
    ),
    _argv(st.just(["save", "--direct", "-"]), st.just([])),
    _argv(
        st.just(["search"]),
        st.one_of(st.just([]), hostile_text.map(lambda q: [q])),
        _opt("--category", categories),
        _opt("--tag", hostile_text),
        _opt("--created-after", times),
        _opt("--created-before", times),
        _opt("--limit", number_text),
        st.sampled_from([[], ["--json"], ["--include-archived"]]),
    ),
    _argv(st.sampled_from([["show"], ["show", "--json"]]), entry_ids.map(lambda i: [i])),
    _argv(
        st.sampled_from(
            [["delete", "--direct"], ["restore", "--direct"], ["restore", "--direct", "--force"]]
        ),
        entry_ids.map(lambda i: [i]),
    ),
    _argv(st.just(["purge"]), _opt("--retention-days", number_text)),
    st.sampled_from(
        [
            ["tags"],
            ["tags", "--json"],
            ["archived"],
            ["archived", "--json"],
            ["stats"],
            ["--help"],
            ["save", "--help"],
            ["frobnicate"],
            [],
            ["search", "--limit"],
            ["show"],
            ["save", "--direct", "a", "--file", "b"],
        ]
    ),
)
cli_examples = st.tuples(cli_agents, cli_commands, st.binary(max_size=64))


def _cli_files(sandbox: Sandbox) -> dict[str, str]:
    files = sandbox.root / "inputs"
    return {f"@{name}": str(files / name) for name in ("missing", "dir", "binary", "big", "ok")}


def run_cli(sandbox: Sandbox, example) -> bool:
    agent, argv, stdin = example
    paths = _cli_files(sandbox)
    sandbox.before = sandbox.agent_state(_agent_dir_of(agent))
    argv = [paths.get(a, a) for a in argv]
    full = ["--data", str(sandbox.data), "--agent", agent, *argv]
    out, err = io.StringIO(), io.StringIO()
    fake_stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    saved_stdin = sys.stdin
    try:
        sys.stdin = fake_stdin
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(full)
    finally:
        sys.stdin = saved_stdin
    if code not in (0, 2):
        raise Violation(f"exit {code}: {err.getvalue().strip()[:300]}")
    if code == 2 and err.getvalue().count("\n") > 1:
        raise Violation(f"refusal is not one line: {err.getvalue()[:300]!r}")
    return code == 2


def _agent_dir_of(agent: str) -> str:
    """The agent directory a CLI call may write: its --agent when valid."""
    try:
        return validate_agent_id(agent)
    except InvalidInput:
        return AGENT


CLI = Surface("cli argv", cli_examples, run_cli, agent_of=lambda example: _agent_dir_of(example[0]))


# -- surface: entry files on disk -----------------------------------------------------------

_entry_fields = st.fixed_dictionaries(
    {
        "id": maybe(st.one_of(entry_ids, json_values), None),  # None: the file's own id
        "category": maybe(st.one_of(categories, json_values), "KEEP"),
        "content": maybe(st.one_of(hostile_text, json_values), sane_text),
        "tags": maybe(st.one_of(tags_lists, json_values), sane_tags),
        "importanceScore": maybe(
            st.one_of(st.floats(allow_nan=True, allow_infinity=True), json_values), sane_importance
        ),
        "createdAt": maybe(st.one_of(times, json_values), sane_time),
        "lastSeenAt": maybe(st.one_of(times, json_values), sane_time),
        "metadata": maybe(
            st.one_of(
                st.just({f"k{n}": "v" for n in range(33)}),
                st.just({"subjectTime": "y" * 2_001}),
                st.just({"bad key": "v"}),
                json_values,
            ),
            {},
        ),
        "reinforcementCount": maybe(st.one_of(st.integers(-5, 10**30), json_values), 1),
        "revision": maybe(st.one_of(st.integers(-5, 10**30), json_values), 1),
        "archivedAt": maybe(st.one_of(times, json_values), None),
        "appliedOps": maybe(json_values, {}),
    }
)
_locations = st.tuples(
    st.sampled_from([(), ("notes",), ("people", "colleagues"), ("linked",), ("a", "b", "c")]),
    st.sampled_from(
        [
            "aaaaaaaaaaa5.json",
            "aaaaaaaaaaa1.json",
            "zzz.json",
            "AAAAAAAAAAA5.json",
            ".hidden.json",
            "aaaaaaaaaaa6.json",
        ]
    ),
)
_plant_kinds = st.sampled_from(
    ["json"] * 8
    + ["bytes", "link-file", "link-dir", "link-dangling", "fifo", "directory", "huge", "deep"]
)
entry_plants = st.lists(
    st.tuples(_locations, _plant_kinds, _entry_fields, garbage), min_size=1, max_size=3
)


def _entry_payload(location, fields: dict, sandbox: Sandbox) -> bytes:
    dirs, name = location
    body = dict(fields)
    if body["id"] is None:
        body["id"] = name[: -len(".json")]
    if body["category"] == "KEEP":
        body["category"] = "/".join(dirs) or None
    body = {k: v for k, v in body.items() if v is not None or k in ("category",)}
    return _jsonable(body).encode("utf-8", "surrogatepass")


def run_entry_files(sandbox: Sandbox, plants) -> bool:
    long_lived = sandbox.fresh_store()
    long_lived.entries()
    seeded = {e.id: e for e in sandbox.store.entries(include_archived=True)}
    for (dirs, name), kind, fields, junk in plants:
        rel = os.path.join("memory", *dirs, name)
        if kind == "link-dir" and dirs:
            rel = os.path.join("memory", *dirs)
        if kind == "json":
            sandbox.plant(rel, "bytes", _entry_payload((dirs, name), fields, sandbox))
        elif kind == "bytes":
            sandbox.plant(rel, "bytes", junk if isinstance(junk, bytes) else junk.encode())
        elif kind == "huge":
            sandbox.plant(rel, "bytes", b'{"id": "' + b"a" * 1_100_000 + b'"}')
        elif kind == "deep":
            sandbox.plant(rel, "bytes", deep(100_000).encode())
        else:
            with contextlib.suppress(FileExistsError, IsADirectoryError, OSError):
                sandbox.plant(rel, kind)
    mark_before(sandbox)
    store = sandbox.fresh_store()
    loaded = {e.id: e for e in store.entries(include_archived=True)}
    store.problems()
    store.index()
    long_lived.reload()
    long_lived.entries(include_archived=True)
    for entry in loaded.values():
        _require_storable(store, entry)
    mark_after(sandbox)
    # Then writes over the hostile tree: each may be refused, none may crash.
    _try_write(lambda: store.create("A new note about Erin.", category="linked", now=T0))
    _try_write(lambda: store.create("Another note.", category="people/colleagues", now=T0))
    for entry_id, entry in sorted(loaded.items()):
        if entry.is_archived:
            _try_write(functools.partial(store.restore, entry_id, force=True))
        else:
            _try_write(functools.partial(store.archive, entry_id, "fuzz", now=T0))
        _try_write(
            functools.partial(
                save_fact,
                store,
                Candidate(entry.content, entry.category, tuple(f"n{n}" for n in range(32))),
                new_id="bbbbbbbbbbb1",
                op_id=f"fuzz-{entry.id}",
            )
        )
    _try_write(lambda: store.purge(timedelta(days=1), now=T0 + timedelta(days=3650)))
    return set(loaded) == set(seeded)  # nothing planted was taken in


def _require_storable(store: FileMemoryStore, entry: MemoryEntry) -> None:
    """A loaded entry is one the store could have written where it lies."""
    try:
        validate_content(entry.content)
        validate_category(entry.category)
        validate_tags(entry.tags)
        validate_metadata(entry.metadata)
        parts = entry_parts(entry.id, entry.category)
    except InvalidInput as exc:
        raise Violation(f"loaded an entry the store would refuse: {exc}") from None
    if store.path_for(entry.id, entry.category) != store.files.path(*parts):
        raise Violation("loaded an entry from the wrong place")


def _try_write(write: Callable[[], object]) -> None:
    """A write on a hostile tree may be refused — bad input (InvalidInput), or the disk
    in its way (a planted link, FIFO or directory: an OSError such as SymlinkRefused);
    anything else escapes. Reads get no such leeway."""
    try:
        write()
    except (InvalidInput, OSError):
        pass


ENTRY_FILES = Surface("entry files", entry_plants, run_entry_files)


# -- surface: journal lines ---------------------------------------------------------------

_record_fields = st.fixed_dictionaries(
    {
        "at": maybe(st.one_of(times, json_values), "2026-01-01T12:00:00+00:00"),
        "action": maybe(
            st.one_of(
                st.sampled_from(["created", "purged", "repaired", "archived", "embedded", "bogus"]),
                json_values,
            ),
            "updated",
        ),
        "id": maybe(st.one_of(entry_ids, json_values), st.sampled_from(sorted(SEEDED))),
        "category": maybe(st.one_of(categories, json_values), st.one_of(st.none(), sane_category)),
        "fingerprint": maybe(json_values, "0011223344556677"),
        "reason": maybe(json_values, None),
        "rev": maybe(
            st.one_of(st.integers(-(10**30), 10**30), json_values),
            st.one_of(st.none(), st.integers(0, 5)),
        ),  # None: a legacy record
        "op": maybe(json_values, None),
        "first": maybe(json_values, True),
    }
)
journal_lines = st.lists(
    st.one_of(
        _record_fields.map(lambda r: _jsonable(r).encode("utf-8", "surrogatepass") + b"\n"),
        garbage.map(lambda g: (g if isinstance(g, bytes) else g.encode()) + b"\n"),
        st.just(b'{"a": "' + b"x" * 20_000 + b'"}\n'),
        st.just(b'{"at": "2026-01-01T00:00:00Z", "action": "created"'),  # torn, no newline
        st.just(b"\x00\x00\x00\n"),
    ),
    min_size=1,
    max_size=6,
)


def run_journal(sandbox: Sandbox, lines) -> bool:
    reader = sandbox.fresh_store()
    before = _view(reader)
    mark_before(sandbox)
    with open(sandbox.agent_dir / "journal.jsonl", "ab") as handle:
        handle.write(b"".join(lines))
    mark_before(sandbox)
    if _view(reader) != before or _view(sandbox.fresh_store()) != before:
        raise Violation("a journal line changed what a reader serves")
    mark_after(sandbox)
    writer = sandbox.fresh_store()
    writer.create("A note written after the hostile lines.", entry_id="ccccccccccc1", now=T0)
    if reader.get("ccccccccccc1") is None:
        raise Violation("a long-lived reader stopped following the journal")
    parsed = 0
    for line in b"".join(lines).split(b"\n"):
        with contextlib.suppress(ValueError):
            JournalRecord.from_line(line)
            parsed += 1
    return parsed == 0


def _view(store: FileMemoryStore) -> dict[str, tuple]:
    return {
        e.id: (e.revision, e.content, e.is_archived) for e in store.entries(include_archived=True)
    }


JOURNAL = Surface("journal lines", journal_lines, run_journal)


# -- surface: the vocabulary file ---------------------------------------------------------

_vocab_values = st.fixed_dictionaries(
    {
        "extraCommonWords": maybe(st.one_of(json_values, st.just(["w"] * 1_001)), ["acme"]),
        "alwaysSpecificWords": maybe(st.one_of(json_values, st.just(["y" * 65])), []),
        "numericExemptCategories": maybe(
            st.one_of(json_values, categories.map(lambda c: [c])), ["metrics"]
        ),
    }
)
_vocab_file = _vocab_values.map(lambda v: ("bytes", _jsonable(v).encode("utf-8", "surrogatepass")))
vocabulary_files = st.one_of(
    *[_vocab_file.map(lambda x: x) for _ in range(4)],
    _vocab_values.map(lambda v: ("bytes", _jsonable({**v, "unknown": 1}).encode())),
    garbage.map(lambda g: ("bytes", g if isinstance(g, bytes) else g.encode())),
    st.sampled_from(
        [
            ("link-secret", b""),
            ("link-dangling", b""),
            ("fifo", b""),
            ("directory", b""),
            ("bytes", b"[" * 100_000 + b"]" * 100_000),
            ("bytes", b'{"extraCommonWords": ["' + b"w" * 300_000 + b'"]}'),
        ]
    ),
)


def run_vocabulary(sandbox: Sandbox, example) -> bool:
    kind, payload = example
    sandbox.plant(VOCABULARY_FILE, kind, payload)
    mark_before(sandbox)
    loaded = load_vocabulary(sandbox.agent_dir)
    if loaded.source == "built-in baseline" and loaded.warning is None:
        raise Violation("a file that is there but unusable gave no warning")
    return loaded.source == "built-in baseline"


VOCABULARY = Surface("vocabulary file", vocabulary_files, run_vocabulary)


# -- surface: environment settings --------------------------------------------------------

SETTING_NAMES = [
    "DREAMKEEPER_DATA",
    "DREAMKEEPER_AGENT",
    "DREAMKEEPER_ARCHIVE_RETENTION_DAYS",
    "DREAMKEEPER_DECAY_GRACE_DAYS",
    "DREAMKEEPER_DECAY_HALF_LIFE_DAYS",
    "DREAMKEEPER_DECAY_FLOOR",
    "DREAMKEEPER_PROTECT_IMPORTANCE",
    "DREAMKEEPER_PROTECT_REINFORCEMENT",
    "DREAMKEEPER_SAVE_TIMEOUT_SECONDS",
    "TEMPORAL_ADDRESS",
    "TEMPORAL_NAMESPACE",
    "DREAMKEEPER_TASK_QUEUE",
    "DREAMKEEPER_DREAM_CRON",
    "DREAMKEEPER_LLM_BASE_URL",
    "DREAMKEEPER_LLM_MODEL",
    "DREAMKEEPER_LLM_API_KEY",
    "DREAMKEEPER_LLM_TIMEOUT_SECONDS",
    "DREAMKEEPER_EMBEDDING_BASE_URL",
    "DREAMKEEPER_EMBEDDING_MODEL",
    "DREAMKEEPER_EMBEDDING_API_KEY",
    "DREAMKEEPER_EMBEDDING_MIN_SIMILARITY",
    "DREAMKEEPER_EMBEDDING_TIMEOUT_SECONDS",
    "DREAMKEEPER_EMBEDDING_QUERY_TIMEOUT_SECONDS",
    "DREAMKEEPER_EMBEDDING_MAX_INPUT_CHARS",
]
_env_values = st.one_of(
    number_text,
    hostile_text,
    st.sampled_from(
        [
            "localhost:7233",
            "host:²",
            "host:99999999",
            ":7233",
            "host:",
            "0 */12 * * *",
            "* * *",
            "http://127.0.0.1:1/v1",
            "a1",
            "-bad",
            " 5 ",
            "\t",
        ]
    ),
)
env_dicts = st.dictionaries(st.sampled_from(SETTING_NAMES), _env_values, max_size=8)


def run_settings(_: Sandbox, env) -> bool:
    refused = False
    for read in (
        StoreSettings.from_env,
        embedding_settings,
        LLMSettings.from_env,
        TemporalSettings.from_env,
    ):
        try:
            read(env)
        except InvalidInput:  # SettingsError is one
            refused = True
    return refused


SETTINGS = Surface("environment settings", env_dicts, run_settings, needs_disk=False)


# -- surfaces: LLM replies ----------------------------------------------------------------


def _reply_text(value: object, fence: str) -> str:
    text = _jsonable(value)
    return f"```{fence}\n{text}\n```" if fence else text


_fact_fields = st.fixed_dictionaries(
    {
        "content": maybe(
            st.one_of(hostile_text, json_values),
            st.one_of(
                sane_text, st.just(SEEDED["aaaaaaaaaaa1"][0]), st.just(SEEDED["aaaaaaaaaaa2"][0])
            ),
        ),
        "category": maybe(st.one_of(categories, json_values), sane_category),
        "tags": maybe(st.one_of(tags_lists, json_values), sane_tags),
        "importance": maybe(
            st.one_of(st.floats(allow_nan=True, allow_infinity=True), json_values), sane_importance
        ),
        "metadata": maybe(
            st.one_of(
                st.just({"subjectTime": "z" * 2_001}),
                st.just({"subjectTime": "2026-01-01"}),
                st.just({"subjectTime": 5}),
                json_values,
            ),
            None,
        ),
    }
)
_fences = st.sampled_from(["", "", "json", "JSON", "python"])


def llm_replies(item: st.SearchStrategy, wrap: Callable[[list], object]) -> st.SearchStrategy:
    items = st.one_of(
        st.lists(item, max_size=4),
        st.integers(21, 2_000).map(lambda n: [{"content": f"fact {i}"} for i in range(n)]),
        st.just(
            [{"content": SEEDED["aaaaaaaaaaa1"][0], "tags": [f"new{n}" for n in range(32)]}] * 5
        ),
    )
    well_formed = st.tuples(items.map(wrap), _fences).map(lambda v: _reply_text(*v))
    return st.one_of(
        *[well_formed.map(lambda x: x) for _ in range(6)],
        garbage.map(lambda g: g.decode("utf-8", "replace") if isinstance(g, bytes) else g),
        json_values.map(_jsonable),
        st.integers(1, 40).map(lambda n: "[" + " " * (n * 25_000) + "]"),
        st.just("x" * 600_000),
        hostile_text,
    )


enrichment_replies = llm_replies(_fact_fields, lambda items: items)
ORIGINAL = "aaaaaaaaaaa2"


def run_enrichment(sandbox: Sandbox, text: str) -> bool:
    store = sandbox.store
    try:
        reply = parse_enrichment(text)
    except MalformedLLMOutput:
        return True
    mark_after(sandbox)
    if len(reply.facts) > MAX_FACTS_PER_REPLY:
        raise Violation(f"{len(reply.facts)} facts passed the cap")
    result = enrichment_result(reply, "notes", ORIGINAL)
    result.model_dump_json()  # it must travel as a Temporal payload
    saved: list[str] = []
    # Every fact the parser passes must save, as the workflow saves them (the store's
    # lock, dedup, one reinforcement per entry per save): never a save failing half-way.
    for index, fact in enumerate(result.facts):
        outcome = save_fact(
            store,
            Candidate(
                fact.content,
                fact.category,
                tuple(fact.tags),
                tuple(fact.metadata.items()),
                fact.importance,
            ),
            new_id=f"{index + 1:012x}",
            op_id=f"{ORIGINAL}-{index}",
            exclude=[ORIGINAL],
            touched=sorted(set(saved)),
        )
        saved.append(outcome.entry_id)
    into = sorted(set(saved) - {ORIGINAL})
    if into:
        store.retire_into(ORIGINAL, into, reason="fuzz enrichment")
    entry = store.get("aaaaaaaaaaa1")
    if entry is not None and entry.reinforcement_count > 2:
        raise Violation(f"one save reinforced an entry {entry.reinforcement_count - 1} times")
    return not result.facts


ENRICHMENT = Surface("LLM enrichment reply", enrichment_replies, run_enrichment)

_merge_fields = st.fixed_dictionaries(
    {
        "content": maybe(
            st.one_of(
                hostile_text,
                json_values,
                st.just(SEEDED["aaaaaaaaaaa1"][0] + " " + SEEDED["aaaaaaaaaaa2"][0] + "\x00"),
            ),
            sane_text.map(
                lambda t: SEEDED["aaaaaaaaaaa1"][0] + " " + SEEDED["aaaaaaaaaaa2"][0] + " " + t
            ),
        ),
        "category": maybe(st.one_of(categories, json_values), st.one_of(st.none(), sane_category)),
        "tags": maybe(st.one_of(tags_lists, json_values), sane_tags),
        "sourceIds": maybe(
            st.one_of(st.lists(entry_ids, max_size=20), json_values),
            ["aaaaaaaaaaa1", "aaaaaaaaaaa2"],
        ),
        "importance": maybe(
            st.one_of(st.floats(allow_nan=True, allow_infinity=True), json_values), 0.7
        ),
    }
)
consolidation_replies = st.one_of(
    llm_replies(_merge_fields, lambda items: {"toSave": items, "toDelete": ["aaaaaaaaaaa2"]}),
    st.tuples(st.lists(entry_ids, max_size=600), _fences).map(
        lambda v: _reply_text({"toDelete": v[0], "toSave": []}, v[1])
    ),
)


def run_consolidation(sandbox: Sandbox, text: str) -> bool:
    store = sandbox.store
    try:
        reply = parse_consolidation(text)
    except MalformedLLMOutput:
        return True
    mark_after(sandbox)
    shown = {e.id: e.fingerprint for e in store.entries()}
    ProposeResult(
        shown=shown,
        to_delete=reply.to_delete,
        to_save=[
            ProposedMerge(
                content=m.content,
                category=m.category,
                tags=m.tags,
                source_ids=m.source_ids,
                importance=m.importance,
            )
            for m in reply.to_save
        ],
    ).model_dump_json()  # it must travel as a Temporal payload
    applied = 0
    for merge in reply.to_save:
        review = review_merge(
            merge.content,
            merge.source_ids,
            {i: store.get(i) if _is_id(i) else None for i in merge.source_ids},
            shown,
        )
        if review.accepted:
            sources = [store.require(i) for i in dict.fromkeys(merge.source_ids)]
            proposal = MergeProposal(
                merge.content,
                merge_category(merge.category, sources),
                tuple(valid_tags(merge.tags)),
                merge.importance,
            )
            merged = merged_entry(f"{applied + 1:012x}", proposal, sources, T0)
            store.put(merged, action=JournalAction.MERGED)
            applied += 1
    prune_candidates(
        reply.to_delete,
        shown=shown,
        merge_only=[],
        merge_sources=[s for m in reply.to_save for s in m.source_ids],
    )
    return applied == 0 and not reply.to_delete


def _is_id(value: str) -> bool:
    try:
        entry_parts(value, None)
    except InvalidInput:
        return False
    return True


CONSOLIDATION = Surface("LLM consolidation reply", consolidation_replies, run_consolidation)

repair_replies = st.one_of(
    *[
        st.tuples(
            st.fixed_dictionaries(
                {
                    "content": maybe(
                        st.one_of(hostile_text, json_values),
                        sane_text.map(lambda t: SEEDED["aaaaaaaaaaa1"][0] + " " + t),
                    )
                }
            ),
            _fences,
        ).map(lambda v: _reply_text(*v))
        for _ in range(6)
    ],
    llm_replies(json_values, lambda items: items),
)


def run_repair(sandbox: Sandbox, text: str) -> bool:
    store = sandbox.store
    try:
        reply = parse_repair(text)
    except MalformedLLMOutput:
        return True
    mark_after(sandbox)
    source = store.require("aaaaaaaaaaa1")
    review = review_merge(
        reply.content, [source.id], {source.id: source}, {source.id: source.fingerprint}
    )
    if review.accepted:
        merged = merged_entry(
            "0000000000f1", MergeProposal(reply.content, source.category), [source], T0
        )
        store.put(merged, action=JournalAction.MERGED)
    return not review.accepted


REPAIR = Surface("LLM repair reply", repair_replies, run_repair)

_preference_fields = st.fixed_dictionaries(
    {
        "content": maybe(
            st.one_of(hostile_text, json_values), sane_text.map(lambda t: f"The user prefers {t}")
        ),
        "tags": maybe(
            st.one_of(tags_lists, st.just([f"p{n}" for n in range(32)]), json_values), sane_tags
        ),
        "importance": maybe(
            st.one_of(st.floats(allow_nan=True, allow_infinity=True), json_values), sane_importance
        ),
    }
)
preference_replies = llm_replies(_preference_fields, lambda items: {"toSave": items})


def run_preferences(sandbox: Sandbox, text: str) -> bool:
    try:
        reply = parse_preferences(text)
    except MalformedLLMOutput:
        return True
    mark_after(sandbox)
    for index, pref in enumerate(reply.to_save):
        fact = FactProposal(
            content=pref.content,
            category="user-preferences/inferred",
            tags=list(dict.fromkeys([*pref.tags, "inferred"])),
            importance=pref.importance,
            metadata={"source": "inferred"},
        )
        save_fact(
            sandbox.store,
            Candidate(
                fact.content,
                fact.category,
                tuple(fact.tags),
                tuple(fact.metadata.items()),
                fact.importance,
            ),
            new_id=f"{index + 1:012x}",
            op_id=f"pref-{index}",
        )
    return not reply.to_save


PREFERENCES = Surface("LLM preference reply", preference_replies, run_preferences)


# -- surface: working-memory segment files ------------------------------------------------

_working_entry = st.fixed_dictionaries(
    {
        "key": maybe(
            st.one_of(
                hostile_text,
                json_values,
                st.sampled_from(["patrol/x/k", "session/s1/../../x", "session"]),
            ),
            st.from_regex(r"session/s[0-9]/[a-z]{1,8}", fullmatch=True),
        ),
        "value": maybe(st.one_of(hostile_text, json_values), sane_text),
        "storedAt": maybe(st.one_of(times, json_values), "2026-01-01T11:59:00+00:00"),
        "expiresAt": maybe(st.one_of(times, json_values), "2026-01-01T12:30:00"),
        "category": maybe(st.one_of(categories, json_values), None),
        "tags": maybe(st.one_of(tags_lists, json_values), sane_tags),
    }
)
working_files = st.tuples(
    st.sampled_from(["session.json"] * 5 + ["patrol.json", "x y.json", ".session.json", "@dir"]),
    st.one_of(
        *[
            st.lists(_working_entry, min_size=1, max_size=4).map(
                lambda items: (
                    "bytes",
                    _jsonable({"entries": items}).encode("utf-8", "surrogatepass"),
                )
            )
            for _ in range(4)
        ],
        st.lists(_working_entry, max_size=4).map(
            lambda items: ("bytes", _jsonable({"entries": items}).encode("utf-8", "surrogatepass"))
        ),
        garbage.map(lambda g: ("bytes", g if isinstance(g, bytes) else g.encode())),
        st.sampled_from(
            [("link-secret", b""), ("fifo", b""), ("directory", b""), ("link-dangling", b"")]
        ),
    ),
)


def run_working(sandbox: Sandbox, example) -> bool:
    name, (kind, payload) = example
    if name == "@dir":  # the directory itself is a link out of the agent's directory
        sandbox.plant("working-memory", "link-dir")
    else:
        sandbox.plant(os.path.join("working-memory", name), kind, payload)
    mark_before(sandbox)
    memory = FileWorkingMemoryStore(sandbox.data, AGENT, clock=lambda: T0)
    listing = memory.list()
    memory.search("scratch value")
    for entry in listing.entries:
        memory.get(entry.key)
    mark_after(sandbox)
    _try_write(lambda: memory.save("session/s1", "fresh", "written after the plant"))
    _try_write(lambda: memory.delete("session/s1/notes"))
    _try_write(lambda: memory.clear("session/s1"))
    _try_write(memory.sweep)
    return not listing.entries


WORKING = Surface("working-memory segment files", working_files, run_working)


# -- surface: conversation session files and the conversation log -------------------------

_turn = st.fixed_dictionaries(
    {
        "n": maybe(st.one_of(st.integers(-(10**30), 10**30), json_values), 1),
        "role": maybe(
            st.one_of(st.sampled_from(["user", "assistant", "system"]), json_values), "user"
        ),
        "content": maybe(st.one_of(hostile_text, json_values), sane_text),
        "at": maybe(st.one_of(times, json_values), "2026-01-01T11:59:00"),
    }
)
_session = st.fixed_dictionaries(
    {
        "started_at": maybe(st.one_of(times, json_values), "2026-01-01T11:00:00"),
        "last_at": maybe(st.one_of(times, json_values), "2026-01-01T11:59:00"),
        "next_n": maybe(st.one_of(st.integers(-(10**30), 10**30), json_values), 2),
        "archived_lines": maybe(json_values, 0),
        "turns": maybe(
            st.one_of(st.lists(_turn, max_size=3), json_values),
            [{"n": 1, "role": "user", "content": "hello", "at": "2026-01-01T11:59:00"}],
        ),
    }
)
conversation_files = st.tuples(
    st.one_of(
        _session.map(lambda s: _jsonable(s).encode("utf-8", "surrogatepass")),
        garbage.map(lambda g: g if isinstance(g, bytes) else g.encode()),
    ),
    st.lists(
        st.one_of(
            _turn.map(lambda t: _jsonable(t).encode("utf-8", "surrogatepass")),
            garbage.map(lambda g: g if isinstance(g, bytes) else g.encode()),
        ),
        max_size=3,
    ),
    st.sampled_from(
        ["bytes"] * 6
        + [
            "link-secret",
            "fifo",
            "directory",
            "@conversations",
            "@conversations/archive",
            "@conversation-log",
        ]
    ),
)


def run_conversation(sandbox: Sandbox, example) -> bool:
    session, archive, kind = example
    if kind.startswith("@"):  # a directory of the store is a link out of the agent's
        sandbox.plant(kind[1:], "link-dir")
        kind = "bytes"
    sandbox.plant(os.path.join("conversations", "sessions", "s1.json"), kind, session)
    sandbox.plant(
        os.path.join("conversations", "archive", "s1.jsonl"), "bytes", b"\n".join(archive) + b"\n"
    )
    mark_before(sandbox)
    memory = FileConversationStore(sandbox.data, AGENT, clock=lambda: T0)
    conversation = memory.conversation("s1")
    memory.sessions()
    memory.sessions(include_expired=True)
    mark_after(sandbox)
    _try_write(lambda: memory.add_turn("s1", "user", "a turn after the plant"))
    memory.conversation("s1")
    return len(conversation) == 0


CONVERSATION = Surface("conversation session files", conversation_files, run_conversation)

_logged = st.fixed_dictionaries(
    {
        "sessionId": maybe(st.one_of(hostile_text, json_values), "s1"),
        "role": maybe(
            st.one_of(st.sampled_from(["user", "assistant", "tool"]), json_values), "user"
        ),
        "content": maybe(st.one_of(hostile_text, json_values), sane_text),
        "at": maybe(st.one_of(times, json_values), "2026-01-01T11:59:00+00:00"),
    }
)
log_files = st.one_of(
    st.lists(
        st.one_of(
            _logged.map(lambda t: _jsonable(t).encode("utf-8", "surrogatepass")),
            garbage.map(lambda g: g if isinstance(g, bytes) else g.encode()),
        ),
        max_size=5,
    ).map(lambda lines: ("bytes", b"\n".join(lines))),
    st.sampled_from([("link-secret", b""), ("fifo", b""), ("directory", b"")]),
)


def run_log(sandbox: Sandbox, example) -> bool:
    kind, payload = example
    rel = os.path.join("conversation-log", "processed", "turns-20260101T000000.jsonl")
    sandbox.plant(rel, kind, payload)
    mark_before(sandbox)
    turns = ConversationLog.read(sandbox.agent_dir / rel)
    transcript(turns)
    for turn in turns:
        if turn.role not in ("user", "assistant") or not isinstance(turn.content, str):
            raise Violation("a malformed turn was read")
    return not turns


CONVERSATION_LOG = Surface("conversation log lines", log_files, run_log)


# -- surface: the consolidation clusters file ---------------------------------------------

_cluster = st.fixed_dictionaries(
    {
        "members": maybe(
            st.one_of(st.lists(entry_ids, max_size=3), json_values),
            ["aaaaaaaaaaa1", "aaaaaaaaaaa2"],
        ),
        "declines": maybe(st.one_of(st.integers(-(10**30), 10**30), json_values), 1),
        "settledAt": maybe(st.one_of(times, json_values), "2025-12-01T00:00:00+00:00"),
    }
)
cluster_files = st.one_of(
    st.just(("@dir", b"")),
    st.lists(_cluster, max_size=3).map(
        lambda cs: ("bytes", _jsonable({"clusters": cs}).encode("utf-8", "surrogatepass"))
    ),
    garbage.map(lambda g: ("bytes", g if isinstance(g, bytes) else g.encode())),
    st.sampled_from([("link-secret", b""), ("fifo", b""), ("directory", b"")]),
)


def run_clusters(sandbox: Sandbox, example) -> bool:
    kind, payload = example
    rel = os.path.join("consolidation", "clusters.json")
    if kind == "@dir":  # the directory itself is a link out of the agent's directory
        sandbox.plant("consolidation", "link-dir")
    else:
        sandbox.plant(rel, kind, payload)
    mark_before(sandbox)
    state = ClusterState(sandbox.agent_dir)
    settled = state.load()
    after = sandbox.agent_state()
    moved = _diff(sandbox.before, after)
    aside = os.path.join("consolidation", "clusters.json.malformed")
    if moved and (
        sorted(moved) != sorted({rel, aside}) or after.get(aside) != sandbox.before.get(rel)
    ):
        raise Violation(f"loading the clusters file changed more than setting it aside: {moved}")
    sandbox.before = after  # the set-aside is the refusal
    mark_after(sandbox)
    entries = [
        GateEntry(e.id, e.category, e.fingerprint, None, content_tokens(e.content))
        for e in sandbox.store.entries()
    ]
    decided = gate(entries, settled, T0, max_eligible=10)
    try:
        state.save(decided.settled)
    except OSError:  # a link planted where the directory should be: refused, loudly
        return not settled
    if state.load().keys() != {r.key for r in decided.settled}:
        raise Violation("the clusters file does not round-trip")
    return not settled


CLUSTERS = Surface("consolidation clusters file", cluster_files, run_clusters)

SURFACES = [
    CLI,
    ENTRY_FILES,
    JOURNAL,
    VOCABULARY,
    SETTINGS,
    ENRICHMENT,
    CONSOLIDATION,
    REPAIR,
    PREFERENCES,
    WORKING,
    CONVERSATION,
    CONVERSATION_LOG,
    CLUSTERS,
]
