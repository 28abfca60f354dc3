"""The long-term store's own files, as something else may have left them: entry files
(with links, FIFOs, directories and hostile JSON), journal lines, the vocabulary file
and the consolidation clusters file."""

from __future__ import annotations

import contextlib
import functools
import os
from datetime import timedelta

from hypothesis import strategies as st

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.core.validation import (
    MAX_METADATA_KEYS,
    MAX_METADATA_VALUE_CHARS,
    MAX_TAGS,
    validate_category,
    validate_content,
    validate_metadata,
    validate_tags,
)
from dreamkeeper.policies.dedup import Candidate, content_tokens
from dreamkeeper.policies.gating import GateEntry, gate
from dreamkeeper.stores.contract.feed import MAX_LINE_BYTES, JournalRecord
from dreamkeeper.stores.dream_state.consolidation_state import ClusterState
from dreamkeeper.stores.files.entry_files import MAX_ENTRY_FILE_BYTES, entry_parts
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.longterm.dedup_save import save_fact
from dreamkeeper.stores.search.vocabulary import FILE_NAME as VOCABULARY_FILE
from dreamkeeper.stores.search.vocabulary import (
    MAX_FILE_BYTES,
    MAX_WORD_CHARS,
    MAX_WORDS,
    load_vocabulary,
)
from tests.harness.hostile.sandbox import (
    SEEDED,
    T0,
    Sandbox,
    Surface,
    Violation,
    changed_paths,
    mark_after,
    mark_before,
    try_write,
)
from tests.harness.hostile.strategies import (
    categories,
    deep,
    entry_ids,
    garbage,
    hostile_text,
    json_values,
    jsonable,
    maybe,
    sane_category,
    sane_importance,
    sane_tags,
    sane_text,
    sane_time,
    tags_lists,
    times,
)

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
                st.just({f"k{n}": "v" for n in range(MAX_METADATA_KEYS + 1)}),
                st.just({"subjectTime": "y" * (MAX_METADATA_VALUE_CHARS + 1)}),
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
    return jsonable(body).encode("utf-8", "surrogatepass")


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
            sandbox.plant(rel, "bytes", b'{"id": "' + b"a" * (MAX_ENTRY_FILE_BYTES + 1) + b'"}')
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
    try_write(lambda: store.create("A new note about Erin.", category="linked", now=T0))
    try_write(lambda: store.create("Another note.", category="people/colleagues", now=T0))
    for entry_id, entry in sorted(loaded.items()):
        if entry.is_archived:
            try_write(functools.partial(store.restore, entry_id, force=True))
        else:
            try_write(functools.partial(store.archive, entry_id, "fuzz", now=T0))
        try_write(
            functools.partial(
                save_fact,
                store,
                Candidate(entry.content, entry.category, tuple(f"n{n}" for n in range(MAX_TAGS))),
                new_id="bbbbbbbbbbb1",
                op_id=f"fuzz-{entry.id}",
            )
        )
    try_write(lambda: store.purge(timedelta(days=1), now=T0 + timedelta(days=3650)))
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
        _record_fields.map(lambda r: jsonable(r).encode("utf-8", "surrogatepass") + b"\n"),
        garbage.map(lambda g: (g if isinstance(g, bytes) else g.encode()) + b"\n"),
        st.just(b'{"a": "' + b"x" * (MAX_LINE_BYTES + 1) + b'"}\n'),
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
        "extraCommonWords": maybe(
            st.one_of(json_values, st.just(["w"] * (MAX_WORDS + 1))), ["acme"]
        ),
        "alwaysSpecificWords": maybe(
            st.one_of(json_values, st.just(["y" * (MAX_WORD_CHARS + 1)])), []
        ),
        "numericExemptCategories": maybe(
            st.one_of(json_values, categories.map(lambda c: [c])), ["metrics"]
        ),
    }
)
_vocab_file = _vocab_values.map(lambda v: ("bytes", jsonable(v).encode("utf-8", "surrogatepass")))
vocabulary_files = st.one_of(
    *[_vocab_file.map(lambda x: x) for _ in range(4)],
    _vocab_values.map(lambda v: ("bytes", jsonable({**v, "unknown": 1}).encode())),
    garbage.map(lambda g: ("bytes", g if isinstance(g, bytes) else g.encode())),
    st.sampled_from(
        [
            ("link-secret", b""),
            ("link-dangling", b""),
            ("fifo", b""),
            ("directory", b""),
            ("bytes", b"[" * 100_000 + b"]" * 100_000),
            ("bytes", b'{"extraCommonWords": ["' + b"w" * (MAX_FILE_BYTES + 1) + b'"]}'),
        ]
    ),
)


def run_vocabulary(sandbox: Sandbox, example) -> bool:
    kind, payload = example
    sandbox.plant(VOCABULARY_FILE, kind, payload)
    mark_before(sandbox)
    loaded = load_vocabulary(sandbox.documents)
    if loaded.source == "built-in baseline" and loaded.warning is None:
        raise Violation("a file that is there but unusable gave no warning")
    return loaded.source == "built-in baseline"


VOCABULARY = Surface("vocabulary file", vocabulary_files, run_vocabulary)


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
        lambda cs: ("bytes", jsonable({"clusters": cs}).encode("utf-8", "surrogatepass"))
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
    state = ClusterState(sandbox.documents)
    settled = state.load()
    after = sandbox.agent_state()
    moved = changed_paths(sandbox.before, after)
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
