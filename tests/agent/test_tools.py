"""The memory tools: schemas, the recall-family rules, working memory and the stash."""

from __future__ import annotations

import tempfile
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from dreamkeeper.agent import recall
from dreamkeeper.agent.session import ContextKind, SessionContext
from dreamkeeper.agent.stash import REGISTRY_TAG, ToolResultStash
from dreamkeeper.agent.tool_args import TOOLS
from dreamkeeper.agent.tools import MemoryTools, tool_specs
from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.payloads import EntryOpResult
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.files.working_memory import FileWorkingMemoryStore

S1 = SessionContext.user("s1")
FAMILY = {
    recall.SEARCH_MEMORY: (
        recall.SEARCH_MEMORY_HEADLINE,
        recall.SEARCH_WORKING_MEMORY,
        recall.SEARCH_WORKING_MEMORY_HEADLINE,
    ),
    recall.SEARCH_WORKING_MEMORY: (
        recall.SEARCH_WORKING_MEMORY_HEADLINE,
        recall.SEARCH_MEMORY,
        recall.SEARCH_MEMORY_HEADLINE,
    ),
}


@pytest.fixture
def tools(store, working) -> MemoryTools:
    return MemoryTools(
        "agent-1", S1, memory=store, working=working, stash=ToolResultStash(working, S1)
    )


def _specs() -> dict[str, dict]:
    return {s["function"]["name"]: s["function"] for s in tool_specs()}


def test_every_tool_has_a_valid_json_schema_and_a_handler(tools):
    specs = _specs()
    assert sorted(specs) == sorted(tools.names)
    assert len(specs) == len(tool_specs())  # names are unique
    for name, spec in specs.items():
        Draft202012Validator.check_schema(spec["parameters"])
        assert spec["parameters"]["type"] == "object", name
        assert spec["description"].strip(), name
        assert set(spec["parameters"]["required"]) <= set(spec["parameters"]["properties"])


def test_arguments_a_model_would_send_validate_against_the_schemas():
    specs = _specs()
    good = {
        "search_memory": {"query": "chicago", "tags": ["x"], "limit": 5},
        "save_memory": {"content": "c", "source": "user", "importance": 0.7},
        "save_to_working_memory": {"key": "k", "data": "d", "ttl_minutes": 10},
        "update_memory_importance": {"id": "0123456789ab", "importance": 0.9},
    }
    for name, args in good.items():
        Draft202012Validator(specs[name]["parameters"]).validate(args)
    bad = Draft202012Validator(specs["save_memory"]["parameters"])
    assert not bad.is_valid({"importance": 0.5})  # content is required
    assert not bad.is_valid({"content": "c", "surprise": 1})


@pytest.mark.parametrize("name", sorted(FAMILY))
def test_recall_family_descriptions_lead_with_the_headline_and_name_the_sibling(name):
    headline, sibling, sibling_headline = FAMILY[name]
    description = _specs()[name]["description"]
    assert description.startswith(headline)
    assert sibling in description and sibling_headline in description


async def test_every_empty_recall_names_the_sibling_and_never_itself(tools):
    for name, (_, sibling, sibling_headline) in FAMILY.items():
        result = await tools.call(name, {"query": "zeppelin quartermaster"})
        assert sibling in result and sibling_headline in result, name
        assert "not evidence it was never said or never known" in result
        assert name not in result.replace(sibling, ""), f"{name} re-suggests itself"


async def test_query_less_browses_are_exempt_and_answer_themselves(tools, store):
    browse = await tools.call("search_memory", {})
    assert "Categories: none yet." in browse and recall.SEARCH_WORKING_MEMORY not in browse
    store.create("The user lives in Chicago", category="user-preferences/location")
    browse = await tools.call("search_memory", {"category": "nothing-here"})
    assert "user-preferences/location (1)" in browse  # the taxonomy, even with no match
    listing = await tools.call("search_working_memory", {})
    assert listing.startswith("No live entries") and recall.SEARCH_MEMORY not in listing


async def test_search_memory_formats_hits_with_source(tools, store):
    entry = store.create(
        "The user lives in Chicago", category="places", metadata={"source": "user"}
    )
    result = await tools.call("search_memory", '{"query": "chicago"}')
    assert (
        result == f"- [{entry.id}] (places, importance=0.50, first seen today, source=user): "
        "The user lives in Chicago"
    )


