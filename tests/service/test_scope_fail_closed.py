"""Authorization fails closed, on the whole app in process (ASGI, the bytes a server
hands on): every route of the routing table, with every kind of token, for the caller's
own agent, another agent that exists and one that does not, with every suffix and
insertion that once slipped past the guard (`%0A` made `POST /v1/agents/b1/search%0A`
answer b1's memories to a token for another agent), and with arbitrary bytes generated
by hypothesis.

The oracle: every route body and every store handle the service opens is recorded (the
route's endpoint and `ServiceState.agent` / `tools` / `answers_for` stop the request
right there), so "no route body ever runs for an agent out of the token's reach" is
checked directly, and the data directory is hashed before and after: nothing changes."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.routing import Route

from dreamkeeper.agent.client import MemoryClient
from dreamkeeper.core.errors import NotFound
from dreamkeeper.core.settings import ServiceSettings, StoreSettings
from dreamkeeper.policies.access import READ_ONLY_TOOLS, Access, Grant
from dreamkeeper.service.access import check_route_access
from dreamkeeper.service.app import create_app
from dreamkeeper.service.guard import Guard, grant_of
from dreamkeeper.service.metrics import ServiceMetrics
from dreamkeeper.service.state import ServiceState, state_of
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.files.tokens import FileTokenStore
from dreamkeeper.stores.tokens import issue, revoke

A, B, GHOST = "acme-a", "beta-b", "beta-z"  # B and GHOST: same length, comparable bytes
ENTRY = {A: "aaaaaaaaaaa1", B: "bbbbbbbbbbb1", GHOST: "bbbbbbbbbbb1"}
SHARED = "shared-secret-token"

# What each route needs, written down here and not read from the app: a route the table
# does not know fails the test until someone decides what it needs.
NEEDS = {
    ("POST", "/v1/agents/{agent_id}/search"): "read",
    ("GET", "/v1/agents/{agent_id}/memories/{entry_id}"): "read",
    ("GET", "/v1/agents/{agent_id}/archived"): "read",
    ("POST", "/v1/agents/{agent_id}/memories"): "write",
    ("DELETE", "/v1/agents/{agent_id}/memories/{entry_id}"): "write",
    ("POST", "/v1/agents/{agent_id}/memories/{entry_id}/restore"): "write",
    ("PUT", "/v1/agents/{agent_id}/memories/{entry_id}/importance"): "write",
    ("POST", "/v1/agents/{agent_id}/forget"): "write",
    ("POST", "/v1/agents/{agent_id}/dream"): "write",
    ("GET", "/v1/agents/{agent_id}/dream"): "read",
    ("GET", "/v1/agents/{agent_id}/dream/pending"): "admin",
    ("POST", "/v1/agents/{agent_id}/dream/approve"): "admin",
    ("POST", "/v1/agents/{agent_id}/dream/reject"): "admin",
    ("POST", "/v1/agents/{agent_id}/context"): "read",
    ("PUT", "/v1/agents/{agent_id}/working"): "write",
    ("GET", "/v1/agents/{agent_id}/working/{key:path}"): "read",
    ("POST", "/v1/agents/{agent_id}/working/search"): "read",
    ("POST", "/v1/agents/{agent_id}/conversations/{session}/turns"): "write",
    ("GET", "/v1/agents/{agent_id}/conversations/{session}"): "read",
    ("GET", "/v1/agents/{agent_id}/tools"): "read",
    ("POST", "/v1/agents/{agent_id}/sessions/{session}/tools/{name}"): "tool",
    ("GET", "/v1/health"): "none",
    ("GET", "/v1/ready"): "none",
    ("GET", "/v1/agents"): "any",
    ("GET", "/docs"): "none",
    ("GET", "/openapi.json"): "none",
    ("GET", "/metrics"): "admin",
}
# A body that would do harm if the route ran for the wrong caller.
BODIES: dict[str, Any] = {
    "search": {"query": "lives"},
    "memories": {"content": "An injected fact."},
    "restore": {"force": True},
    "importance": {"importance": 0.99},
    "forget": {"wholeAgent": True},
    "approve": {"keys": []},
    "reject": {"keys": []},
    "context": {"session": "s1", "message": "where do I live?"},
    "working": {"namespace": "session/s1", "key": "k", "value": "v"},
    "turns": {"role": "user", "content": "hello"},
    "tools/save_memory": {"arguments": {"content": "An injected fact."}},
    "tools/search_memory": {"arguments": {"query": "lives"}},
}
SUFFIXES = ["%0A", "%0D", "%0D%0A", "%09", "%00", "//", "%2F", "/"]
TOKEN_KINDS = ["none", "garbage", "revoked", "write-a", "read-acme", "admin", "shared"]


@dataclass(frozen=True)
class Call:
    method: str
    route: str  # the route's path format
    path: str  # for the agent placeholder {agent}
    body: Any
    need: str  # read, write, admin, any, none; a tool call: its tool's

    def for_agent(self, agent: str) -> str:
        return self.path.replace("{agent}", agent).replace("{entry}", ENTRY[agent])


def routing_table(routes: list[Any]) -> list[Any]:
    """Every route, those of the included routers too (FastAPI keeps each included router
    as one entry of the app's table)."""
    found = []
    for route in routes:
        included = getattr(route, "original_router", None)
        found.extend(routing_table(included.routes) if included is not None else [route])
    return found


def _calls(framework: FastAPI) -> list[Call]:
    """Every route of the app's routing table, with concrete parameters and a body."""
    calls: list[Call] = []
    seen = set()
    for route in routing_table(framework.routes):
        if not isinstance(route, APIRoute | Route) or route.path == "/mcp":
            continue  # MCP: its tools, over a real session, are tests/service/test_isolation.py's
        for method in sorted((route.methods or set()) - {"HEAD"}):
            key = (method, route.path)
            seen.add(key)
            assert key in NEEDS, f"{key} is a route the table does not know: add what it needs"
            path = (
                route.path.replace("{agent_id}", "{agent}")
                .replace("{entry_id}", "{entry}")
                .replace("{session}", "s1")
                .replace("{key:path}", "session/s1/k")
            )
            last = route.path.rstrip("/").rsplit("/", 1)[-1]
            if "{name}" in path:
                for tool in ("save_memory", "search_memory"):
                    need = "read" if tool in READ_ONLY_TOOLS else "write"
                    calls.append(
                        Call(method, route.path, path.replace("{name}", tool),
                             BODIES[f"tools/{tool}"], need)
                    )  # fmt: skip
                continue
            body = BODIES.get(last) if method in ("POST", "PUT") else None
            if body is None and method in ("POST", "PUT") and last != "dream":
                raise AssertionError(f"{key}: no sample body")
            calls.append(Call(method, route.path, path, body, NEEDS[key]))
    assert seen == set(NEEDS), set(NEEDS) - seen
    return calls


class Reached(Exception):  # noqa: N818 - a marker, not an error
    """A route body (or a store handle) was reached: recorded, then stopped."""


@dataclass
class World:
    data: Path
    app: Guard
    state: ServiceState
    secrets: dict[str, str | None]
    grants: dict[str, Grant | None]
    calls: list[Call]
    reached: list[tuple[str, str, str | None]]  # (what ran, the access it needs, agent)


def _tree(root: Path) -> dict[str, str]:
    found = {}
    for folder, _, files in os.walk(root):
        for name in files:
            path = Path(folder) / name
            if path.suffix == ".log":
                continue
            found[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


@pytest.fixture
def world(tmp_path) -> World:
    data = tmp_path
    FileMemoryStore(data, A).create("Alice lives in Austin.", entry_id=ENTRY[A])
    FileMemoryStore(data, B).create("Bob lives in Boston.", entry_id=ENTRY[B])
    tokens = FileTokenStore(data)
    gone, gone_secret = issue(tokens, "gone", ["*"], Access.WRITE)
    revoke(tokens, gone.id)
    made = {
        "write-a": issue(tokens, "agent a", [A], Access.WRITE),
        "read-acme": issue(tokens, "acme readers", ["acme-*"], Access.READ),
        "admin": issue(tokens, "ops", [], Access.ADMIN),
    }
    secrets: dict[str, str | None] = {
        "none": None,
        "garbage": "dkt_000000000000_" + "x" * 43,
        "revoked": gone_secret,
        "shared": SHARED,
        **{kind: secret for kind, (_, secret) in made.items()},
    }
    grants: dict[str, Grant | None] = {
        "none": None,
        "garbage": None,
        "revoked": None,
        "shared": Grant("shared", Access.ADMIN),
        **{kind: record.grant() for kind, (record, _) in made.items()},
    }
    memory = MemoryClient(None, StoreSettings(data_dir=data), "unused")  # type: ignore[arg-type]
    state = ServiceState(memory, ServiceSettings(token=SHARED), ServiceMetrics())
    app = create_app(state)
    framework = app.app.app
    reached: list[tuple[str, str, str | None]] = []

    def record(method: str, path: str, params: dict[str, Any]) -> None:
        need = NEEDS[method, path]
        if need == "tool":
            need = "read" if params["name"] in READ_ONLY_TOOLS else "write"
        reached.append((f"{method} {path}", need, params.get("agent_id")))
        raise Reached

    # The routes under /v1/agents/ belong to routers shared by every app of the process:
    # they are observed through this app's own dependency override (every one of them
    # takes the service state, after its access check), never by changing them.
    async def recorded(request: Request) -> ServiceState:
        route = request.scope["route"]
        record(request.method, route.path, dict(request.path_params))
        raise AssertionError("unreachable")

    framework.dependency_overrides[state_of] = recorded
    # The app's own routes (health, the agent list, docs, metrics) are this app's.
    for route in framework.router.routes:
        if isinstance(route, APIRoute):
            (method,) = route.methods

            async def endpoint(*_: Any, _key: tuple = (method, route.path), **kw: Any) -> Any:
                record(*_key, kw)

            route.dependant.call = endpoint

    # The search fast path opens the agent itself, and nothing else may.
    for name in ("agent", "tools", "answers_for"):

        def opened(agent_id: str, *_: Any, _name: str = name, **__: Any) -> Any:
            reached.append((f"state.{_name}", "read" if _name == "agent" else "write", agent_id))
            raise Reached

        setattr(state, name, opened)

    async def stopped(request: Any, exc: Exception) -> JSONResponse:
        return JSONResponse({"reached": True}, status_code=299)

    framework.add_exception_handler(Reached, stopped)
    return World(data, app, state, secrets, grants, _calls(framework), reached)


async def _send(world: World, client: httpx.AsyncClient, kind: str, method: str, path: str, body):
    secret = world.secrets[kind]
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    return await client.request(method, path, headers=headers, json=body)


def _may(grant: Grant | None, agent: str, need: str) -> str:
    """What the table says: allowed, forbidden (403) or unknown (out of reach)."""
    if grant is None:
        return "unauthorized"
    if not grant.covers(agent):
        return "unknown"
    if need == "admin":
        return "allowed" if grant.admin else "forbidden"
    if need == "write" and grant.access is Access.READ:
        return "forbidden"
    return "allowed"


def _client(world: World) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=world.app), base_url="http://t")


