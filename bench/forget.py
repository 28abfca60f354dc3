"""What crypto-shredding and forgetting cost.

1. The payload codec: sealing and opening a save's payload with the agent's data key
   (the agent found in the payload, the key file stat'ed per use) against the payload
   key alone (the baseline), in the same run.
2. `forget` of one entry in a store of N entries (the receipt's verification reads
   every file of the agent) against archiving one entry (the baseline), same store size.

    .venv/bin/python bench/forget.py [--payloads 20000] [--entries 2000]
    .venv/bin/python bench/forget.py --backend postgres [--payloads 4000] [--entries 2000]

`--backend postgres` runs both on a throwaway durable PostgreSQL server
(bench/postgres_backend.py) and the file backend in the same run: the data keys as rows
(one indexed read per use, so a key destroyed on another host stops working at once)
against the payload key alone and against the data keys as files; the cost of sealing
memory content at rest (stores.postgres.sealing): save and search p50, sealed against
plaintext in the same run (targets 1.15 and 1.10), and a cold open; forget of one entry
(the verification scans every row kept for the agent; sealed, the agent is re-keyed and
the key-encryption key rotated) against archiving one on the same backend, with the file
backend's ratio beside it; and a whole-agent forget.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from temporalio.contrib.pydantic import pydantic_data_converter

from dreamkeeper.client.codec import EncryptionCodec, PayloadKey, PayloadKeys, derived_key_id
from dreamkeeper.core.payloads import SaveInput
from dreamkeeper.core.settings import StoreSettings
from dreamkeeper.stores.backends import open_backend
from dreamkeeper.stores.contract.records import NewEntry
from dreamkeeper.stores.files.forgetting import file_forgetting
from dreamkeeper.stores.files.memory_store import FileMemoryStore


def _codec_rate(codec: EncryptionCodec, payloads: list, rounds: int) -> float:
    start = time.perf_counter()
    for _ in range(rounds):
        codec.decode_sync(codec.encode_sync(payloads))
    return rounds * len(payloads) / (time.perf_counter() - start)


# One payload key for the run: on a database every process shares it (and the keyring).
SECRET = os.urandom(32)


def bench_codec(count: int, data: Path, url: str | None = None) -> None:
    key = PayloadKey(derived_key_id(SECRET), SECRET)
    plain = EncryptionCodec([key])
    per_agent = EncryptionCodec([key], PayloadKeys((key,), "bench", data_dir=data).agent_keys())
    on_database = None
    if url is not None:
        backend = open_backend(StoreSettings(data_dir=data, database_url=url))
        keys = PayloadKeys((key,), "bench", data_dir=data, key_store=backend.agent_keys)
        on_database = EncryptionCodec([key], keys.agent_keys())
    inputs = [
        SaveInput(
            agent_id=f"agent-{i % 50}",
            entry_id=f"{i:012x}",
            content=f"Fact number {i}: the user met Dana Ortiz at 4{i % 1000:03d} Elm Street.",
            category="people",
        )
        for i in range(200)
    ]
    payloads = pydantic_data_converter.payload_converter.to_payloads(inputs)
    rounds = max(1, count // len(payloads))
    _codec_rate(per_agent, payloads, 1)  # make the 50 data keys first
    base = statistics.median(_codec_rate(plain, payloads, rounds) for _ in range(3))
    mine = statistics.median(_codec_rate(per_agent, payloads, rounds) for _ in range(3))
    print(f"codec seal+open, payload key only      {base:12,.0f} payloads/s  (baseline)")
    print(
        f"codec seal+open, per-agent data keys   {mine:12,.0f} payloads/s  ratio {mine / base:.2f}"
    )
    if on_database is not None:
        _codec_rate(on_database, payloads, 1)
        rows = statistics.median(_codec_rate(on_database, payloads, rounds) for _ in range(3))
        print(
            f"codec seal+open, data keys in database {rows:12,.0f} payloads/s  ratio "
            f"{rows / base:.3f} ({rows / mine:.3f} of the files' rate)"
        )


def bench_forget(entries: int, data: Path) -> float:
    store = FileMemoryStore(data, "bench")
    made = store.create_many(
        NewEntry(content=f"Note {i}: the user's cousin Ilse {i} lives in Oslo.")
        for i in range(entries)
    )
    forgetting = file_forgetting(data)
    archive_times, forget_times = [], []
    for i in range(5):
        start = time.perf_counter()
        FileMemoryStore(data, "bench").archive(made[2 * i].id, "bench")
        archive_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        receipt = forgetting.forget_entries("bench", [made[2 * i + 1].id])
        forget_times.append(time.perf_counter() - start)
        assert receipt.verified
    base, mine = statistics.median(archive_times), statistics.median(forget_times)
    print(f"archive one of {entries} entries (fresh open)  {base * 1000:10.1f} ms  (baseline)")
    print(
        f"forget one of {entries} entries, verified     {mine * 1000:10.1f} ms  "
        f"ratio {mine / base:.1f} ({receipt.verification.files_scanned} files scanned)"
    )
    return mine / base


def _sealed(db, keyring: Path):
    from dreamkeeper.stores.postgres.agent_keys import PostgresAgentKeyStore
    from dreamkeeper.stores.postgres.sealing import Sealing

    wrapping = [(derived_key_id(SECRET), SECRET)]
    return Sealing(PostgresAgentKeyStore(db, wrapping, keyring))


def bench_forget_postgres(entries: int, url: str, file_ratio: float, keyring: Path) -> None:
    """Forget one entry against archiving one, sealed at rest (the agent re-keyed, the
    key-encryption key rotated) and not, on stores of the same size."""
    from dreamkeeper.stores.postgres.database import Database
    from dreamkeeper.stores.postgres.forget import postgres_forgetting
    from dreamkeeper.stores.postgres.memory_store import PostgresMemoryStore

    db = Database(url)
    sealing = _sealed(db, keyring)
    base = None
    for label, seal in (("in plaintext", None), ("sealed at rest", sealing)):
        agent = "bench-sealed" if seal else "bench-plain"
        made = PostgresMemoryStore(db, agent, sealing=seal).create_many(
            NewEntry(content=f"Note {i}: the user's cousin Ilse {i} lives in Oslo.")
            for i in range(entries)
        )
        forgetting = postgres_forgetting(db, sealing=seal)
        archive_times, forget_times = [], []
        for i in range(5):
            start = time.perf_counter()
            PostgresMemoryStore(db, agent, sealing=seal).archive(made[2 * i].id, "bench")
            archive_times.append(time.perf_counter() - start)
            start = time.perf_counter()
            receipt = forgetting.forget_entries(agent, [made[2 * i + 1].id])
            forget_times.append(time.perf_counter() - start)
            assert receipt.verified, receipt.verification
        archive, mine = statistics.median(archive_times), statistics.median(forget_times)
        base = base or archive
        print(
            f"postgres {label}: archive one of {entries} entries (fresh open) "
            f"{archive * 1000:9.1f} ms"
        )
        print(
            f"postgres {label}: forget one of {entries} entries, verified   "
            f"{mine * 1000:9.1f} ms  ratio {mine / archive:.1f} of one archive (files: "
            f"{file_ratio:.1f}; {receipt.verification.files_scanned} rows scanned)"
        )
        start = time.perf_counter()
        receipt = forgetting.forget_agent(agent)
        whole = time.perf_counter() - start
        assert receipt.verified
        print(
            f"postgres {label}: forget the whole agent ({entries - 10} entries left) "
            f"{whole * 1000:9.1f} ms  ratio {whole / archive:.1f} of one archive"
        )
    db.close()


def bench_at_rest(entries: int, rounds: int, url: str, keyring: Path) -> None:
    """The cost of sealing at rest on the hot paths: a save (`create`: one transaction)
    and a search (a caught-up store: one catch-up probe, then the in-memory index), p50
    over `rounds`, sealed and in plaintext taking turns on two agents of `entries`
    entries each; and a cold open (the snapshot row opened, then the table caught up)."""
    from dreamkeeper.stores.postgres.database import Database
    from dreamkeeper.stores.postgres.memory_store import PostgresMemoryStore
    from dreamkeeper.stores.search.query import search

    db = Database(url)
    sealing = _sealed(db, keyring)
    places = ["Oslo", "Lisbon", "Quito", "Hanoi", "Accra", "Perth", "Tromsø", "Cusco"]
    texts = [
        f"Note {i}: the user's cousin Ilse {i} moved to {places[i % 8]} and works at the "
        f"harbour office number {i * 7 % 1000}."
        for i in range(entries)
    ]
    stores = {
        "plain": PostgresMemoryStore(db, "rest-plain"),
        "sealed": PostgresMemoryStore(db, "rest-sealed", sealing=sealing),
    }
    for store in stores.values():
        store.create_many(NewEntry(content=t) for t in texts)
    saves: dict[str, list[float]] = {k: [] for k in stores}
    searches: dict[str, list[float]] = {k: [] for k in stores}
    for i in range(rounds):
        order = list(stores) if i % 2 == 0 else list(reversed(stores))
        for kind in order:
            start = time.perf_counter()
            stores[kind].create(f"Save {i}: Ilse's neighbour in {places[i % 8]} keeps bees.")
            saves[kind].append(time.perf_counter() - start)
        for kind in order:
            start = time.perf_counter()
            hits = search(stores[kind], f"Ilse {places[(i + 3) % 8]} harbour office")
            searches[kind].append(time.perf_counter() - start)
            assert hits
    for kind in stores:
        stores[kind].save_snapshot()
    opens: dict[str, list[float]] = {k: [] for k in stores}
    for i in range(3):
        for kind in stores if i % 2 == 0 else reversed(list(stores)):
            start = time.perf_counter()
            opened = PostgresMemoryStore(db, f"rest-{kind}", sealing=sealing)
            assert len(opened.entries()) == entries + rounds
            opens[kind].append(time.perf_counter() - start)
    for what, times, target in (("save", saves, 1.15), ("search", searches, 1.10)):
        plain = statistics.median(times["plain"])
        sealed = statistics.median(times["sealed"])
        print(
            f"postgres at rest: {what} p50 over {rounds} ({entries} entries): plaintext "
            f"{plain * 1000:7.3f} ms (baseline), sealed {sealed * 1000:7.3f} ms  ratio "
            f"{sealed / plain:.3f} (target <= {target})"
        )
    plain, sealed = statistics.median(opens["plain"]), statistics.median(opens["sealed"])
    print(
        f"postgres at rest: cold open of {entries + rounds} entries: plaintext "
        f"{plain * 1000:7.1f} ms (baseline), sealed {sealed * 1000:7.1f} ms  ratio "
        f"{sealed / plain:.2f}"
    )
    db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--payloads", type=int, default=None, help="20000 (postgres: 4000)")
    parser.add_argument("--entries", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=400, help="saves and searches (postgres)")
    parser.add_argument("--backend", choices=["files", "postgres"], default="files")
    args = parser.parse_args()
    if args.backend == "files":
        with tempfile.TemporaryDirectory() as tmp:
            bench_codec(args.payloads or 20_000, Path(tmp))
        with tempfile.TemporaryDirectory() as tmp:
            bench_forget(args.entries, Path(tmp))
        return
    from postgres_backend import database_url

    with database_url() as url, tempfile.TemporaryDirectory() as home:
        bench_codec(args.payloads or 4_000, Path(home), url)
        keyring = Path(home) / "keyring"  # the codec's, by default under its data directory
        bench_at_rest(args.entries, args.rounds, url, keyring)
        with tempfile.TemporaryDirectory() as tmp:
            file_ratio = bench_forget(args.entries, Path(tmp))
        bench_forget_postgres(args.entries, url, file_ratio, keyring)


if __name__ == "__main__":
    main()
