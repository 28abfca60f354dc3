"""Isolation between agents on one `dreamkeeper serve`: two agents, four tokens (agent A's,
agent B's, a read token on A's prefix, and the shared admin token), every HTTP route and
every MCP tool called with every token for both agents, against a table of what each
token may do. A request for an agent outside the token's reach gets the exact answer an
agent that does not exist gets: same status, same bytes (the id aside)."""

from __future__ import annotations

import json
import urllib.parse
import uuid

import httpx
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from dreamkeeper.agent.remote import RemoteMemoryClient
from dreamkeeper.agent.tools import tool_specs
from dreamkeeper.core.errors import NotFound
from dreamkeeper.core.settings import ServiceSettings
from dreamkeeper.policies.access import Access
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.files.tokens import FileTokenStore
from dreamkeeper.stores.tokens import issue
from tests.service.conftest import TOKEN, start_serve, stop_serve

pytestmark = pytest.mark.slow  # a serve process of its own, ~250 requests

A, B = "acme-a", "beta-b"
GHOST_A, GHOST_B = "acme-z", "beta-z"  # same length as A and B: comparable bytes
ENTRY_A, ENTRY_B = "aaaaaaaaaaa1", "bbbbbbbbbbb1"
ENTRY = {A: ENTRY_A, B: ENTRY_B, GHOST_A: ENTRY_A, GHOST_B: ENTRY_B}

# Which agents each token reaches, and how: the table the service must follow.
REACH = {
    "token-a": {A: Access.WRITE},
    "token-b": {B: Access.WRITE},
    "prefix": {A: Access.READ},  # read on acme-*
    "admin": {A: Access.ADMIN, B: Access.ADMIN},
}

# (method, path under /v1/agents/{agent}/, body, what it needs)
ROUTES = [
    ("POST", "search", {"query": "lives"}, "read"),
    ("GET", "memories/{entry}", None, "read"),
    ("GET", "archived", None, "read"),
    ("POST", "memories", {"content": "A new fact {uid}."}, "write"),
    ("DELETE", "memories/0123456789ab", None, "write"),
    ("POST", "memories/0123456789ab/restore", {"force": False}, "write"),
    ("PUT", "memories/{entry}/importance", {"importance": 0.6}, "write"),
    ("POST", "dream", None, "write"),
    ("GET", "dream", None, "read"),
    ("GET", "dream/pending", None, "admin"),
    ("POST", "dream/approve", {"keys": []}, "admin"),
    ("POST", "dream/reject", {"keys": []}, "admin"),
    ("POST", "context", {"session": "s1", "message": "where do I live?"}, "read"),
    ("PUT", "working", {"namespace": "session/s1", "key": "k", "value": "v"}, "write"),
    ("GET", "working/session/s1/k", None, "read"),
    ("POST", "working/search", {}, "read"),
    ("POST", "conversations/s1/turns", {"role": "user", "content": "hello"}, "write"),
    ("GET", "conversations/s1", None, "read"),
    ("GET", "tools", None, "read"),
    ("POST", "sessions/s1/tools/search_memory", {"arguments": {"query": "lives"}}, "read"),
    ("POST", "sessions/s1/tools/save_memory", {"arguments": {"content": "x {uid}"}}, "write"),
]
TOOLS = {
    "search_memory": ({"query": "lives"}, "read"),
    "search_working_memory": ({"query": "v"}, "read"),
    "get_from_working_memory": ({"key": "k"}, "read"),
    "save_memory": ({"content": "MCP fact {uid}."}, "write"),
    "delete_memory": ({"id": "0123456789ab"}, "write"),
    "update_memory_importance": ({"id": "{entry}", "importance": 0.7}, "write"),
    "save_to_working_memory": ({"key": "k2", "value": "v2"}, "write"),
}


def expected(token: str, agent: str, need: str) -> str:
    """allowed / forbidden (reached, not permitted: 403) / unknown (out of reach: the
    answer an agent that does not exist gets)."""
    access = REACH[token].get(agent)
    if access is None:
        return "unknown"
    if need == "admin":
        return "allowed" if access is Access.ADMIN else "forbidden"
    if need == "write" and access is Access.READ:
        return "forbidden"
    return "allowed"