def test_every_route_with_every_token_follows_the_table_and_nothing_else_runs(world):
    before = _tree(world.data)

    async def go() -> dict:
        wrong = {}
        async with _client(world) as client:
            for call in world.calls:
                for kind in TOKEN_KINDS:
                    for agent in (A, B, GHOST):
                        path = call.for_agent(agent)
                        if "{agent}" not in call.path and agent != A:
                            continue
                        seen = len(world.reached)
                        answer = await _send(world, client, kind, call.method, path, call.body)
                        ran = world.reached[seen:]
                        if call.need == "none":
                            want = "allowed"
                        elif world.grants[kind] is None:
                            want = "unauthorized"
                        elif call.need == "any":
                            want = "allowed"
                        else:
                            want = _may(world.grants[kind], agent, call.need)
                        got = {401: "unauthorized", 403: "forbidden"}.get(answer.status_code)
                        if answer.status_code == 404 and answer.json()["detail"] == str(
                            NotFound(f"unknown agent {agent!r}: it has no store here yet")
                        ):
                            got = "unknown"
                        if got is None and call.need not in ("none", "any") and ran:
                            got = "allowed"
                        if call.need in ("none", "any"):
                            got = "allowed" if answer.status_code in (200, 299) else got
                        if got != want or (want != "allowed" and ran):
                            wrong[kind, call.method, path] = (want, got, answer.text[:120], ran)
                        if ran and "{agent}" in call.path:
                            assert all(a == agent for _, _, a in ran), (path, ran)
        return wrong

    assert asyncio.run(go()) == {}
    assert _tree(world.data) == before


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_a_bent_path_is_refused_for_every_route_and_token_before_anything_runs(world, suffix):
    """Appended, after the agent id, or before it: whatever the token, nothing runs, and
    for another agent the answer is byte for byte the one for an agent that does not
    exist."""
    before = _tree(world.data)

    def bent(path: str, agent: str) -> list[str]:
        plain = path.replace("{agent}", agent).replace("{entry}", ENTRY[agent])
        if "{agent}" not in path:
            return [plain + suffix, "/" + suffix + plain.lstrip("/")]
        head, tail = plain.split(agent, 1)
        return [plain + suffix, f"{head}{agent}{suffix}{tail}", f"{head}{suffix}{agent}{tail}"]

    async def go() -> list:
        wrong = []
        for call in world.calls:
            for kind in TOKEN_KINDS:
                answers: dict[str, list[Answer]] = {}
                for agent in (A, B, GHOST):
                    if "{agent}" not in call.path and agent != A:
                        continue
                    for path in bent(call.path, agent):
                        seen = len(world.reached)
                        secret = world.secrets[kind]
                        answer = await _raw(
                            world.app, call.method, path.encode(), secret, call.body
                        )
                        answers.setdefault(agent, []).append(answer)
                        if world.reached[seen:] or answer.status not in (400, 401, 404):
                            wrong.append((kind, call.method, path, answer.status))
                for theirs, ghost in zip(answers.get(B, []), answers.get(GHOST, []), strict=True):
                    same = theirs.body == ghost.body.replace(GHOST.encode(), B.encode())
                    if not same or theirs.headers != ghost.headers or theirs.status != ghost.status:
                        wrong.append((kind, call.method, "B vs ghost", theirs.body[:80]))
        return wrong

    assert asyncio.run(go()) == []
    assert world.reached == []
    assert _tree(world.data) == before


