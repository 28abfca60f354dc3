"""The memory service's overhead, same run: search over HTTP against an in-process search of
the same store, and saves/s over HTTP against `MemoryClient` saves/s on the same worker.

    .venv/bin/python bench/serve.py [--size 10000] [--queries 300] [--saves 200]

A real Temporal dev server and a real `dreamkeeper serve` process (worker inside) on a
copy of bench/search.py's synthetic corpus. Searches alternate between the two paths,
query by query, so both see the same machine load; the HTTP client keeps its connection
open (as an agent would). Saves: sequential, then 8 at a time, first through HTTP, then
through a `MemoryClient` in this process on the same task queue (the same worker does the
work; the difference is the HTTP hop and the service).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
from search import build_corpus, queries
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from dreamkeeper.agent.client import MemoryClient
from dreamkeeper.client.attributes import SEARCH_ATTRIBUTES
from dreamkeeper.client.connection import connect
from dreamkeeper.core.settings import StoreSettings, TemporalSettings
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.search.query import search

BIN = Path(sys.executable).parent
AGENT = "bench"
LIMIT = 10


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3


def start_serve(address: str, data: Path, queue: str) -> tuple[subprocess.Popen, str]:
    port = _port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAMKEEPER_")}
    env.update(
        TEMPORAL_ADDRESS=address,
        DREAMKEEPER_DATA=str(data),
        DREAMKEEPER_TASK_QUEUE=queue,
        DREAMKEEPER_SERVE_PORT=str(port),
        DREAMKEEPER_EMBEDDING_BACKEND="none",
    )
    log = open(data / "serve.log", "wb")  # noqa: SIM115 - lives with the process
    proc = subprocess.Popen([str(BIN / "dreamkeeper"), "serve"], env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit((data / "serve.log").read_text())
        try:
            if httpx.get(f"{url}/v1/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("serve did not start")


class RawClient:
    """One keep-alive HTTP/1.1 connection through the standard library's http.client: a
    thin client, so the numbers are the service's cost more than a Python client's."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=120)

    def post(self, path: str, body: dict) -> dict:
        data = json.dumps(body).encode()
        self.conn.request("POST", path, data, {"Content-Type": "application/json"})
        answer = self.conn.getresponse()
        return json.loads(answer.read())

    def get(self, path: str) -> bytes:
        self.conn.request("GET", path)
        return self.conn.getresponse().read()


def _served_search(raw: RawClient) -> tuple[float, float]:
    """(sum, count) of serve's own search histogram."""
    text = raw.get("/metrics").decode()
    values = {}
    for line in text.splitlines():
        if line.startswith(("dreamkeeper_search_seconds_sum", "dreamkeeper_search_seconds_count")):
            name, value = line.split(" ")
            values[name] = float(value)
    return values["dreamkeeper_search_seconds_sum"], values["dreamkeeper_search_seconds_count"]


