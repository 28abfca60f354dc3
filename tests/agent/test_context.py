"""The per-turn context builder's 8 steps."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dreamkeeper.agent.context import (
    PATROL_HEADER,
    RECALLED_HEADER,
    RECENT_HEADER,
    SUBAGENT_HEADER,
    WORKING_HEADER,
)
from dreamkeeper.agent.session import ContextKind, SessionContext

S1 = SessionContext.user("s1")


def _system(context, header: str) -> str | None:
    found = [m["content"] for m in context.messages if m["content"].startswith(header)]
    return found[0] if found else None


def _turn(conversations, text: str) -> None:
    conversations.add_turn("s1", "user", text)
    conversations.add_turn("s1", "assistant", "ok")


def test_recall_is_delta_injected_across_turns(builder, store, conversations, clock):
    chicago = store.create(
        "The user lives in Chicago and works downtown", category="user-preferences"
    )
    context = builder.build(S1, "What's the weather like in Chicago this week?")
    assert chicago.id in _system(context, RECALLED_HEADER) and context.recalled == [chicago.id]
    _turn(conversations, "What's the weather like in Chicago this week?")
    again = builder.build(S1, "And how about Chicago traffic downtown tomorrow?")
    assert _system(again, RECALLED_HEADER) is None and again.recalled == []
    _turn(conversations, "And how about Chicago traffic downtown tomorrow?")
    deepdish = store.create("Favourite Chicago food: deep dish at Lou Malnati's", category="food")
    third = builder.build(S1, "Where should we eat in Chicago tonight, any food ideas?")
    assert third.recalled == [deepdish.id]  # only the entry not yet shown


def test_first_turn_with_no_hits_falls_back_to_recent_entries(builder, store, conversations, clock):
    for i in range(7):
        clock.advance(minutes=1)
        store.create(f"Fact number {i} about gardening tomatoes", category="garden")
    context = builder.build(S1, "hi")
    fallback = _system(context, RECENT_HEADER)
    assert fallback is not None and len(context.recalled) == 5
    assert "Fact number 6" in fallback  # most recently seen first
    _turn(conversations, "hi")
    second = builder.build(S1, "distant quasars and astrophysics tonight")
    assert second.recalled == [] and _system(second, RECENT_HEADER) is None


def test_short_questions_get_recall_and_chitchat_does_not(builder, store, conversations):
    phone = store.create("Bob's phone number is +1 404-519-2406.", category="people/bob")
    thanks = store.create("Thanks notes go in the shared folder; ok to reuse.", category="misc")
    _turn(conversations, "earlier turn")
    # 27 characters: the commonest recall there is, searched like any other message.
    context = builder.build(S1, "What is Bob's phone number?")
    assert context.recalled[:1] == [phone.id]
    assert "+1 404-519-2406" in _system(context, RECALLED_HEADER)
    builder._injected.clear()
    assert builder.build(S1, "Chicago?").recalled == []  # searched: nothing matches
    # Nothing but acknowledgements: no search, though an entry holds those very words.
    for message in ("ok", "Thanks!", "ok, thanks a lot", "hi there", "Got it"):
        assert builder.build(S1, message).recalled == [], message
    assert thanks.id in builder.build(S1, "Where do thanks notes go?").recalled


@given(st.text(max_size=40))
@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_any_short_message_builds_a_context(builder, conversations, message):
    context = builder.build(S1, message)
    assert context.messages is not None


def test_working_memory_inventory_shows_keys_never_content(builder, working):
    working.save("session/s1", "emails_inbox", "SECRET BODY", category="email", tags=["inbox"])
    working.save("session/s2", "other", "not mine")
    working.save("patrol/heartbeat", "briefing", "PATROL BODY", background=True, tags=["urgent"])
    working.save("subagent/t1", "research-index", "INDEX BODY", background=True)
    working.save("subagent/t1", "raw-notes", "NOTES BODY", background=True)
    context = builder.build(S1, "hi")
    own = _system(context, WORKING_HEADER)
    assert "- session/s1/emails_inbox: expires in 5m00s, category: email, tags: inbox" in own
    assert "session/s2/other" not in own
    patrol = _system(context, PATROL_HEADER)
    assert "- patrol/heartbeat/briefing: expires in 4h00m, tags: urgent" in patrol
    assert "subagent/t1/research-index" in _system(context, SUBAGENT_HEADER)
    everything = "\n".join(m["content"] for m in context.messages)
    assert "raw-notes" not in everything
    assert not any(body in everything for body in ("SECRET", "PATROL BODY", "INDEX BODY"))


def test_a_patrol_sees_its_own_namespace_and_no_findings_section(builder, working):
    working.save("patrol/heartbeat", "briefing", "x", background=True)
    working.save("subagent/t1", "research-index", "x", background=True)
    patrol = SessionContext("heartbeat", ContextKind.PATROL)
    context = builder.build(patrol, "run the heartbeat checks now please")
    assert "patrol/heartbeat/briefing" in _system(context, WORKING_HEADER)
    assert _system(context, PATROL_HEADER) is None and _system(context, SUBAGENT_HEADER) is None


def test_the_last_twenty_turns_are_replayed_in_order(builder, conversations):
    for i in range(30):
        conversations.add_turn("s1", "user" if i % 2 == 0 else "assistant", f"t{i}")
    replayed = [m for m in builder.build(S1, "next").messages if m["role"] != "system"]
    assert [m["content"] for m in replayed] == [f"t{i}" for i in range(10, 30)]
    assert replayed[0]["role"] == "user" and replayed[1]["role"] == "assistant"


def test_a_new_session_after_expiry_is_shown_its_memories_again(
    builder, store, conversations, clock
):
    entry = store.create("The user lives in Chicago and works downtown", category="places")
    question = "Anything happening in Chicago downtown this weekend?"
    assert builder.build(S1, question).recalled == [entry.id]
    _turn(conversations, question)
    assert builder.build(S1, question).recalled == []
    clock.advance(hours=2)  # the session expires: the next turn starts a new conversation
    assert builder.build(S1, question).recalled == [entry.id]


def test_expired_working_entries_leave_the_inventory(builder, working, clock):
    working.save("session/s1", "k", "v", ttl=timedelta(minutes=1))
    assert _system(builder.build(S1, "hi"), WORKING_HEADER) is not None
    clock.advance(minutes=2)
    assert _system(builder.build(S1, "hi"), WORKING_HEADER) is None
