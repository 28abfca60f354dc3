"""The remote client's handle is `AgentHandle`, as the local one: the same typed
keywords, sent as the service's request bodies; the dream calls the service has no
route for refused up front, naming the call and what it needs (no request is made)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import httpx
import pytest

from dreamkeeper.agent.api import LocalClientRequired
from dreamkeeper.agent.remote import RemoteMemoryClient
from dreamkeeper.core.dream_plan import DreamPlan
from dreamkeeper.core.errors import InvalidInput


@pytest.fixture
def sent() -> list[httpx.Request]:
    return []


@pytest.fixture
def remote(sent) -> RemoteMemoryClient:
    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"hits": []})

    return RemoteMemoryClient("http://memory.test", transport=httpx.MockTransport(answer))


def test_search_sends_the_filters_given_as_the_services_body(remote, sent):
    me = remote.agent("a1")
    assert (
        me.search(
            "chicago",
            category="user",
            created_after=datetime(2026, 1, 2, tzinfo=UTC),
            include_archived=True,
            limit=5,
        )
        == []
    )
    [request] = sent
    assert request.url.path == "/v1/agents/a1/search"
    assert json.loads(request.content) == {
        "query": "chicago",
        "category": "user",
        "created_after": "2026-01-02T00:00:00+00:00",
        "include_archived": True,
        "limit": 5,
    }


async def test_a_misspelt_option_is_refused_before_any_request(remote, sent):
    me = remote.agent("a1")
    with pytest.raises(InvalidInput, match="unknown option 'catgory'"):
        me.search("chicago", catgory="user")  # type: ignore[call-arg]
    with pytest.raises(InvalidInput, match="unknown option 'importanse'"):
        await me.save("fact", importanse=0.9)  # type: ignore[call-arg]
    assert sent == []


async def test_dream_calls_without_a_route_need_a_local_client(remote, sent):
    me = remote.agent("a1")
    plan = DreamPlan(agent_id="a1", as_of=datetime(2026, 1, 1, tzinfo=UTC))
    for call, expected in (
        (me.dream(dry_run=True), "dream(dry_run=True)"),
        (me.apply_plan(plan), "apply_plan(plan)"),
        (me.undo_dream("run-1"), "undo_dream(run_id)"),
    ):
        with pytest.raises(LocalClientRequired) as raised:
            await call
        assert str(raised.value).startswith(f"{expected} needs a local MemoryClient")
        assert "http://memory.test" in str(raised.value)
        assert isinstance(raised.value, InvalidInput)  # exit 2, like any refused input
    assert sent == []
