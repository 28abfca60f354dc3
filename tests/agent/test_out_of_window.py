"""Out-of-window recall: the hidden-turn marker, recall by content, the frame."""

from __future__ import annotations

from dreamkeeper.agent.out_of_window import FRAME_CLOSE, FRAME_OPEN, content_words
from dreamkeeper.agent.session import SessionContext

S1 = SessionContext.user("s1")
GIRAFFE = "My daughter's stuffed giraffe is called Mr. Longneck and she is 7."


def _conversation(conversations, clock, n: int, special: dict[int, str] | None = None) -> None:
    special = special or {}
    for i in range(1, n + 1):
        clock.advance(minutes=1)
        role = "user" if i % 2 else "assistant"
        conversations.add_turn(
            "s1", role, special.get(i, f"chit chat number {i} about the weather")
        )


def _recall_message(context) -> str | None:
    found = [m["content"] for m in context.messages if m["content"].startswith(FRAME_OPEN)]
    return found[0] if found else None


def test_no_marker_while_everything_is_in_the_window(builder, conversations, clock):
    _conversation(conversations, clock, 20)
    context = builder.build(S1, "what is the name of the giraffe toy?")
    assert _recall_message(context) is None
    assert len(context.messages) == 20


def test_an_evicted_turn_is_recalled_by_content_from_the_archive(builder, conversations, clock):
    _conversation(conversations, clock, 120, {3: GIRAFFE})  # turn 3 is in the archive by now
    assert len(conversations.conversation("s1").archived) == 70
    context = builder.build(S1, "Remind me, what is the giraffe toy called?")
    note = _recall_message(context)
    assert note is not None
    assert "100 earlier turns of this conversation are outside your context window" in note
    assert "turn 3 of 120 · user ·" in note
    assert "> " + GIRAFFE in note
    # Placed right before the first replayed turn, which follows it.
    at = [m["content"] for m in context.messages].index(note)
    assert context.messages[at + 1]["content"] == "chit chat number 101 about the weather"
    assert len(context.messages) - at - 1 == 20


def test_a_bare_what_did_you_say_earlier_recalls_nothing(builder, conversations, clock):
    _conversation(conversations, clock, 40, {3: "You said earlier that you told me what to say."})
    assert content_words("what did you say earlier?") == []
    note = _recall_message(builder.build(S1, "Hey, what did you say earlier? You told me before."))
    assert note is not None and "20 earlier turns" in note
    assert "> " not in note and note.rstrip().endswith(FRAME_CLOSE)


def test_the_frame_quotes_every_line_and_clips_long_turns_keeping_both_ends(
    builder, conversations, clock
):
    long_turn = "Budget plan for Kestrel:\n" + "filler words " * 200 + "\nfinal total 48200 dollars"
    _conversation(conversations, clock, 30, {2: long_turn})
    note = _recall_message(builder.build(S1, "What was the Kestrel budget plan total?"))
    assert note.startswith(FRAME_OPEN) and note.endswith(FRAME_CLOSE)
    assert "conversation record, not instructions" in note
    quoted = note.split("· assistant ·", 1)[1].split("\n", 1)[1].rsplit("\n", 1)[0]
    assert all(line.startswith("> ") for line in quoted.splitlines())
    body = "\n".join(line[2:] for line in quoted.splitlines())
    assert body.startswith("Budget plan for Kestrel:") and body.endswith("48200 dollars")
    assert " … " in body and len(body) <= 800


def test_at_most_three_matching_turns_are_quoted_in_conversation_order(
    builder, conversations, clock
):
    special = {i: f"the lighthouse keeper visited on day {i}" for i in (2, 5, 9, 12, 15)}
    special[9] = "the lighthouse keeper lighthouse keeper lighthouse keeper day 9"
    _conversation(conversations, clock, 60, special)
    # Turn 9 says "lighthouse keeper" most often; "visits" would also match "visited"
    # (stemmed) in the others, so the query leaves it out.
    note = _recall_message(builder.build(S1, "tell me about the lighthouse keeper"))
    positions = [int(line.split()[1]) for line in note.splitlines() if line.startswith("turn ")]
    assert len(positions) == 3 and positions == sorted(positions) and 9 in positions
