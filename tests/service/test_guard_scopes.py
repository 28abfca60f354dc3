"""The guard and the token store without a server: tokens hashed at rest, verified in
constant time against a salted hash, revocation at once, the shared token an admin, and
a request for an agent outside the token's reach answered before anything behind the
guard runs — so whether the agent exists cannot change the answer or its timing. What a
route needs beyond reach (write, admin, a tool's) each route checks itself:
tests/service/test_scope_fail_closed.py."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dreamkeeper.core.errors import InvalidInput, NotFound
from dreamkeeper.policies.access import Access
from dreamkeeper.service.guard import Guard, grant_of
from dreamkeeper.stores.files.tokens import FileTokenStore
from dreamkeeper.stores.tokens import issue, revoke, verify

SHARED = "shared-secret"


def unknown(agent_id: str) -> NotFound:
    return NotFound(f"unknown agent {agent_id!r}: it has no store here yet")


class Behind:
    """What sits behind the guard: records every request that reached it."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        grant = grant_of(scope)
        self.seen.append((scope["path"], grant.token_id if grant else "-"))
        body = json.dumps({"reached": True}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})


def _call(guard: Guard, method: str, path: str, token: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=guard)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.request(method, path, headers=headers, json={})

    return asyncio.run(go())


@pytest.fixture
def tokens(tmp_path) -> FileTokenStore:
    return FileTokenStore(tmp_path)


def _guard(tokens: FileTokenStore, behind: Behind, *, shared: str | None = SHARED) -> Guard:
    return Guard(behind, token=shared, max_body_bytes=10_000, tokens=tokens, unknown_agent=unknown)


def test_only_a_salted_hash_is_stored_and_the_secret_verifies(tokens, tmp_path):
    record, secret = issue(tokens, "bot", ["acme-*"], Access.READ)
    raw = (tmp_path / "access" / "tokens.json").read_text()
    assert secret.split("_", 2)[2] not in raw and record.hash in raw and record.salt in raw
    assert (tmp_path / "access" / "tokens.json").stat().st_mode & 0o077 == 0
    grant = verify(tokens, secret)
    assert grant is not None and grant.agents == ("acme-*",) and grant.access is Access.READ
    other, _ = issue(tokens, "other", ["b"], Access.WRITE)
    # The same secret under another id, a changed secret, garbage: nothing.
    assert verify(tokens, secret.replace(record.id, other.id)) is None
    assert verify(tokens, secret[:-1] + ("A" if secret[-1] != "A" else "B")) is None
    assert verify(tokens, "dkt_") is None and verify(tokens, SHARED) is None


def test_revoking_takes_effect_on_the_next_request_and_keeps_the_server_closed(tokens):
    behind = Behind()
    record, secret = issue(tokens, "bot", ["a1"], Access.WRITE)
    guard = _guard(tokens, behind, shared=None)
    assert _call(guard, "GET", "/v1/agents/a1/archived", secret).status_code == 200
    revoke(tokens, record.id)
    assert _call(guard, "GET", "/v1/agents/a1/archived", secret).status_code == 401
    # No shared token and every issued token revoked: still closed, not open.
    assert _call(guard, "GET", "/v1/agents/a1/archived", None).status_code == 401
    assert behind.seen == [("/v1/agents/a1/archived", record.id)]


def test_with_no_token_anywhere_the_server_is_open_as_before(tokens):
    behind = Behind()
    assert _call(_guard(tokens, behind, shared=None), "GET", "/metrics", None).status_code == 200
    assert behind.seen == [("/metrics", "open")]


def test_the_shared_token_is_an_admin(tokens):
    behind = Behind()
    guard = _guard(tokens, behind)
    for path in ("/metrics", "/v1/agents/x1/dream/pending", "/v1/agents/zz/archived"):
        assert _call(guard, "GET", path, SHARED).status_code == 200
    assert {who for _, who in behind.seen} == {"shared"}


agent_ids = st.from_regex(r"[a-z][a-z0-9\-]{0,20}", fullmatch=True)
routes = st.sampled_from(
    [
        ("POST", "search"),
        ("GET", "archived"),
        ("GET", "memories/0123456789ab"),
        ("POST", "memories"),
        ("DELETE", "memories/0123456789ab"),
        ("POST", "dream"),
        ("GET", "dream/pending"),
        ("PUT", "working"),
        ("GET", "working/session/s1/k"),
        ("POST", "sessions/s1/tools/save_memory"),
        ("POST", "sessions/s1/tools/search_memory"),
        ("GET", "conversations/s1"),
    ]
)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(agent=agent_ids, route=routes)
def test_out_of_reach_is_answered_before_anything_behind_the_guard_runs(tokens, agent, route):
    """The refusal depends on nothing but the token and the id: the request never gets
    to a route, a store or a directory listing, so an agent that exists and one that does
    not take the same path and get the same bytes."""
    if agent.startswith("acme-"):
        return
    if not tokens.issued():
        issue(tokens, "acme", ["acme-*"], Access.WRITE)
    secret = issue(tokens, "t", ["acme-*"], Access.WRITE)[1]
    behind = Behind()
    method, rest = route
    answer = _call(_guard(tokens, behind), method, f"/v1/agents/{agent}/{rest}", secret)
    assert behind.seen == []
    assert answer.status_code == 404
    assert answer.json()["detail"] == str(unknown(agent))
    assert answer.headers["content-type"] == "application/problem+json"


def test_metrics_needs_an_admin_compared_exactly(tokens):
    behind = Behind()
    reader = issue(tokens, "r", ["acme-*"], Access.READ)[1]
    guard = _guard(tokens, behind)
    assert _call(guard, "GET", "/metrics", reader).status_code == 403
    for bent in ("/metrics%0A", "/metrics%0D%0A", "/metrics/", "//metrics", "/metrics%00"):
        assert _call(guard, "GET", bent, reader).status_code == 404, bent
    assert behind.seen == []
    assert _call(guard, "GET", "/metrics", SHARED).status_code == 200


@pytest.mark.parametrize("pattern", ["", "../a", "a/b", "**", "a*b", "*a", "x" * 65])
def test_bad_agent_patterns_are_refused(tokens, pattern):
    with pytest.raises(InvalidInput):
        issue(tokens, "bad", [pattern], Access.READ)
    assert not tokens.issued()
