"""The memory API against a real `dreamkeeper serve` process (worker inside, real Temporal
dev server), with httpx: what an agent in another language would do."""

from __future__ import annotations

import uuid

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.search.query import search

PROBLEM = "application/problem+json"


def _agent() -> str:
    return f"a-{uuid.uuid4().hex[:8]}"


def _save(client: httpx.Client, agent: str, content: str, **extra) -> str:
    answer = client.post(f"/v1/agents/{agent}/memories", json={"content": content, **extra})
    assert answer.status_code == 201, answer.text
    return answer.json()["entry_id"]


def _on_disk(served, agent: str) -> list:
    return FileMemoryStore(served.data_dir, agent).entries(include_archived=True)


def test_save_is_durable_then_search_get_and_context_find_it(served):
    agent = _agent()
    with served.client() as client:
        entry_id = _save(
            client,
            agent,
            "User lives in Chicago (America/Chicago)",
            category="user-preferences/timezone",
            source="user",
            importance=0.9,
        )
        # Durable when acknowledged: already a file in the store.
        assert [e.id for e in _on_disk(served, agent)] == [entry_id]

        found = client.post(f"/v1/agents/{agent}/search", json={"query": "chicago timezone"})
        assert found.status_code == 200
        hits = found.json()["hits"]
        assert [h["entry"]["id"] for h in hits] == [entry_id]
        assert hits[0]["entry"]["metadata"] == {"source": "user"}
        assert hits[0]["score"] > 0

        got = client.get(f"/v1/agents/{agent}/memories/{entry_id}").json()
        assert got["content"] == "User lives in Chicago (America/Chicago)"
        assert got["importanceScore"] == 0.9

        context = client.post(
            f"/v1/agents/{agent}/context",
            json={"session": "s1", "message": "What time is it for me in my own timezone?"},
        ).json()
        assert context["recalled"] == [entry_id]
        assert "User lives in Chicago" in context["messages"][0]["content"]


def test_filters_by_category_tags_and_metadata(served):
    agent = _agent()
    with served.client() as client:
        keep = _save(client, agent, "deploys run on fridays", category="ops/deploys", tags=["ops"])
        _save(client, agent, "deploys need two reviewers", category="process", tags=["review"])
        body = {"query": "deploys", "category": "ops", "tags": ["ops"]}
        hits = client.post(f"/v1/agents/{agent}/search", json=body).json()["hits"]
        assert [h["entry"]["id"] for h in hits] == [keep]
        body = {"query": "deploys", "metadata": {"source": "user"}}
        assert client.post(f"/v1/agents/{agent}/search", json=body).json()["hits"] == []


def test_delete_restore_and_importance_go_through_their_workflows(served):
    agent = _agent()
    with served.client() as client:
        entry_id = _save(client, agent, "The Blazor class runs on Fridays at 12:30")
        deleted = client.delete(f"/v1/agents/{agent}/memories/{entry_id}")
        assert deleted.status_code == 200 and deleted.json()["archived"] is True
        archived = client.get(f"/v1/agents/{agent}/archived").json()["entries"]
        assert [e["id"] for e in archived] == [entry_id]
        hits = client.post(f"/v1/agents/{agent}/search", json={"query": "blazor"}).json()
        assert hits["hits"] == []

        restored = client.post(f"/v1/agents/{agent}/memories/{entry_id}/restore", json={})
        assert restored.json()["archived"] is False
        scored = client.put(
            f"/v1/agents/{agent}/memories/{entry_id}/importance", json={"importance": 0.85}
        )
        assert scored.json()["importance"] == 0.85
    assert FileMemoryStore(served.data_dir, agent).require(entry_id).importance_score == 0.85


