"""What a caller without the right token meets: the API page and the OpenAPI schema
(no data) open without a token unless the operator turns that off, and the remote
client's refusals say what happened without telling an outsider more than the server
does."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from dreamkeeper.agent.client import MemoryClient
from dreamkeeper.agent.remote import RemoteMemoryClient
from dreamkeeper.core.errors import InvalidInput, NotFound
from dreamkeeper.core.settings import ServiceSettings, StoreSettings
from dreamkeeper.policies.access import Access
from dreamkeeper.service.app import create_app
from dreamkeeper.service.metrics import ServiceMetrics
from dreamkeeper.service.state import ServiceState
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.files.tokens import FileTokenStore
from dreamkeeper.stores.tokens import issue


def _app(tmp_path, **service):
    memory = MemoryClient(None, StoreSettings(data_dir=tmp_path), "unused")  # type: ignore[arg-type]
    return create_app(ServiceState(memory, ServiceSettings(**service), ServiceMetrics()))


def _get(app, path: str, token: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.get(path, headers=headers)

    return asyncio.run(go())


@pytest.mark.parametrize("guarded_by", ["shared", "issued"])
def test_the_docs_and_the_schema_open_without_a_token_unless_turned_off(tmp_path, guarded_by):
    if guarded_by == "issued":
        issue(FileTokenStore(tmp_path), "bot", ["a1"], Access.READ)
    shared = "s3cret" if guarded_by == "shared" else None
    app = _app(tmp_path, token=shared)
    page, schema = _get(app, "/docs"), _get(app, "/openapi.json")
    assert page.status_code == 200 and "openapi.json" in page.text
    assert schema.status_code == 200
    search = schema.json()["paths"]["/v1/agents/{agent_id}/search"]["post"]
    assert search["x-dreamkeeper-access"] == "read"
    assert _get(app, "/v1/agents").status_code == 401  # data still needs a token
    closed = _app(tmp_path, token=shared, public_docs=False)
    assert _get(closed, "/docs").status_code == _get(closed, "/openapi.json").status_code == 401
    if shared:
        assert _get(closed, "/openapi.json", shared).status_code == 200


def _remote(app, token: str | None) -> RemoteMemoryClient:
    """The remote client against the app in process (a sync transport around ASGI)."""

    def answer(request: httpx.Request) -> httpx.Response:
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                got = await client.request(
                    request.method,
                    request.url.path,
                    headers=request.headers,
                    content=request.content,
                )
                return httpx.Response(got.status_code, headers=got.headers, content=got.content)

        return asyncio.run(go())

    return RemoteMemoryClient("http://t", token=token, transport=httpx.MockTransport(answer))


def test_the_remote_client_says_whether_its_token_was_missing_or_refused(tmp_path):
    FileMemoryStore(tmp_path, "beta-b").create("Bob lives in Boston.")
    secret = issue(FileTokenStore(tmp_path), "bot", ["acme-*"], Access.READ)[1]
    app = _app(tmp_path)
    with pytest.raises(InvalidInput, match="needs a token: set DREAMKEEPER_TOKEN") as missing:
        _remote(app, None).search_memory("acme-a", "x")
    with pytest.raises(InvalidInput, match="refused this client's token") as refused:
        _remote(app, "dkt_000000000000_" + "x" * 43).search_memory("acme-a", "x")
    assert "set DREAMKEEPER_SERVE_TOKEN for this client" not in str(missing.value)
    assert "DREAMKEEPER_SERVE_TOKEN" in str(refused.value)
    # Not covered and not there: the same words, which name both possibilities.
    mine = _remote(app, secret)
    with pytest.raises(NotFound) as theirs:
        mine.search_memory("beta-b", "lives")
    with pytest.raises(NotFound) as nobodys:
        mine.search_memory("beta-z", "lives")
    assert "or this client's token does not reach it" in str(theirs.value)
    assert str(theirs.value).replace("beta-b", "beta-z") == str(nobodys.value)
