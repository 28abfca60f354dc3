"""Several processes on one agent store: one writer at a time, readers see changes (both
backends: `long_term`, tests/stores/conftest.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from dreamkeeper.stores.files.memory_store import FileEntryStorage
from dreamkeeper.stores.postgres.memory_store import PostgresEntryStorage
from dreamkeeper.stores.search.query import search
from tests.stores.conftest import OPEN_SPEC

WRITER = OPEN_SPEC + textwrap.dedent(
    """
    import sys
    spec, tag, shared, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    store = open_spec(spec, "agent-1")
    for i in range(n):
        store.create(f"fact {tag} number {i}", category="bulk")
        store.mutate(
            shared,
            lambda e: e.model_copy(update={"reinforcement_count": e.reinforcement_count + 1}),
        )
    """
)


def test_two_processes_writing_one_store_lose_no_write(long_term):
    store = long_term.open()
    shared = store.create("shared counter entry").id
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, long_term.spec, tag, shared, "40"])
        for tag in ("alpha", "bravo")
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    fresh = long_term.open()
    assert len(fresh.entries()) == 81
    assert fresh.get(shared).reinforcement_count == 81
    # The long-lived instance catches up through the feed, not a rescan.
    assert store.get(shared).reinforcement_count == 81
    assert len(store.entries()) == 81


def test_a_reader_sees_another_process_s_writes_without_rereading_unchanged_entries(
    long_term, monkeypatch
):
    writer = long_term.open()
    ids = [writer.create(f"background fact item{i:03d}", category="bulk").id for i in range(30)]
    reader = long_term.open()
    assert len(search(reader, "background fact", limit=100)) == 30

    loads: list[str] = []
    # What each long_term calls to (re)read one entry from its storage.
    cls, method = (
        (FileEntryStorage, "_load")
        if long_term.kind == "file"
        else (PostgresEntryStorage, "_install_doc")
    )
    real = getattr(cls, method)

    def counting(self, key, *args, **kw):
        loads.append(str(key))
        return real(self, key, *args, **kw)

    monkeypatch.setattr(cls, method, counting)
    script = OPEN_SPEC + textwrap.dedent(
        f"""
        s = open_spec({long_term.spec!r}, "agent-1")
        s.create("a brand new zebra fact", category="bulk")
        s.update({ids[0]!r}, content="background fact zero, now about a giraffe")
        s.archive({ids[1]!r}, "deleted by agent tool")
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True)

    assert [h.entry.content for h in search(reader, "zebra")] == ["a brand new zebra fact"]
    assert [h.entry.id for h in search(reader, "giraffe")] == [ids[0]]
    assert ids[1] not in {h.entry.id for h in search(reader, "background fact", limit=100)}
    assert len(loads) == 3, loads  # the three entries that changed, nothing else