def test_working_memory_turns_and_tools(served):
    agent = _agent()
    with served.client() as client:
        saved = client.put(
            f"/v1/agents/{agent}/working",
            json={"namespace": "session/s1", "key": "inbox", "value": "three unread emails"},
        )
        assert saved.status_code == 200 and saved.json()["key"] == "session/s1/inbox"
        got = client.get(f"/v1/agents/{agent}/working/session/s1/inbox").json()
        assert got["value"] == "three unread emails"
        found = client.post(
            f"/v1/agents/{agent}/working/search", json={"query": "unread", "prefix": "session/s1"}
        ).json()
        assert [e["key"] for e in found["entries"]] == ["session/s1/inbox"]

        turn = client.post(
            f"/v1/agents/{agent}/conversations/s1/turns", json={"role": "user", "content": "hi"}
        )
        assert turn.status_code == 201
        talk = client.get(f"/v1/agents/{agent}/conversations/s1").json()
        assert [(t["role"], t["content"]) for t in talk["turns"]] == [("user", "hi")]

        tools = client.get(f"/v1/agents/{agent}/tools").json()
        assert len(tools) == 7
        text = client.post(
            f"/v1/agents/{agent}/sessions/s1/tools/save_memory",
            json={"arguments": {"content": "User's dog is called Rex", "source": "user"}},
        ).json()["text"]
        assert text.startswith("Saved to long-term memory as [")
        text = client.post(
            f"/v1/agents/{agent}/sessions/s1/tools/search_memory",
            json={"arguments": {"query": "dog name"}},
        ).json()["text"]
        assert "Rex" in text


def test_requests_without_the_token_are_refused_and_write_nothing(served):
    agent = _agent()
    body = {"content": "should never be saved"}
    bare = httpx.post(f"{served.url}/v1/agents/{agent}/memories", json=body)
    wrong = httpx.post(
        f"{served.url}/v1/agents/{agent}/memories",
        json=body,
        headers={"Authorization": "Bearer not-the-token"},
    )
    for answer in (bare, wrong):
        assert answer.status_code == 401
        assert answer.headers["content-type"] == PROBLEM
        assert answer.headers["www-authenticate"] == "Bearer"
        assert answer.json()["category"] == "Unauthorized"
    assert httpx.get(f"{served.url}/metrics").status_code == 401
    assert httpx.post(f"{served.url}/mcp", json={}).status_code == 401
    assert not (served.data_dir / "agents" / agent).exists()
    assert httpx.get(f"{served.url}/v1/health").status_code == 200  # liveness stays open


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"content": ""}, "empty"),
        ({"content": "fine", "importance": 2}, "importance"),
        ({"content": "fine", "category": "../../etc"}, "category"),
        ({"content": "fine", "tags": ["ok", ""]}, "tag"),
        ({"content": "fine", "entry_id": "not an id!"}, "id"),
        ({"content": "fine", "entry_id": "abcdef123456", "idempotency_key": "k"}, "not both"),
        ({"content": "fine", "colour": "blue"}, "colour"),
        ({"content": 42}, "content"),
    ],
)
def test_bad_input_is_an_invalid_input_problem_and_nothing_is_written(served, body, words):
    agent = _agent()
    with served.client() as client:
        answer = client.post(f"/v1/agents/{agent}/memories", json=body)
    assert answer.status_code == 400, answer.text
    assert answer.headers["content-type"] == PROBLEM
    problem = answer.json()
    assert problem["category"] == "InvalidInput"
    assert words in problem["detail"].lower()
    assert _on_disk(served, agent) == []


def test_the_same_messages_as_the_cli(served, tmp_path):
    """Validation is the store's: the HTTP detail is the CLI's error line."""
    from dreamkeeper.cli.main import main

    agent = _agent()
    with served.client() as client:
        answer = client.post(f"/v1/agents/{agent}/memories", json={"content": "x", "importance": 7})
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["--data", str(tmp_path), "save", "x", "--importance", "7", "--direct"])
    assert code == 2
    assert err.getvalue().strip() == f"error: {answer.json()['detail']}"