def unknown_detail(agent: str) -> str:
    return str(NotFound(f"unknown agent {agent!r}: it has no store here yet"))


@pytest.fixture(scope="module")
def isolated(temporal_env, tmp_path_factory):
    data = tmp_path_factory.mktemp("isolation")
    FileMemoryStore(data, A).create("Alice lives in Austin.", entry_id=ENTRY_A)
    FileMemoryStore(data, B).create("Bob lives in Boston.", entry_id=ENTRY_B)
    tokens = FileTokenStore(data)
    secrets = {
        "token-a": issue(tokens, "agent a", [A], Access.WRITE)[1],
        "token-b": issue(tokens, "agent b", [B], Access.WRITE)[1],
        "prefix": issue(tokens, "acme readers", ["acme-*"], Access.READ)[1],
        "admin": TOKEN,
    }
    served = start_serve(temporal_env, data)
    yield served, secrets
    stop_serve(served)


def _request(served, secret: str, method: str, path: str, body) -> httpx.Response:
    headers = {"Authorization": f"Bearer {secret}"}
    with httpx.Client(base_url=served.url, headers=headers, timeout=120) as client:
        return client.request(method, path, json=body)


def _fill(value, agent: str):
    if isinstance(value, str):
        return value.replace("{entry}", ENTRY[agent]).replace("{uid}", uuid.uuid4().hex[:8])
    if isinstance(value, dict):
        return {k: _fill(v, agent) for k, v in value.items()}
    return value


def _outcome(answer: httpx.Response, agent: str) -> str:
    if answer.status_code == 403:
        assert answer.json()["category"] == "Forbidden"
        return "forbidden"
    if answer.status_code == 404 and answer.json().get("detail") == unknown_detail(agent):
        return "unknown"
    assert answer.status_code not in (401, 500), answer.text
    return "allowed"


def test_every_route_with_every_token_follows_the_table(isolated):
    served, secrets = isolated
    table = {}
    for token, secret in secrets.items():
        for agent in (A, B):
            for method, rest, body, _need in ROUTES:
                path = f"/v1/agents/{agent}/{_fill(rest, agent)}"
                answer = _request(served, secret, method, path, _fill(body, agent))
                table[token, agent, method, rest] = (_outcome(answer, agent), answer)
    wrong = {
        key: (got, expected(key[0], key[1], need), answer.status_code, answer.text[:200])
        for (method, rest, _, need) in ROUTES
        for key in [(t, a, method, rest) for t in secrets for a in (A, B)]
        for got, answer in [table[key]]
        if got != expected(key[0], key[1], need)
    }
    assert not wrong, wrong
    # Nothing of B's was written by A's tokens: B holds its seed and what admin and
    # token-b wrote, each write traceable to a token that reaches B.
    contents = [e.content for e in FileMemoryStore(served.data_dir, B).entries()]
    assert "Bob lives in Boston." in contents


@pytest.mark.parametrize(("method", "rest", "body", "need"), ROUTES, ids=[r[1] for r in ROUTES])
def test_not_yours_is_byte_for_byte_an_agent_that_does_not_exist(
    isolated, method, rest, body, need
):
    served, secrets = isolated
    for token, _mine, theirs, ghost in (
        ("token-a", A, B, GHOST_B),
        ("token-b", B, A, GHOST_A),
        ("prefix", A, B, GHOST_B),
    ):
        secret = secrets[token]
        real = _request(
            served,
            secret,
            method,
            f"/v1/agents/{theirs}/{_fill(rest, theirs)}",
            _fill(body, theirs),
        )
        none = _request(
            served, secret, method, f"/v1/agents/{ghost}/{_fill(rest, ghost)}", _fill(body, ghost)
        )
        assert real.status_code == none.status_code == 404
        assert real.content == none.content.replace(ghost.encode(), theirs.encode())
        assert real.headers["content-type"] == none.headers["content-type"]
        assert real.headers["content-length"] == none.headers["content-length"]
    # And what the admin gets for an agent with no store at all, on a read: the same.
    if need == "read" and rest not in ("tools",):
        secret = secrets["token-a"]
        refused = _request(
            served, secret, method, f"/v1/agents/{B}/{_fill(rest, B)}", _fill(body, B)
        )
        ghost = _request(
            served,
            secrets["admin"],
            method,
            f"/v1/agents/{GHOST_B}/{_fill(rest, GHOST_B)}",
            _fill(body, GHOST_B),
        )
        if ghost.status_code == 404:
            assert refused.content == ghost.content.replace(GHOST_B.encode(), B.encode())


