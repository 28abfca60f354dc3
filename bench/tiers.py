"""Working memory, conversation memory and the agent's documents: the PostgreSQL backend
against the file backend, same operations, same run.

    .venv/bin/python bench/tiers.py [--ops 300]

Starts a throwaway PostgreSQL server (tests/harness/postgres.py; durable: fsync on, as
the file backend fsyncs) and a temp data directory, then times `--ops` of each operation
on both and prints p50 and p99 per backend and the p50 ratio postgres/file. The reads
are made by a second instance of the store, so each one sees another instance's writes
(a file store stats its files; a database store asks for the agent's version unless its
change signal, stores/postgres/change_watch.py, says nothing changed). "working get"
writes before each read, so it always asks; "working get, unchanged" and the searches and
conversation reads read with nothing written in between: the warm read path.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _repo_root  # noqa: F401  (puts the repo root on sys.path for tests.harness)

from dreamkeeper.stores.conversation.conversation_log import ConversationLog
from dreamkeeper.stores.files.agent_files import AgentFiles
from dreamkeeper.stores.files.conversation_memory import FileConversationStore
from dreamkeeper.stores.files.documents import FileDocuments
from dreamkeeper.stores.files.working_memory import FileWorkingMemoryStore
from dreamkeeper.stores.postgres.conversation_memory import PostgresConversationStore
from dreamkeeper.stores.postgres.database import Database
from dreamkeeper.stores.postgres.documents import PostgresDocuments
from dreamkeeper.stores.postgres.migrations import upgrade
from dreamkeeper.stores.postgres.working_memory import PostgresWorkingMemoryStore
from tests.harness.postgres import PostgresCluster, find_bindir


def timed(ops: int, step: Callable[[int], Any]) -> list[float]:
    out = []
    for i in range(ops):
        start = time.perf_counter()
        step(i)
        out.append(time.perf_counter() - start)
    return sorted(out)


def pct(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))] * 1e3


def measure(
    ops: int, working: Callable[[], Any], conversations: Callable[[], Any], documents: Any
) -> dict[str, list[float]]:
    writer, reader = working(), working()
    talker, listener = conversations(), conversations()
    log = ConversationLog(documents)
    return {
        "working save": timed(ops, lambda i: writer.save(f"session/s{i % 6}", f"k{i}", f"v{i}")),
        "working get (other instance)": timed(
            ops, lambda i: (writer.save("session/x", "k", f"v{i}"), reader.get("session/x/k"))
        ),
        # Nothing written between reads: on PostgreSQL the change signal lets these skip
        # the version query (stores/postgres/change_watch.py).
        "working get, unchanged (other inst.)": timed(ops, lambda i: reader.get("session/x/k")),
        "working search": timed(ops, lambda i: reader.search(f"v{i}")),
        "conversation add_turn": timed(ops, lambda i: talker.add_turn("s1", "user", f"turn {i}")),
        "conversation read (other instance)": timed(ops, lambda i: listener.conversation("s1")),
        "document append (log line)": timed(
            ops, lambda i: log.append("s1", "user", f"line {i}", writer.now())
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=300)
    args = parser.parse_args()
    bindir = find_bindir()
    if bindir is None:
        raise SystemExit("PostgreSQL server binaries not found (set DREAMKEEPER_PG_BINDIR)")
    cluster = PostgresCluster(bindir, durable=True)
    cluster.start()
    try:
        db = Database(cluster.create_database("dk_bench_tiers"))
        upgrade(db)
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp)
            file = measure(
                args.ops,
                lambda: FileWorkingMemoryStore(data, "bench"),
                lambda: FileConversationStore(data, "bench"),
                FileDocuments(AgentFiles(data, "bench")),
            )
            postgres = measure(
                args.ops,
                lambda: PostgresWorkingMemoryStore(db, "bench"),
                lambda: PostgresConversationStore(db, "bench"),
                PostgresDocuments(db, "bench"),
            )
        db.close()
    finally:
        cluster.destroy()
    print(f"{args.ops} ops each; ms: file p50/p99, postgres p50/p99, p50 ratio postgres/file")
    for name, base in file.items():
        pg = postgres[name]
        print(
            f"{name:36} {pct(base, 0.5):7.3f} {pct(base, 0.99):7.3f}   "
            f"{pct(pg, 0.5):7.3f} {pct(pg, 0.99):7.3f}   x{pct(pg, 0.5) / pct(base, 0.5):.2f}"
        )


if __name__ == "__main__":
    main()