def test_invalid_and_unknown_agents_are_refused(served):
    with served.client() as client:
        bad = client.post("/v1/agents/has%20space/search", json={})
        assert bad.status_code == 400 and bad.json()["category"] == "InvalidInput"
        unknown = client.post(f"/v1/agents/{_agent()}/search", json={"query": "x"})
        assert unknown.status_code == 404
        assert "unknown agent" in unknown.json()["detail"]
        missing = client.get(f"/v1/agents/{_agent()}/memories/abcdef123456")
        assert missing.status_code == 404


def test_unknown_entry_is_not_found_and_a_reused_id_changes_nothing(served):
    agent = _agent()
    with served.client() as client:
        entry_id = _save(client, agent, "first version of the fact")
        gone = client.delete(f"/v1/agents/{agent}/memories/abcdef123456")
        assert gone.status_code == 404 and gone.json()["category"] == "NotFound"
        # The same id with the same content is a retry: the first one's entry.
        retry = client.post(
            f"/v1/agents/{agent}/memories",
            json={"content": "first version of the fact", "entry_id": entry_id},
        )
        assert retry.status_code == 201 and retry.json()["entry_id"] == entry_id
        # With other content it is a conflict, whether the first save still runs or not.
        other = client.post(
            f"/v1/agents/{agent}/memories",
            json={"content": "another fact entirely", "entry_id": entry_id},
        )
        assert other.status_code == 409 and other.json()["category"] == "Conflict"
    assert [e.content for e in _on_disk(served, agent)] == ["first version of the fact"]


def test_an_oversized_body_is_refused_before_anything_is_done(served):
    agent = _agent()
    big = "x" * (5 * 1_048_576 + 10)
    with served.client() as client:
        answer = client.post(f"/v1/agents/{agent}/memories", json={"content": big})
        assert answer.status_code == 413
        assert answer.json()["category"] == "InvalidInput"
        assert "DREAMKEEPER_SERVE_MAX_BODY_BYTES" in answer.json()["detail"]

        def chunks():
            for _ in range(6):
                yield b"x" * 1_048_576

        # Streamed without a length: counted as it arrives.
        streamed = client.post(
            f"/v1/agents/{agent}/memories",
            content=chunks(),
            headers={"content-type": "application/json"},
        )
        assert streamed.status_code == 413
    assert not (served.data_dir / "agents" / agent).exists()


def test_openapi_schema_is_served(served):
    with served.client() as client:
        schema = client.get("/openapi.json").json()
    assert "/v1/agents/{agent_id}/search" in schema["paths"]
    assert "SaveRequest" in schema["components"]["schemas"]


def test_http_search_returns_what_an_in_process_search_returns(served):
    agent = _agent()
    with served.client() as client:
        for text in ("alpha beta gamma", "beta delta", "gamma epsilon beta", "zeta"):
            _save(client, agent, text)
        over_http = client.post(f"/v1/agents/{agent}/search", json={"query": "beta gamma"})
    local = search(FileMemoryStore(served.data_dir, agent), "beta gamma", limit=10)
    assert [h["entry"]["id"] for h in over_http.json()["hits"]] == [h.entry.id for h in local]


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.integers()
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)
VALID = "a perfectly valid fact"
_bad_saves = st.fixed_dictionaries(
    {},
    optional={
        "content": st.one_of(
            st.just(VALID), st.just(""), st.just("   "), st.integers(), st.lists(st.text())
        ),
        "importance": st.one_of(
            st.floats(min_value=1.001, allow_infinity=False),
            st.floats(max_value=-0.001, allow_infinity=False),
            st.text(),
        ),
        "category": st.sampled_from(["", "/", "a//b", "../x", "x" * 300]),
        "tags": st.one_of(st.just([""]), st.lists(st.integers(), min_size=1), st.text()),
        "entry_id": st.sampled_from(["", "x", "../../etc", "ABCDEF123456!"]),
        "surprise": _json_values,
    },
)


