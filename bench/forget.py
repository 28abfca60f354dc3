"""What crypto-shredding and forgetting cost.

1. The payload codec: sealing and opening a save's payload with the agent's data key
   (the agent found in the payload, the key file stat'ed per use) against the payload
   key alone (the baseline), in the same run.
2. `forget` of one entry in a store of N entries (the receipt's verification reads
   every file of the agent) against archiving one entry (the baseline), same store size.

    .venv/bin/python bench/forget.py [--payloads 20000] [--entries 2000]
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


def bench_codec(count: int, data: Path) -> None:
    secret = os.urandom(32)
    key = PayloadKey(derived_key_id(secret), secret)
    plain = EncryptionCodec([key])
    per_agent = EncryptionCodec([key], PayloadKeys((key,), "bench", data_dir=data).agent_keys())
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


def bench_forget(entries: int, data: Path) -> None:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--payloads", type=int, default=20_000)
    parser.add_argument("--entries", type=int, default=2_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bench_codec(args.payloads, Path(tmp))
    with tempfile.TemporaryDirectory() as tmp:
        bench_forget(args.entries, Path(tmp))


if __name__ == "__main__":
    main()
