"""The search fast path and the documented FastAPI route answer alike: same hits, same
problems (in-process ASGI, no server needed for reads)."""

from __future__ import annotations

import httpx

from dreamkeeper.agent.client import MemoryClient
from dreamkeeper.core.settings import ServiceSettings, StoreSettings
from dreamkeeper.service.app import create_app
from dreamkeeper.service.metrics import ServiceMetrics
from dreamkeeper.service.state import ServiceState
from dreamkeeper.stores.longterm.memory_store import FileMemoryStore


def _apps(tmp_path, **service):
    store = FileMemoryStore(tmp_path, "a1")
    for text in ("alpha beta", "beta gamma", "gamma delta alpha"):
        store.create(text, category="notes", tags=["t"])
    memory = MemoryClient(None, StoreSettings(data_dir=tmp_path), "unused")  # type: ignore[arg-type]
    state = ServiceState(memory, ServiceSettings(**service), ServiceMetrics())
    guard = create_app(state)
    return guard, guard.app.app  # the whole app, and FastAPI behind the fast path


async def _post(app, path: str, body, headers=None) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        kwargs = {"content": body} if isinstance(body, bytes) else {"json": body}
        return await client.post(path, headers=headers or {}, **kwargs)


async def test_fast_path_and_route_give_the_same_answers(tmp_path):
    fast, routed = _apps(tmp_path)
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


async def test_the_fast_path_is_behind_the_guard(tmp_path):
    fast, _ = _apps(tmp_path, token="t0ken", max_body_bytes=1_024)
    refused = await _post(fast, "/v1/agents/a1/search", {"query": "alpha"})
    assert refused.status_code == 401
    auth = {"Authorization": "Bearer t0ken"}
    assert (await _post(fast, "/v1/agents/a1/search", {"query": "alpha"}, auth)).status_code == 200
    big = await _post(fast, "/v1/agents/a1/search", {"query": "x" * 2_000}, auth)
    assert big.status_code == 413
