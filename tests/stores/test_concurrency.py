"""Several processes on one agent store: one writer at a time, readers see changes."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from dreamkeeper.stores.longterm.memory_store import FileMemoryStore
from dreamkeeper.stores.search.query import search

WRITER = textwrap.dedent(
    """
    import sys
    from dreamkeeper.stores.longterm.memory_store import FileMemoryStore
    data, tag, shared, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    store = FileMemoryStore(data, "agent-1")
    for i in range(n):
        store.create(f"fact {tag} number {i}", category="bulk")
        store.mutate(
            shared,
            lambda e: e.model_copy(update={"reinforcement_count": e.reinforcement_count + 1}),
        )
    """
)


def test_two_processes_writing_one_store_lose_no_write(tmp_path):
    store = FileMemoryStore(tmp_path, "agent-1")
    shared = store.create("shared counter entry").id
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), tag, shared, "40"])
        for tag in ("alpha", "bravo")
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    fresh = FileMemoryStore(tmp_path, "agent-1")
    assert len(fresh.entries()) == 81
    assert fresh.get(shared).reinforcement_count == 81
    # The long-lived instance catches up through the journal, not a rescan.
    assert store.get(shared).reinforcement_count == 81
    assert len(store.entries()) == 81


def test_a_reader_sees_another_process_s_writes_without_rereading_unchanged_files(
    tmp_path, monkeypatch
):
    writer = FileMemoryStore(tmp_path, "agent-1")
    ids = [writer.create(f"background fact item{i:03d}", category="bulk").id for i in range(30)]
    reader = FileMemoryStore(tmp_path, "agent-1")
    assert len(search(reader, "background fact", limit=100)) == 30

    loads: list[str] = []
    real = FileMemoryStore._load

    def counting(self, path, **kw):
        loads.append(str(path))
        return real(self, path, **kw)

    monkeypatch.setattr(FileMemoryStore, "_load", counting)
    script = textwrap.dedent(
        f"""
        from dreamkeeper.stores.longterm.memory_store import FileMemoryStore
        s = FileMemoryStore({str(tmp_path)!r}, "agent-1")
        s.create("a brand new zebra fact", category="bulk")
        s.update({ids[0]!r}, content="background fact zero, now about a giraffe")
        s.archive({ids[1]!r}, "deleted by agent tool")
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True)

    assert [h.entry.content for h in search(reader, "zebra")] == ["a brand new zebra fact"]
    assert [h.entry.id for h in search(reader, "giraffe")] == [ids[0]]
    assert ids[1] not in {h.entry.id for h in search(reader, "background fact", limit=100)}
    assert len(loads) == 3, loads  # the three files that changed, nothing else