async def _mcp_calls(served, secret: str, agent: str) -> dict[str, tuple[bool, str]]:
    headers = {"Authorization": f"Bearer {secret}", "X-Dreamkeeper-Agent": agent}
    out = {}
    async with httpx2.AsyncClient(headers=headers, timeout=120) as http:
        async with streamable_http_client(f"{served.url}/mcp", http_client=http) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                assert {t.name for t in (await session.list_tools()).tools} == set(TOOLS)
                for name, (args, _) in TOOLS.items():
                    result = await session.call_tool(name, _fill(args, agent))
                    text = "\n".join(block.text for block in result.content)
                    out[name] = (bool(result.is_error), text)
    return out


async def test_every_mcp_tool_with_every_token_follows_the_table(isolated):
    served, secrets = isolated
    assert {s["function"]["name"] for s in tool_specs()} == set(TOOLS)
    theirs = {"token-a": (B, GHOST_B), "token-b": (A, GHOST_A), "prefix": (B, GHOST_B)}
    wrong = {}
    texts = {}
    for token, secret in secrets.items():
        agents = [A, B, theirs[token][1]] if token in theirs else [A, B]
        for agent in agents:
            for name, (is_error, text) in (await _mcp_calls(served, secret, agent)).items():
                texts[token, agent, name] = text
                if agent in (GHOST_A, GHOST_B):
                    continue
                want = expected(token, agent, TOOLS[name][1])
                if want == "unknown":
                    refused = f"Error: {unknown_detail(agent)}; nothing was done."
                    got = "unknown" if is_error and text == refused else "?"
                elif want == "forbidden":
                    got = "forbidden" if is_error and "may only read" in text else "?"
                else:
                    reached = "may only read" not in text and "unknown agent" not in text
                    got = "allowed" if reached else "?"
                if got != want:
                    wrong[token, agent, name] = (want, text[:200])
    assert not wrong, wrong
    # Not yours (it exists) and does not exist (the ghost): the same text, the id aside.
    for token, (real, ghost) in theirs.items():
        for name in TOOLS:
            assert texts[token, ghost, name].replace(ghost, real) == texts[token, real, name]


def test_the_agent_list_and_metrics_follow_the_token(isolated):
    served, secrets = isolated
    listed = {t: _request(served, s, "GET", "/v1/agents", None) for t, s in secrets.items()}
    assert {t: a.json()["agents"] for t, a in listed.items()} == {
        "token-a": [A],
        "token-b": [B],
        "prefix": [A],
        "admin": [A, B],
    }
    for token in ("token-a", "token-b", "prefix"):
        assert _request(served, secrets[token], "GET", "/metrics", None).status_code == 403
        assert _request(served, secrets[token], "GET", "/openapi.json", None).status_code == 200
    scrape = _request(served, secrets["admin"], "GET", "/metrics", None)
    assert scrape.status_code == 200
    # No agent id in the metrics unless DREAMKEEPER_SERVE_METRICS_AGENTS is set.
    assert A not in scrape.text and B not in scrape.text
    assert 'dreamkeeper_store_entries{state="live"}' in scrape.text
    assert (
        _request(served, "dkt_000000000000_" + "x" * 43, "GET", "/v1/agents", None).status_code
        == 401
    )


def test_the_remote_client_sends_its_own_token(isolated):
    served, secrets = isolated
    # DREAMKEEPER_TOKEN is what a client sends; the shared token is the fallback.
    env = {"DREAMKEEPER_URL": served.url, "DREAMKEEPER_TOKEN": secrets["prefix"]}
    mine = RemoteMemoryClient.from_settings(ServiceSettings.from_env(env))
    hits = mine.search_memory(A, "lives")
    assert [h.entry.id for h in hits] == [ENTRY_A]
    with pytest.raises(NotFound, match="unknown agent"):
        mine.search_memory(B, "lives")