async def test_working_memory_tools_round_trip_in_the_callers_namespace(tools, working):
    saved = await tools.call(
        "save_to_working_memory",
        {
            "key": "inbox",
            "data": "Invoice 4411 from Contoso",
            "category": "email",
            "tags": ["unread"],
        },
    )
    assert saved == "Saved session/s1/inbox (expires in 5m00s)."
    assert (await tools.call("get_from_working_memory", {"key": "inbox"})).endswith(
        "Invoice 4411 from Contoso"
    )
    found = await tools.call("search_working_memory", {"query": "contoso invoice"})
    assert "session/s1/inbox" in found and "Invoice 4411 from Contoso" in found
    working.save("patrol/heartbeat", "alert", "disk 91% full", background=True)
    cross = await tools.call("get_from_working_memory", {"key": "patrol/heartbeat/alert"})
    assert cross.endswith("disk 91% full")
    refused = await tools.call("save_to_working_memory", {"key": "stash/s1/x", "data": "forged"})
    assert refused.startswith("Error:") and "stash" in refused
    assert working.get("stash/s1/x") is None


async def test_background_sessions_are_told_about_the_ttl_floor(store, working):
    sub = SessionContext("t1", ContextKind.SUBAGENT)
    tools = MemoryTools("agent-1", sub, memory=store, working=working)
    result = await tools.call("save_to_working_memory", {"key": "r", "data": "d", "ttl_minutes": 2})
    assert result.startswith("Saved subagent/t1/r (expires in 4h00m)")
    assert "at least 4 hours" in result


async def test_bad_calls_are_text_errors_that_change_nothing(tools, working):
    cases = [
        ("nope", {}),
        ("search_memory", "{not json"),
        ("search_memory", {"limit": 0}),
        ("save_to_working_memory", {"key": "../x", "data": "d"}),
        ("save_to_working_memory", {"key": "k"}),
        ("save_memory", {"content": "fact"}),
    ]  # no worker connected
    for name, args in cases:
        assert (await tools.call(name, args)).startswith("Error:"), (name, args)
    assert working.list().total == 0


async def test_an_oversized_result_is_stashed_and_reachable_through_the_tools(tools, working):
    page = "HEAD-MARKER " + "lorem ipsum " * 2000 + " TAIL-MARKER"
    elided = tools.stash.process("web_browse", "call_42", page)
    assert elided.startswith("HEAD-MARKER") and elided.endswith("TAIL-MARKER")
    assert "stash/s1/call_42" in elided and len(elided) < 5_000
    entry = working.get("stash/s1/call_42")
    assert entry.value == page and entry.tags == ["stash", "tool-result", "tool:web_browse"]
    assert entry.expires_at - entry.stored_at == timedelta(minutes=60)
    listing = await tools.call("search_working_memory", {"namespace": "stash"})
    assert "stash/s1/call_42" in listing
    assert (await tools.call("get_from_working_memory", {"key": "stash/s1/call_42"})).endswith(
        "TAIL-MARKER"
    )
    assert tools.stash.process("calc", "call_43", "42") == "42"  # small results pass through
    note = tools.stash.registry_note()
    assert note.startswith(REGISTRY_TAG) and "stash/s1/call_42" in note and "call_43" not in note
    next_run = ToolResultStash(working, S1)
    assert next_run.registry_note() is None  # the note covers this run only
    assert working.get("stash/s1/call_42") is not None  # the original stays reachable


async def test_without_a_loop_no_stash_is_reachable(store, working):
    tools = MemoryTools("agent-1", S1, memory=store, working=working)
    result = await tools.call("search_working_memory", {"namespace": "stash"})
    assert result.startswith("No stash is reachable")


def test_a_subagent_stashes_under_its_run_not_its_namespace(working):
    sub = SessionContext("t9", ContextKind.SUBAGENT)
    stash = ToolResultStash(working, sub)
    stash.process("fetch", "c1", "x" * 10_000)
    assert working.get("stash/subagent-t9/c1") is not None
    assert sub.namespace == "subagent/t9"


class _DirectWriter:
    """A MemoryWriter that archives in the store itself (no worker): for the replies."""

    def __init__(self, store) -> None:
        self.store = store

    async def delete_memory(self, agent_id: str, entry_id: str) -> EntryOpResult:
        entry = self.store.archive(entry_id, "deleted by agent tool")
        return EntryOpResult(
            agent_id=agent_id,
            entry_id=entry.id,
            archived=True,
            archive_reason=entry.archive_reason,
            importance=entry.importance_score,
        )


async def test_delete_memory_quotes_what_it_archived_and_says_it_is_recoverable(store, working):
    tools = MemoryTools("agent-1", S1, memory=store, working=working, writer=_DirectWriter(store))
    entry = store.create("The user's dog is named\n  Biscuit", category="people/family")
    reply = await tools.call("delete_memory", {"id": entry.id})
    assert reply.startswith(f"Archived [{entry.id}] (deleted by agent tool): ")
    assert '"The user\'s dog is named Biscuit"' in reply
    assert "not deleted: it can be restored until it is purged, 90 days after" in reply
    assert store.require(entry.id).is_archived