@dataclass
class Answer:
    status: int = 0
    headers: list[tuple[bytes, bytes]] | None = None
    body: bytes = b""


async def _raw(app: Any, method: str, raw_path: bytes, secret: str | None, body: Any) -> Answer:
    """One request as uvicorn hands it on: `path` percent-decoded (UTF-8, errors
    replaced), `raw_path` as sent: no client normalises anything away (httpx removes dot
    segments and reads `//x` as a host)."""
    payload = json.dumps(body).encode() if body is not None else b""
    headers = [(b"content-type", b"application/json")]
    headers += [(b"content-length", str(len(payload)).encode())]
    if secret:
        headers.append((b"authorization", f"Bearer {secret}".encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": urllib.parse.unquote(raw_path.decode("latin-1")),
        "raw_path": raw_path,
        "query_string": b"",
        "headers": headers,
        "server": ("127.0.0.1", 80),
        "client": ("127.0.0.1", 1234),
        "root_path": "",
    }
    sent = False
    answer = Answer()

    async def receive() -> dict:
        nonlocal sent
        if sent:
            await asyncio.sleep(3600)
        sent = True
        return {"type": "http.request", "body": payload, "more_body": False}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            answer.status = message["status"]
            answer.headers = list(message.get("headers", []))
        elif message["type"] == "http.response.body":
            answer.body += message.get("body", b"")

    await app(scope, receive, send)
    return answer


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    data=st.data(),
    junk=st.binary(min_size=1, max_size=6),
    encode=st.booleans(),
)
def test_arbitrary_bytes_anywhere_in_a_path_never_reach_an_agent_out_of_reach(
    world, data, junk, encode
):
    """Bytes appended or inserted anywhere, percent-encoded or (where a request line
    could carry them) raw: whatever the path turns into, every route body and store the
    service reaches is for an agent the token reaches with the access that route needs."""
    call = data.draw(st.sampled_from(world.calls))
    kind = data.draw(st.sampled_from(["write-a", "read-acme", "admin", "none"]))
    agent = data.draw(st.sampled_from([A, B, GHOST]))
    plain = call.for_agent(agent).encode()
    at = data.draw(st.integers(0, len(plain)))
    printable = bytes(b for b in junk if 0x21 <= b < 0x7F and b not in b"%?#")
    extra = urllib.parse.quote_from_bytes(junk, safe="").encode() if encode else printable
    raw = plain[:at] + extra + plain[at:]
    seen = len(world.reached)
    status = asyncio.run(_raw(world.app, call.method, raw, world.secrets[kind], call.body)).status
    grant = world.grants[kind]
    for what, need, reached_agent in world.reached[seen:]:
        if need in ("none", "any"):
            continue  # the docs, health, the (filtered) agent list: no agent's data
        assert grant is not None, (raw, what, status)
        if reached_agent is None:  # /metrics: no agent, an operator's
            assert need == "admin" and grant.admin, (raw, what, status)
            continue
        assert _may(grant, reached_agent, need) == "allowed", (raw, what, status)


