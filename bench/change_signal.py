"""The change signal's delay: from a write's commit to the moment another process's store
knows it must ask the database again (stores/postgres/change_watch.py).

    nice .venv/bin/python bench/change_signal.py [--writes 500]

Starts a throwaway durable PostgreSQL server (bench/postgres_backend.py). A reader
`Database` (one process's) has its listener confirmed; a second `Database` (another
process's, so no in-process mark helps) writes one working-memory entry at a time. For
each write the time runs from the writer's commit returning to the reader's watch
having noted that agent as changed (from then on a warm read of it asks the database).
Prints p50, p99 and max in ms, and how often the listener was found live when asked.
"""

from __future__ import annotations

import argparse
import time

import _repo_root  # noqa: F401  (puts the repo root on sys.path for tests.harness)
from postgres_backend import database_url

from dreamkeeper.stores.postgres import change_watch
from dreamkeeper.stores.postgres.database import Database
from dreamkeeper.stores.postgres.working_memory import PostgresWorkingMemoryStore


def pct(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))] * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=500)
    args = parser.parse_args()
    with database_url() as url:
        reader, writer = Database(url), Database(url)
        watch = change_watch.watch(reader)
        watch.token()
        deadline = time.monotonic() + 10
        while not watch.live:
            if time.monotonic() > deadline:
                raise SystemExit("the listener never confirmed")
            time.sleep(0.01)
        store = PostgresWorkingMemoryStore(writer, "bench")
        delays: list[float] = []
        live = 0
        for i in range(args.writes):
            token = watch.token()
            live += token.session != 0
            store.save("session/x", "k", f"v{i}")
            committed = time.perf_counter()
            # The mark itself, not `unchanged` (which also says no while the listener is
            # in doubt): the delay measured is the notification's.
            # Polled with a sleep: a busy loop would hold the GIL from the listener thread
            # for whole switch intervals (5 ms) and measure that instead.
            while watch._marks.get((change_watch.WORKING_TIER, "bench"), 0) <= token.seq:
                time.sleep(0.00005)
            delays.append(time.perf_counter() - committed)
            time.sleep(0.002)  # writes spaced out, as a fleet's are per agent
        delays.sort()
        watch.stop()
        reader.close()
        writer.close()
    print(
        f"{args.writes} writes: commit -> other process's watch notes the change: p50 "
        f"{pct(delays, 0.5):.3f} ms, p99 {pct(delays, 0.99):.3f} ms, max "
        f"{delays[-1] * 1e3:.3f} ms; listener live when asked {live}/{args.writes}"
    )


if __name__ == "__main__":
    main()