async def test_search_memory_filters_by_created_date(tools, store, clock):
    old = store.create("Trip to Lisbon in spring")
    clock.advance(days=10)
    new = store.create("Trip to Oslo in winter")
    cut = (clock.now - timedelta(days=1)).isoformat()
    after = await tools.call("search_memory", {"query": "trip", "created_after": cut})
    before = await tools.call("search_memory", {"created_before": cut})
    assert f"[{new.id}]" in after and f"[{old.id}]" not in after
    assert f"[{old.id}]" in before and f"[{new.id}]" not in before
    bad = await tools.call("search_memory", {"query": "trip", "created_after": "last week"})
    assert bad.startswith("Error:") and "created_after" in bad
    Draft202012Validator(_specs()["search_memory"]["parameters"]).validate(
        {"query": "trip", "created_after": "2026-01-01", "created_before": "2026-02-01T00:00:00Z"}
    )


async def test_search_working_memory_category_is_a_whole_segment_prefix(tools, working):
    working.save("session/s1", "p", "pricing notes", category="research/pricing")
    working.save("session/s1", "q", "pricing elsewhere", category="researchers")
    listing = await tools.call("search_working_memory", {"category": "research"})
    found = await tools.call("search_working_memory", {"query": "pricing", "category": "research"})
    for result in (listing, found):
        assert "session/s1/p" in result and "session/s1/q" not in result


def test_a_tool_session_id_is_one_segment_so_its_namespace_stays_two():
    with pytest.raises(InvalidInput):
        SessionContext.user("session/blazor-session")


async def test_search_memory_filters_by_metadata(tools, store):
    mine = store.create("Flight to Oslo booked", metadata={"source": "user", "trip": "oslo"})
    store.create("Flight prices scraped", metadata={"source": "tool:web"})
    result = await tools.call("search_memory", {"query": "flight", "metadata": {"source": "user"}})
    assert f"[{mine.id}]" in result and "scraped" not in result
    Draft202012Validator(_specs()["search_memory"]["parameters"]).validate(
        {"query": "flight", "metadata": {"trip": "oslo"}}
    )
    bad = await tools.call("search_memory", {"query": "flight", "metadata": {"source": 3}})
    assert bad.startswith("Error:") and "metadata" in bad


def test_memory_client_search_memory_filters_by_metadata(tmp_path):
    from dreamkeeper.agent.client import MemoryClient
    from dreamkeeper.core.settings import StoreSettings

    memory = MemoryClient(None, StoreSettings(data_dir=tmp_path), "dreamkeeper")  # type: ignore[arg-type]
    store = memory.store("agent-1")
    mine = store.create("Flight to Oslo booked", metadata={"source": "user"})
    store.create("Flight prices scraped", metadata={"source": "tool:web"})
    hits = memory.search_memory("agent-1", "flight", metadata={"source": "user"})
    assert [h.entry.id for h in hits] == [mine.id]


async def test_arguments_are_checked_by_the_tool_s_model_before_any_handler_runs(tools, working):
    """A misspelt filter is refused rather than ignored, a wrong type names its field,
    and the reply does not echo the rejected input."""
    typo = await tools.call("search_working_memory", {"querry": "x"})
    assert typo.startswith("Error: bad arguments for search_working_memory: querry:")
    wrong = await tools.call("save_to_working_memory", {"key": "k", "data": ["SECRET-VALUE"]})
    assert "data: Input should be a valid string" in wrong and "SECRET-VALUE" not in wrong
    bounded = await tools.call(
        "save_to_working_memory", {"key": "k", "data": "d", "ttl_minutes": 0}
    )
    assert "ttl_minutes: Input should be greater than 0" in bounded
    assert working.list().total == 0


@settings(max_examples=150, deadline=None, database=None)
@given(
    name=st.sampled_from(sorted(TOOLS)),
    args=st.dictionaries(
        st.sampled_from(["query", "key", "data", "id", "limit", "tags", "importance", "x"]),
        st.one_of(
            st.none(),
            st.booleans(),
            st.integers(),
            st.floats(),
            st.text(max_size=20),
            st.lists(st.text(max_size=5), max_size=3),
        ),
        max_size=4,
    ),
)
async def test_whatever_arguments_arrive_a_call_returns_text_and_the_schema_agrees(name, args):
    """Generated calls: the reply is always text; when the schema rejects the
    arguments the model rejects them too (the schema and the validation are one)."""
    with tempfile.TemporaryDirectory() as tmp:
        working = FileWorkingMemoryStore(tmp, "agent-1")
        tools = MemoryTools(
            "agent-1", S1, memory=FileMemoryStore(Path(tmp), "agent-1"), working=working
        )
        reply = await tools.call(name, args)
        assert isinstance(reply, str) and reply
        schema = {s["function"]["name"]: s["function"]["parameters"] for s in tool_specs()}
        # An explicit null means "left out" (models send them for optional arguments).
        given = {key: value for key, value in args.items() if value is not None}
        if not Draft202012Validator(schema[name]).is_valid(given):
            assert reply.startswith("Error:"), (name, args, reply)