def bench_search(url: str, data: Path, qs: list[str]) -> None:
    store = FileMemoryStore(data, AGENT)
    store.index()
    path = f"/v1/agents/{AGENT}/search"
    raw = RawClient(url)
    local: list[float] = []
    remote: list[float] = []
    via_httpx: list[float] = []
    floor: list[float] = []
    same = 0
    with httpx.Client(base_url=url, timeout=120) as http:
        for q in qs[:20]:  # warm-up: both indexes loaded, the connections open
            search(store, q, limit=LIMIT)
            raw.post(path, {"query": q, "limit": LIMIT})
            http.post(path, json={"query": q, "limit": LIMIT})
        before = _served_search(raw)
        for q in qs:
            t = time.perf_counter()
            hits = search(store, q, limit=LIMIT)
            local.append(time.perf_counter() - t)
            t = time.perf_counter()
            answer = raw.post(path, {"query": q, "limit": LIMIT})
            remote.append(time.perf_counter() - t)
            t = time.perf_counter()
            http.post(path, json={"query": q, "limit": LIMIT})
            via_httpx.append(time.perf_counter() - t)
            t = time.perf_counter()
            raw.get("/v1/health")
            floor.append(time.perf_counter() - t)
            ids = [h["entry"]["id"] for h in answer["hits"]]
            same += ids == [h.entry.id for h in hits]
        after = _served_search(raw)
    inside = (after[0] - before[0]) / max(1.0, after[1] - before[1]) * 1e3
    p50_local, p50_http = _pct(local, 0.5), _pct(remote, 0.5)
    paired = statistics.median(r - lo for r, lo in zip(remote, local, strict=True)) * 1e3
    print(f"search, {len(store.entries())} entries, {len(qs)} queries, top {LIMIT} (interleaved):")
    print(f"  in-process           p50 {p50_local:7.2f} ms  p99 {_pct(local, 0.99):7.2f} ms")
    print(f"  HTTP (http.client)   p50 {p50_http:7.2f} ms  p99 {_pct(remote, 0.99):7.2f} ms")
    print(f"  HTTP (httpx)         p50 {_pct(via_httpx, 0.5):7.2f} ms")
    print(f"  GET /v1/health       p50 {_pct(floor, 0.5):7.2f} ms (the HTTP round trip alone)")
    print(f"  search inside serve  mean {inside:6.2f} ms (its dreamkeeper_search_seconds)")
    print(
        f"  overhead             p50 {p50_http - p50_local:+7.2f} ms (median per-query "
        f"difference {paired:+.2f} ms; target <= 2 ms); same top-{LIMIT} for "
        f"{same}/{len(qs)} queries"
    )


async def bench_saves(url: str, address: str, data: Path, queue: str, n: int) -> None:
    temporal = TemporalSettings(address=address, task_queue=queue)
    client = await connect(temporal, data)
    memory = MemoryClient(client, StoreSettings(data_dir=data), queue)

    def text(i: int) -> str:
        return f"save benchmark {i} {uuid.uuid4().hex} {uuid.uuid4().hex[:6]}"

    async with httpx.AsyncClient(base_url=url, timeout=60) as http:

        async def over_http(i: int) -> None:
            answer = await http.post(f"/v1/agents/{AGENT}-s/memories", json={"content": text(i)})
            answer.raise_for_status()

        async def in_process(i: int) -> None:
            await memory.save_memory(f"{AGENT}-s", text(i))

        await over_http(-1)
        await in_process(-1)
        print(f"saves ({n} each, same worker):")
        for concurrency in (1, 8):
            rates = {}
            for name, one in (("HTTP", over_http), ("MemoryClient", in_process)):
                started = time.perf_counter()
                for base in range(0, n, concurrency):
                    await asyncio.gather(*(one(base + k) for k in range(concurrency)))
                rates[name] = n / (time.perf_counter() - started)
            print(
                f"  {concurrency} at a time: HTTP {rates['HTTP']:6.1f}/s, MemoryClient "
                f"{rates['MemoryClient']:6.1f}/s (HTTP/MemoryClient "
                f"{rates['HTTP'] / rates['MemoryClient']:.2f})"
            )


async def main(size: int, nq: int, saves: int) -> None:
    corpus = build_corpus(size)
    data = Path(tempfile.mkdtemp(prefix="dk-bench-serve-"))
    shutil.copytree(corpus / "agents", data / "agents")
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(BIN / "temporal"),
        data_converter=pydantic_data_converter,
        search_attributes=SEARCH_ATTRIBUTES,
        dev_server_extra_args=["--headless"],
    )
    address = env.client.service_client.config.target_host
    queue = f"bench-serve-{uuid.uuid4().hex[:6]}"
    proc, url = start_serve(address, data, queue)
    try:
        bench_search(url, data, queries(nq))
        if saves > 0:
            await bench_saves(url, address, data, queue, saves)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        await env.shutdown()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--saves", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(main(args.size, args.queries, args.saves))
