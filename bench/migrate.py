"""`dreamkeeper migrate` of a generated file store: killed mid-way, re-run, verified.

    .venv/bin/python bench/migrate.py [--entries 10000] [--agents 4] [--backend postgres]

A file store of `--entries` long-term entries over `--agents` agents (a fifth of them
archived), with working memory and a session each, is copied into the target backend:
first by a child process killed (os._exit, as a SIGKILL would) at the crash point after
its first agent, then by a re-run to completion, which verifies counts and content
hashes. Printed: each run's time and entries written, the verification, duplicates (the
target's entries beyond the source's), and the time against a baseline measured in the
same run: the same store copied into a second data directory (`--backend file` makes
that the target too).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import _repo_root  # noqa: F401 - tests.harness below

from dreamkeeper.stores.contract.backend import StoreBackend
from dreamkeeper.stores.contract.records import NewEntry
from dreamkeeper.stores.faults import ENV_VAR, KILLED_EXIT_CODE, MIGRATE_AGENT_COPIED
from dreamkeeper.stores.files.backend import FileBackend
from dreamkeeper.stores.migrate import migrate
from dreamkeeper.stores.postgres.backend import PostgresBackend

WORDS = "deploy window friday rollback canary latency budget owner pager runbook".split()


def generate(root: Path, entries: int, agents: int) -> FileBackend:
    source = FileBackend(root)
    for a in range(agents):
        agent = f"agent-{a}"
        store = source.memory(agent)
        share = entries // agents + (1 if a < entries % agents else 0)
        made = store.create_many(
            NewEntry(
                f"{WORDS[i % len(WORDS)]} {WORDS[(i * 7) % len(WORDS)]} fact {a}-{i}",
                category=("ops", "people", None)[i % 3],
                tags=(WORDS[i % 5],),
            )
            for i in range(share)
        )
        for entry in made[::5]:
            store.archive(entry.id, "generated")
        source.working(agent).save("session/s1", "plan", "ship friday", ttl=timedelta(hours=1))
        for t in range(4):
            source.conversations(agent).add_turn("s1", ("user", "assistant")[t % 2], f"turn {t}")
    return source


def target_of(spec: str) -> StoreBackend:
    return PostgresBackend(spec) if spec.startswith("postgresql://") else FileBackend(spec)


def child(source: str, target: str) -> None:
    report = migrate(FileBackend(source), target_of(target))
    print(f"created={report.created} verified={report.verified}")


def run_child(source: Path, target: str, *, kill: bool) -> tuple[float, int, str]:
    env = dict(os.environ)
    env.pop(ENV_VAR, None)
    if kill:
        env[ENV_VAR] = MIGRATE_AGENT_COPIED
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(source), target],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    return time.perf_counter() - started, done.returncode, done.stdout.strip() + done.stderr[-400:]


def count(backend: StoreBackend) -> int:
    return sum(len(backend.memory(a).entries(include_archived=True)) for a in backend.agents())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--backend", choices=["file", "postgres"], default="postgres")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    with tempfile.TemporaryDirectory(prefix="dk-migrate-") as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        source = generate(root / "source", args.entries, args.agents)
        print(
            f"generated {count(source)} entries over {args.agents} agents in "
            f"{time.perf_counter() - started:.1f}s"
        )
        baseline, code, out = run_child(root / "source", str(root / "baseline"), kill=False)
        assert code == 0, out
        print(f"baseline (files -> files, one run): {baseline:.2f}s  {out}")
        cluster = None
        if args.backend == "postgres":
            from dreamkeeper.stores.postgres.database import Database
            from dreamkeeper.stores.postgres.migrations import upgrade
            from tests.harness.postgres import PostgresCluster, find_bindir

            bindir = find_bindir()
            assert bindir is not None, "no PostgreSQL server binaries"
            cluster = PostgresCluster(bindir, durable=True)
            cluster.start()
            spec = cluster.create_database("dk_migrate")
            db = Database(spec, max_size=1)
            upgrade(db)
            db.close()
        else:
            spec = str(root / "target")
        try:
            killed, code, out = run_child(root / "source", spec, kill=True)
            assert code == KILLED_EXIT_CODE, (code, out)
            partial = count(target_of(spec))
            print(
                f"run 1 killed after its first agent: exit {code} after {killed:.2f}s, "
                f"{partial} entries there"
            )
            rerun, code, out = run_child(root / "source", spec, kill=False)
            assert code == 0, out
            print(f"run 2 to completion: {rerun:.2f}s  {out}")
            total, expected = count(target_of(spec)), count(source)
            print(f"target {total} entries, source {expected}: duplicates {total - expected}")
            print(
                f"{args.backend} (kill + re-run) / files baseline: "
                f"{(killed + rerun) / baseline:.2f}x"
            )
        finally:
            if cluster is not None:
                cluster.destroy()


if __name__ == "__main__":
    main()
