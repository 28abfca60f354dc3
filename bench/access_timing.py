"""Does the answer's timing tell whether an agent exists? A token scoped to agent A asks,
on a real `dreamkeeper serve`, for agent B (it exists, with a store of --size entries:
"not yours") and for agent Z (no store anywhere: "does not exist"), through a read route
and the search fast path. Requests alternate pair by pair on one keep-alive connection,
so both see the same machine load; the baseline is "does not exist", measured in the
same run, and the ratio not-yours / does-not-exist should be 1.00 within the noise.
For scale, the same token's request for its own agent A (a real read) is shown too.

    .venv/bin/python bench/access_timing.py [--size 2000] [--rounds 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from serve import BIN, start_serve
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from dreamkeeper.client.attributes import SEARCH_ATTRIBUTES
from dreamkeeper.policies.access import Access
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.files.tokens import FileTokenStore
from dreamkeeper.stores.tokens import issue

MINE, THEIRS, GHOST = "acme-a", "beta-b", "beta-z"  # same length: same-size answers


def _seed(data: Path, size: int) -> str:
    for agent in (MINE, THEIRS):
        store = FileMemoryStore(data, agent)
        for n in range(size):
            store.create(f"Fact {n} about project {n % 97} and person {n % 31}.")
    return issue(FileTokenStore(data), "bench", [MINE], Access.WRITE)[1]


def _time(conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None, token: str):
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    started = time.perf_counter()
    conn.request(method, path, body, headers)
    answer = conn.getresponse()
    payload = answer.read()
    return time.perf_counter() - started, answer.status, payload


def _row(name: str, values: list[float], base: list[float]) -> str:
    med, p90 = statistics.median(values), sorted(values)[int(0.9 * len(values))]
    ratio = med / statistics.median(base)
    return f"{name:38} median {med * 1e6:8.1f} µs  p90 {p90 * 1e6:8.1f} µs  ratio {ratio:5.2f}"


def bench(url: str, token: str, rounds: int) -> None:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    search = json.dumps({"query": "project person"}).encode()
    routes = [("GET", "/v1/agents/{a}/archived", None), ("POST", "/v1/agents/{a}/search", search)]
    for method, template, body in routes:
        got: dict[str, list[float]] = {MINE: [], THEIRS: [], GHOST: []}
        answers: dict[str, set[bytes]] = {THEIRS: set(), GHOST: set()}
        for n in range(rounds + 50):
            order = (THEIRS, GHOST, MINE) if n % 2 else (GHOST, THEIRS, MINE)
            for agent in order:
                took, status, payload = _time(conn, method, template.format(a=agent), body, token)
                if n >= 50:  # warm-up left out
                    got[agent].append(took)
                if agent != MINE:
                    assert status == 404, (status, payload)
                    answers[agent].add(payload.replace(agent.encode(), b"<agent>"))
        same = answers[THEIRS] == answers[GHOST] and len(answers[GHOST]) == 1
        print(f"{method} {template}  (answers byte-identical: {same})")
        print(_row("does not exist (baseline)", got[GHOST], got[GHOST]))
        print(_row("not yours (exists)", got[THEIRS], got[GHOST]))
        print(_row("yours (a real read, for scale)", got[MINE], got[GHOST]))


async def main(size: int, rounds: int) -> None:
    data = Path(tempfile.mkdtemp(prefix="dk-bench-access-"))
    token = _seed(data, size)
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(BIN / "temporal"),
        data_converter=pydantic_data_converter,
        search_attributes=SEARCH_ATTRIBUTES,
        dev_server_extra_args=["--headless"],
    )
    queue = f"bench-access-{uuid.uuid4().hex[:6]}"
    proc, url = start_serve(env.client.service_client.config.target_host, data, queue)
    try:
        bench(url, token, rounds)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        await env.shutdown()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=2_000)
    args = parser.parse_args()
    asyncio.run(main(args.size, args.rounds))