SUFFIXES = ["%0A", "%0D", "%0D%0A", "%09", "%00", "//", "%2F", "/"]
THEIRS_Q, GHOST_Q = "beta-q", "beta-w"  # made for the test below: no workflow touches it


def _tree(root) -> dict[str, str]:
    import hashlib

    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_every_route_with_a_bent_path_is_refused_over_real_http(isolated, tmp_path):
    """The routes of the app's routing table, each with every suffix appended, after the
    agent id and before it, sent byte for byte (http.client: nothing normalised) to a
    real serve: never a 2xx, 3xx or 5xx, for another agent the bytes of an agent that
    does not exist, and that agent's store unchanged."""
    import http.client

    from dreamkeeper.agent.client import MemoryClient
    from dreamkeeper.core.settings import StoreSettings
    from dreamkeeper.service.app import create_app
    from dreamkeeper.service.metrics import ServiceMetrics
    from dreamkeeper.service.state import ServiceState
    from tests.service.test_scope_fail_closed import _calls

    served, secrets = isolated
    FileMemoryStore(served.data_dir, THEIRS_Q).create("Quinn lives in Quebec.")
    before = _tree(served.data_dir / "agents" / THEIRS_Q)
    agents_before = sorted(p.name for p in (served.data_dir / "agents").iterdir())
    memory = MemoryClient(None, StoreSettings(data_dir=tmp_path), "unused")  # type: ignore[arg-type]
    framework = create_app(ServiceState(memory, ServiceSettings(), ServiceMetrics())).app.app
    calls = _calls(framework)
    host, port = served.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    wrong = []

    def send(method: str, path: str, body, secret: str) -> tuple[int, bytes]:
        payload = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
        conn.request(method, path, payload, headers)
        answer = conn.getresponse()
        return answer.status, answer.read()

    for call in calls:
        for token, secret in secrets.items():
            for suffix in SUFFIXES:
                got = {}
                for agent in (A, THEIRS_Q, GHOST_Q):
                    if "{agent}" not in call.path and agent != A:
                        continue
                    plain = call.path.replace("{agent}", agent).replace("{entry}", ENTRY_A)
                    if "{agent}" in call.path:
                        head, tail = plain.split(agent, 1)
                        bent = [plain + suffix, f"{head}{agent}{suffix}{tail}"]
                        bent.append(f"{head}{suffix}{agent}{tail}")
                    else:
                        bent = [plain + suffix]
                    got[agent] = [send(call.method, p, call.body, secret) for p in bent]
                    for path, (status, body) in zip(bent, got[agent], strict=True):
                        if not 400 <= status < 500:
                            wrong.append((token, call.method, path, status, body[:100]))
                for (s1, b1), (s2, b2) in zip(
                    got.get(THEIRS_Q, []), got.get(GHOST_Q, []), strict=True
                ):
                    if (s1, b1) != (s2, b2.replace(GHOST_Q.encode(), THEIRS_Q.encode())):
                        wrong.append((token, call.method, call.path, suffix, b1[:80], b2[:80]))
    conn.close()
    assert wrong == []
    assert _tree(served.data_dir / "agents" / THEIRS_Q) == before
    assert sorted(p.name for p in (served.data_dir / "agents").iterdir()) == agents_before


async def test_an_mcp_agent_that_is_not_an_agent_id_reaches_nothing(isolated):
    served, secrets = isolated
    for agent in (f"{B}\n", f"{B}\x00", f"{B}/x", f" {B}", f"{A}\r\n", "*", "acme-*"):
        query = urllib.parse.urlencode({"agent": agent})
        headers = {"Authorization": f"Bearer {secrets['token-a']}"}
        async with httpx2.AsyncClient(headers=headers, timeout=120) as http:
            url = f"{served.url}/mcp?{query}"
            async with streamable_http_client(url, http_client=http) as streams:
                async with ClientSession(streams[0], streams[1]) as session:
                    await session.initialize()
                    for name, (args, _) in TOOLS.items():
                        result = await session.call_tool(name, _fill(args, A))
                        text = "\n".join(block.text for block in result.content)
                        assert result.is_error, (agent, name, text)
