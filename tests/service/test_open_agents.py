"""Reads never create an agent, and serve keeps a bounded number of agents open: a read
token naming thousands of agents that do not exist gets the unknown-agent answer for each
and leaves no handle, no open store and no directory behind; agents that do exist are
kept in a least-recently-used set of DREAMKEEPER_SERVE_MAX_OPEN_AGENTS (counted here,
not timed)."""

from __future__ import annotations

import asyncio
import re

import httpx

from dreamkeeper.agent.client import MemoryClient
from dreamkeeper.core.errors import NotFound
from dreamkeeper.core.settings import ServiceSettings, StoreSettings
from dreamkeeper.policies.access import Access
from dreamkeeper.service.app import create_app
from dreamkeeper.service.metrics import ServiceMetrics
from dreamkeeper.service.state import ServiceState
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.files.tokens import FileTokenStore
from dreamkeeper.stores.tokens import issue

# Every read route and the read-only tools: (method, path under the agent, body).
READS = [
    ("POST", "context", {"session": "s1", "message": "where do I live?"}),
    ("POST", "search", {"query": "lives"}),
    ("GET", "archived", None),
    ("GET", "memories/0123456789ab", None),
    ("POST", "working/search", {"query": "plan"}),
    ("GET", "working/session/s1/plan", None),
    ("GET", "conversations/s1", None),
    ("GET", "dream", None),
    ("POST", "sessions/s1/tools/search_memory", {"arguments": {"query": "lives"}}),
    ("POST", "sessions/s1/tools/get_from_working_memory", {"arguments": {"key": "plan"}}),
]


def _serve(tmp_path, **service):
    memory = MemoryClient(None, StoreSettings(data_dir=tmp_path), "unused")  # type: ignore[arg-type]
    state = ServiceState(memory, ServiceSettings(**service), ServiceMetrics())
    return create_app(state), state, memory


async def _ask(app, secret: str, calls: list[tuple[str, str, object]]) -> list[httpx.Response]:
    headers = {"Authorization": f"Bearer {secret}"}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        return [await client.request(m, p, json=b, headers=headers) for m, p, b in calls]


def _open_stores(memory: MemoryClient) -> int:
    return len(memory._stores) + len(memory._working) + len(memory._conversations)


def test_reads_for_3000_agents_that_do_not_exist_open_and_create_nothing(tmp_path):
    app, state, memory = _serve(tmp_path)
    FileMemoryStore(tmp_path, "acme-real").create("Alice lives in Austin.")
    secret = issue(FileTokenStore(tmp_path), "readers", ["acme-*"], Access.READ)[1]
    agents = [f"acme-{n:04d}" for n in range(3_000)]
    calls = [
        (method, f"/v1/agents/{agent}/{rest}", body)
        for n, agent in enumerate(agents)
        for method, rest, body in [READS[n % len(READS)]]
    ]
    answers = asyncio.run(_ask(app, secret, calls))
    for (_, path, _), answer in zip(calls, answers, strict=True):
        agent = path.split("/")[3]
        assert answer.status_code == 404, (path, answer.text)
        assert answer.json()["detail"] == str(state.unknown_agent(agent))
        assert answer.json() == {
            "type": "about:blank",
            "title": "NotFound",
            "status": 404,
            "detail": str(NotFound(f"unknown agent {agent!r}: it has no store here yet")),
            "category": "NotFound",
        }
    assert state.open_agents == 0 and _open_stores(memory) == 0
    assert sorted(p.name for p in (tmp_path / "agents").iterdir()) == ["acme-real"]
    # The agent that exists still answers every read (GET /dream asks Temporal: not here).
    reads = [(m, f"/v1/agents/acme-real/{r}", b) for m, r, b in READS if r != "dream"]
    real = asyncio.run(_ask(app, secret, reads))
    assert all(a.status_code in (200, 404) for a in real)  # 404: no such entry, no such key
    assert not [a for a in real if "unknown agent" in a.text]
    assert state.open_agents == 1


def test_open_agents_are_a_bounded_least_recently_used_set(tmp_path):
    app, state, memory = _serve(tmp_path, max_open_agents=8)
    agents = [f"a{n:02d}" for n in range(40)]
    for agent in agents:
        FileMemoryStore(tmp_path, agent).create(f"{agent} lives in Austin.")
    secret = issue(FileTokenStore(tmp_path), "ops", [], Access.ADMIN)[1]
    first = asyncio.run(
        _ask(app, secret, [("POST", f"/v1/agents/{a}/search", {"query": "lives"}) for a in agents])
    )
    assert all(a.status_code == 200 and len(a.json()["hits"]) == 1 for a in first)
    assert state.open_agents == 8 and len(memory._stores) <= 8
    assert list(state._handles) == agents[-8:]
    # One of the oldest, asked again, is opened again and answers the same.
    again = asyncio.run(
        _ask(app, secret, [("POST", f"/v1/agents/{agents[0]}/search", {"query": "lives"})])
    )
    assert again[0].json() == first[0].json()
    assert state.open_agents == 8 and list(state._handles)[-1] == agents[0]
    assert agents[-8] not in state._handles


def test_a_write_creates_the_agent_and_reads_then_find_it(tmp_path):
    app, state, _ = _serve(tmp_path)
    secret = issue(FileTokenStore(tmp_path), "bot", ["b1"], Access.WRITE)[1]
    body = {"namespace": "session/s1", "key": "plan", "value": "ship on friday"}
    before = asyncio.run(
        _ask(app, secret, [("GET", "/v1/agents/b1/working/session/s1/plan", None)])
    )
    assert before[0].status_code == 404 and state.open_agents == 0
    saved = asyncio.run(_ask(app, secret, [("PUT", "/v1/agents/b1/working", body)]))
    assert saved[0].status_code == 200, saved[0].text
    found = asyncio.run(_ask(app, secret, [("GET", "/v1/agents/b1/working/session/s1/plan", None)]))
    assert found[0].status_code == 200 and found[0].json()["value"] == "ship on friday"


def test_a_metrics_scrape_reads_the_open_stores_and_opens_none(tmp_path):
    # One scrape used to open every agent's store: 43 s and 1 GB at 1,000 agents.
    app, state, memory = _serve(tmp_path, max_open_agents=8, metrics_agents=True)
    agents = [f"a{n:02d}" for n in range(40)]
    for n, agent in enumerate(agents):
        for k in range(n % 3 + 1):
            FileMemoryStore(tmp_path, agent).create(f"{agent} fact {k} about Austin.")
    secret = issue(FileTokenStore(tmp_path), "ops", [], Access.ADMIN)[1]
    asked = agents[5:8]
    asyncio.run(
        _ask(app, secret, [("POST", f"/v1/agents/{a}/search", {"query": "Austin"}) for a in asked])
    )
    [scrape] = asyncio.run(_ask(app, secret, [("GET", "/metrics", None)]))
    assert scrape.status_code == 200
    sized = dict(
        re.findall(
            r'^dreamkeeper_store_entries\{agent="(\w+)",state="live"\} (\S+)$', scrape.text, re.M
        )
    )
    assert sized == {a: f"{agents.index(a) % 3 + 1}.0" for a in asked}
    assert state.open_agents == 3 and len(memory._stores) == 3
