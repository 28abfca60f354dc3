"""The search fast path and the documented FastAPI route answer alike: same hits, same
problems, the same scope decisions (in-process ASGI, no server needed for reads)."""

from __future__ import annotations

import httpx

from dreamkeeper.agent.client import MemoryClient
from dreamkeeper.core.settings import ServiceSettings, StoreSettings
from dreamkeeper.policies.access import OPEN, Access, Grant
from dreamkeeper.service.app import create_app
from dreamkeeper.service.guard import GRANT_KEY
from dreamkeeper.service.metrics import ServiceMetrics
from dreamkeeper.service.state import ServiceState
from dreamkeeper.stores.files.memory_store import FileMemoryStore


def _apps(tmp_path, **service):
    store = FileMemoryStore(tmp_path, "a1")
    for text in ("alpha beta", "beta gamma", "gamma delta alpha"):
        store.create(text, category="notes", tags=["t"])
    memory = MemoryClient(None, StoreSettings(data_dir=tmp_path), "unused")  # type: ignore[arg-type]
    state = ServiceState(memory, ServiceSettings(**service), ServiceMetrics())
    guard = create_app(state)
    return guard, guard.app, guard.app.app  # the whole app, the fast path, FastAPI behind it


def _as(app, grant: Grant | None):
    """`app` called as the guard hands a request on: with the caller's grant."""

    async def granted(scope, receive, send):
        if grant is not None:
            scope[GRANT_KEY] = grant
        await app(scope, receive, send)

    return granted


async def _post(app, path: str, body, headers=None) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        kwargs = {"content": body} if isinstance(body, bytes) else {"json": body}
        return await client.post(path, headers=headers or {}, **kwargs)


async def test_fast_path_and_route_give_the_same_answers(tmp_path):
    _, fast_path, framework = _apps(tmp_path)
    fast, routed = _as(fast_path, OPEN), _as(framework, OPEN)
    cases = [
        ("/v1/agents/a1/search", {"query": "alpha"}),
        ("/v1/agents/a1/search", {"query": None, "limit": 2}),
        ("/v1/agents/a1/search", {"query": "beta", "category": "notes", "tags": ["t"]}),
        ("/v1/agents/a1/search", {"query": "x", "limit": 0}),
        ("/v1/agents/a1/search", {"query": "x", "nope": 1}),
        ("/v1/agents/a1/search", b"{not json"),
        ("/v1/agents/a1/search", {"query": "x", "created_after": "yesterday"}),
        ("/v1/agents/ghost/search", {"query": "x"}),
        ("/v1/agents/bad agent/search", {"query": "x"}),
    ]
    for path, body in cases:
        a, b = await _post(fast, path, body), await _post(routed, path, body)
        assert (a.status_code, a.json()) == (b.status_code, b.json()), (path, body)
        assert a.headers["content-type"].startswith(b.headers["content-type"].split(";")[0])
    hits = (await _post(fast, "/v1/agents/a1/search", {"query": "alpha"})).json()["hits"]
    assert len(hits) == 2


async def test_fast_path_and_route_decide_scope_alike(tmp_path):
    """Both check the caller's grant on the agent id they parsed: out of reach is the
    unknown-agent answer, no grant at all (a request that did not pass the guard) too."""
    _, fast_path, framework = _apps(tmp_path)
    grants = [
        None,
        Grant("t1", Access.READ, ("a1",)),
        Grant("t2", Access.WRITE, ("b-*",)),
        Grant("t3", Access.READ, ("a",)),
    ]
    for grant in grants:
        for agent in ("a1", "ghost"):
            path, body = f"/v1/agents/{agent}/search", {"query": "alpha"}
            a = await _post(_as(fast_path, grant), path, body)
            b = await _post(_as(framework, grant), path, body)
            assert (a.status_code, a.json()) == (b.status_code, b.json()), (grant, agent)
            reaches = grant is not None and grant.covers(agent) and agent == "a1"
            assert (a.status_code == 200) is reaches, (grant, agent, a.text)


async def test_the_fast_path_is_behind_the_guard(tmp_path):
    fast, _, _ = _apps(tmp_path, token="t0ken", max_body_bytes=1_024)
    refused = await _post(fast, "/v1/agents/a1/search", {"query": "alpha"})
    assert refused.status_code == 401
    auth = {"Authorization": "Bearer t0ken"}
    assert (await _post(fast, "/v1/agents/a1/search", {"query": "alpha"}, auth)).status_code == 200
    big = await _post(fast, "/v1/agents/a1/search", {"query": "x" * 2_000}, auth)
    assert big.status_code == 413