def test_a_route_that_declares_no_access_is_refused_to_every_token(world):
    framework = world.app.app.app
    extra = APIRouter(prefix="/v1/agents/{agent_id}", dependencies=[Depends(check_route_access)])

    @extra.get("/undeclared")
    async def undeclared(agent_id: str) -> dict:
        raise AssertionError("an undeclared route ran")

    framework.include_router(extra)

    async def go() -> list[int]:
        async with _client(world) as client:
            return [
                (
                    await _send(world, client, kind, "GET", f"/v1/agents/{A}/undeclared", None)
                ).status_code
                for kind in ("shared", "admin", "write-a")
            ]

    assert asyncio.run(go()) == [403, 403, 403]


def test_a_websocket_is_closed_before_anything_runs(world):
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "websocket.connect"}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "websocket", "path": f"/v1/agents/{B}/search", "headers": []}
    asyncio.run(world.app(scope, receive, send))
    assert [m["type"] for m in sent] == ["websocket.close"]
    assert world.reached == []


def test_a_request_that_did_not_pass_the_guard_reaches_nothing(world):
    """Behind the guard, a route with no grant in the request (an app mounted without
    it) answers as for an unknown agent: no grant is no access."""
    framework = world.app.app.app

    async def go() -> int:
        transport = httpx.ASGITransport(app=framework)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            answer = await client.get(f"/v1/agents/{A}/archived")
            return answer.status_code

    assert asyncio.run(go()) == 404
    assert world.reached == []
    assert grant_of({}) is None