# Every body has at least one bad field: a valid content comes with something else wrong.
_bad_saves = _bad_saves.filter(lambda body: body.get("content", VALID) != VALID or len(body) > 1)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(body=_bad_saves)
def test_generated_bad_saves_are_refused_with_nothing_written(served, body):
    agent = _agent()
    body = body if "content" in body else {**body, "content": ""}
    with served.client() as client:
        answer = client.post(f"/v1/agents/{agent}/memories", json=body)
    assert answer.status_code == 400, (body, answer.text)
    assert answer.json()["category"] == "InvalidInput"
    assert _on_disk(served, agent) == []


def test_a_working_memory_entry_is_read_back_with_the_key_it_was_saved_with(served):
    agent = _agent()
    with served.client() as client:
        for session, value in (("s1", "three unread emails"), ("s2", "one unread email")):
            saved = client.put(
                f"/v1/agents/{agent}/working",
                json={"namespace": f"session/{session}", "key": "inbox", "value": value},
            )
            assert saved.status_code == 200
        client.put(
            f"/v1/agents/{agent}/working",
            json={"namespace": "session/s1", "key": "draft", "value": "Dear Bob"},
        )
        base = f"/v1/agents/{agent}/working"
        # The namespace and key the save took (before: 404, only the full key worked).
        got = client.get(f"{base}/inbox", params={"namespace": "session/s2"})
        assert got.status_code == 200 and got.json()["value"] == "one unread email"
        assert got.json()["key"] == "session/s2/inbox"
        # A plain key one namespace holds; one several hold is refused naming them.
        assert client.get(f"{base}/draft").json()["value"] == "Dear Bob"
        ambiguous = client.get(f"{base}/inbox")
        assert ambiguous.status_code == 400
        assert "session/s1, session/s2" in ambiguous.json()["detail"]
        # The full key still works; a missing one is 404.
        assert client.get(f"{base}/session/s1/inbox").json()["value"] == "three unread emails"
        assert client.get(f"{base}/nothing", params={"namespace": "session/s1"}).status_code == 404
        assert client.get(f"{base}/inbox", params={"namespace": "bad"}).status_code == 400


def test_docs_work_offline_and_load_nothing_from_another_host(served):
    with served.client() as client:
        page = client.get("/docs")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "openapi.json" in page.text and "/v1/agents/{agent_id}/search" in page.text
        # Before: Swagger UI's script and CSS from a CDN (blank offline).
        assert "http://" not in page.text and "https://" not in page.text
        assert "<script" not in page.text
        assert client.get("/redoc").status_code == 404  # FastAPI's CDN page is off
        assert client.get("/openapi.json").status_code == 200


def test_a_refused_replaces_is_a_409_with_the_reason_and_valid_from_is_kept(served):
    agent = _agent()
    with served.client() as client:
        cats = _save(client, agent, "Mei is allergic to cats.", category="people")
        body = {"content": "Mei started a new job.", "category": "people", "replaces": [cats]}
        refused = client.post(f"/v1/agents/{agent}/memories", json=body)
        assert refused.status_code == 409, refused.text
        problem = refused.json()
        assert problem["category"] == "ReplaceRefused"
        assert "another attribute (employer, not allergy)" in problem["detail"]
        assert "force_replace" in problem["detail"]
        assert [e.id for e in _on_disk(served, agent)] == [cats]
        forced = client.post(
            f"/v1/agents/{agent}/memories",
            json={**body, "force_replace": True, "valid_from": "2026-02-01"},
        )
        assert forced.status_code == 201, forced.text
        assert forced.json()["replaced"] == [cats]
        saved = client.get(f"/v1/agents/{agent}/memories/{forced.json()['entry_id']}").json()
        assert saved["validFrom"].startswith("2026-02-01")
        bad = client.post(
            f"/v1/agents/{agent}/memories", json={"content": "x", "valid_from": "soon"}
        )
        assert bad.status_code == 400, bad.text
        assert bad.json()["category"] == "InvalidInput"
