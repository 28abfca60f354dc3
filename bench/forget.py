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
against the payload key alone and against the data keys as files; forget of one entry
(the verification scans every row kept for the agent) against archiving one on the same
backend, with the file backend's ratio beside it; and a whole-agent forget with its data
key destroyed.
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
from dreamkeeper.stores.forget import Forgetting, file_backend
from dreamkeeper.stores.longterm.memory_store import FileMemoryStore
from dreamkeeper.stores.longterm.records import NewEntry


def _codec_rate(codec: EncryptionCodec, payloads: list, rounds: int) -> float:
    start = time.perf_counter()
    for _ in range(rounds):
        codec.decode_sync(codec.encode_sync(payloads))
    return rounds * len(payloads) / (time.perf_counter() - start)


def bench_codec(count: int, data: Path, url: str | None = None) -> None:
    secret = os.urandom(32)
    key = PayloadKey(derived_key_id(secret), secret)
    plain = EncryptionCodec([key])
    per_agent = EncryptionCodec([key], PayloadKeys((key,), "bench", data_dir=data).agent_keys())
    on_database = None
    if url is not None:
        from dreamkeeper.stores.backends import agent_key_store

        keys = PayloadKeys((key,), "bench", data_dir=data, key_store=agent_key_store(url))
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
    forgetting = Forgetting(data, file_backend(data))
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


def bench_forget_postgres(entries: int, url: str, file_ratio: float) -> None:
    from dreamkeeper.stores.postgres.agent_keys import PostgresAgentKeyStore
    from dreamkeeper.stores.postgres.database import Database
    from dreamkeeper.stores.postgres.forget import PostgresForgetting, postgres_backend
    from dreamkeeper.stores.postgres.memory_store import PostgresMemoryStore

    db = Database(url)
    made = PostgresMemoryStore(db, "bench").create_many(
        NewEntry(content=f"Note {i}: the user's cousin Ilse {i} lives in Oslo.")
        for i in range(entries)
    )
    keys = PostgresAgentKeyStore(db, [("bench", os.urandom(32))])
    forgetting = PostgresForgetting(db, postgres_backend(db), history_keys=keys)
    archive_times, forget_times = [], []
    for i in range(5):
        keys.current("bench")
        start = time.perf_counter()
        PostgresMemoryStore(db, "bench").archive(made[2 * i].id, "bench")
        archive_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        receipt = forgetting.forget_entries("bench", [made[2 * i + 1].id])
        forget_times.append(time.perf_counter() - start)
        assert receipt.verified and receipt.history_keys_destroyed == 1
    base, mine = statistics.median(archive_times), statistics.median(forget_times)
    print(
        f"postgres: archive one of {entries} entries (fresh open)  {base * 1000:10.1f} ms  (baseline)"
    )
    print(
        f"postgres: forget one of {entries} entries, verified     {mine * 1000:10.1f} ms  "
        f"ratio {mine / base:.1f} (files: {file_ratio:.1f}; "
        f"{receipt.verification.files_scanned} rows scanned)"
    )
    keys.current("bench")
    start = time.perf_counter()
    receipt = forgetting.forget_agent("bench")
    whole = time.perf_counter() - start
    assert receipt.verified and receipt.history_keys_destroyed == 1
    print(
        f"postgres: forget the whole agent ({entries - 10} entries left), data key destroyed "
        f"{whole * 1000:8.1f} ms  ratio {whole / base:.1f} of one archive"
    )
    db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--payloads", type=int, default=None, help="20000 (postgres: 4000)")
    parser.add_argument("--entries", type=int, default=2_000)
    parser.add_argument("--backend", choices=["files", "postgres"], default="files")
    args = parser.parse_args()
    if args.backend == "files":
        with tempfile.TemporaryDirectory() as tmp:
            bench_codec(args.payloads or 20_000, Path(tmp))
        with tempfile.TemporaryDirectory() as tmp:
            bench_forget(args.entries, Path(tmp))
        return
    from postgres_backend import database_url

    with database_url() as url:
        with tempfile.TemporaryDirectory() as tmp:
            bench_codec(args.payloads or 4_000, Path(tmp), url)
        with tempfile.TemporaryDirectory() as tmp:
            file_ratio = bench_forget(args.entries, Path(tmp))
        bench_forget_postgres(args.entries, url, file_ratio)


if __name__ == "__main__":
    main()
