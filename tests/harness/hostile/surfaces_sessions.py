"""The short-lived memories' files: working-memory segments, conversation sessions and
their archive, and the conversation log preference inference reads."""

from __future__ import annotations

import os

from hypothesis import strategies as st

from dreamkeeper.activities.preferences import transcript
from dreamkeeper.stores.conversation.conversation_log import ConversationLog
from dreamkeeper.stores.files.conversation_memory import FileConversationStore
from dreamkeeper.stores.files.working_memory import FileWorkingMemoryStore
from tests.harness.hostile.sandbox import (
    AGENT,
    T0,
    Sandbox,
    Surface,
    Violation,
    mark_after,
    mark_before,
    try_write,
)
from tests.harness.hostile.strategies import (
    categories,
    garbage,
    hostile_text,
    json_values,
    jsonable,
    maybe,
    sane_tags,
    sane_text,
    tags_lists,
    times,
)

# -- surface: working-memory segment files ------------------------------------------------

_working_entry = st.fixed_dictionaries(
    {
        "key": maybe(
            st.one_of(
                hostile_text,
                json_values,
                st.sampled_from(["patrol/x/k", "session/s1/../../x", "session"]),
            ),
            st.from_regex(r"session/s[0-9]/[a-z]{1,8}", fullmatch=True),
        ),
        "value": maybe(st.one_of(hostile_text, json_values), sane_text),
        "storedAt": maybe(st.one_of(times, json_values), "2026-01-01T11:59:00+00:00"),
        "expiresAt": maybe(st.one_of(times, json_values), "2026-01-01T12:30:00"),
        "category": maybe(st.one_of(categories, json_values), None),
        "tags": maybe(st.one_of(tags_lists, json_values), sane_tags),
    }
)
working_files = st.tuples(
    st.sampled_from(["session.json"] * 5 + ["patrol.json", "x y.json", ".session.json", "@dir"]),
    st.one_of(
        *[
            st.lists(_working_entry, min_size=1, max_size=4).map(
                lambda items: (
                    "bytes",
                    jsonable({"entries": items}).encode("utf-8", "surrogatepass"),
                )
            )
            for _ in range(4)
        ],
        st.lists(_working_entry, max_size=4).map(
            lambda items: ("bytes", jsonable({"entries": items}).encode("utf-8", "surrogatepass"))
        ),
        garbage.map(lambda g: ("bytes", g if isinstance(g, bytes) else g.encode())),
        st.sampled_from(
            [("link-secret", b""), ("fifo", b""), ("directory", b""), ("link-dangling", b"")]
        ),
    ),
)


def run_working(sandbox: Sandbox, example) -> bool:
    name, (kind, payload) = example
    if name == "@dir":  # the directory itself is a link out of the agent's directory
        sandbox.plant("working-memory", "link-dir")
    else:
        sandbox.plant(os.path.join("working-memory", name), kind, payload)
    mark_before(sandbox)
    memory = FileWorkingMemoryStore(sandbox.data, AGENT, clock=lambda: T0)
    listing = memory.list()
    memory.search("scratch value")
    for entry in listing.entries:
        memory.get(entry.key)
    mark_after(sandbox)
    try_write(lambda: memory.save("session/s1", "fresh", "written after the plant"))
    try_write(lambda: memory.delete("session/s1/notes"))
    try_write(lambda: memory.clear("session/s1"))
    try_write(memory.sweep)
    return not listing.entries


WORKING = Surface("working-memory segment files", working_files, run_working)


# -- surface: conversation session files and the conversation log -------------------------

_turn = st.fixed_dictionaries(
    {
        "n": maybe(st.one_of(st.integers(-(10**30), 10**30), json_values), 1),
        "role": maybe(
            st.one_of(st.sampled_from(["user", "assistant", "system"]), json_values), "user"
        ),
        "content": maybe(st.one_of(hostile_text, json_values), sane_text),
        "at": maybe(st.one_of(times, json_values), "2026-01-01T11:59:00"),
    }
)
_session = st.fixed_dictionaries(
    {
        "started_at": maybe(st.one_of(times, json_values), "2026-01-01T11:00:00"),
        "last_at": maybe(st.one_of(times, json_values), "2026-01-01T11:59:00"),
        "next_n": maybe(st.one_of(st.integers(-(10**30), 10**30), json_values), 2),
        "archived_lines": maybe(json_values, 0),
        "turns": maybe(
            st.one_of(st.lists(_turn, max_size=3), json_values),
            [{"n": 1, "role": "user", "content": "hello", "at": "2026-01-01T11:59:00"}],
        ),
    }
)
conversation_files = st.tuples(
    st.one_of(
        _session.map(lambda s: jsonable(s).encode("utf-8", "surrogatepass")),
        garbage.map(lambda g: g if isinstance(g, bytes) else g.encode()),
    ),
    st.lists(
        st.one_of(
            _turn.map(lambda t: jsonable(t).encode("utf-8", "surrogatepass")),
            garbage.map(lambda g: g if isinstance(g, bytes) else g.encode()),
        ),
        max_size=3,
    ),
    st.sampled_from(
        ["bytes"] * 6
        + [
            "link-secret",
            "fifo",
            "directory",
            "@conversations",
            "@conversations/archive",
            "@conversation-log",
        ]
    ),
)


def run_conversation(sandbox: Sandbox, example) -> bool:
    session, archive, kind = example
    if kind.startswith("@"):  # a directory of the store is a link out of the agent's
        sandbox.plant(kind[1:], "link-dir")
        kind = "bytes"
    sandbox.plant(os.path.join("conversations", "sessions", "s1.json"), kind, session)
    sandbox.plant(
        os.path.join("conversations", "archive", "s1.jsonl"), "bytes", b"\n".join(archive) + b"\n"
    )
    mark_before(sandbox)
    memory = FileConversationStore(sandbox.data, AGENT, clock=lambda: T0)
    conversation = memory.conversation("s1")
    memory.sessions()
    memory.sessions(include_expired=True)
    mark_after(sandbox)
    try_write(lambda: memory.add_turn("s1", "user", "a turn after the plant"))
    memory.conversation("s1")
    return len(conversation) == 0


CONVERSATION = Surface("conversation session files", conversation_files, run_conversation)

_logged = st.fixed_dictionaries(
    {
        "sessionId": maybe(st.one_of(hostile_text, json_values), "s1"),
        "role": maybe(
            st.one_of(st.sampled_from(["user", "assistant", "tool"]), json_values), "user"
        ),
        "content": maybe(st.one_of(hostile_text, json_values), sane_text),
        "at": maybe(st.one_of(times, json_values), "2026-01-01T11:59:00+00:00"),
    }
)
log_files = st.one_of(
    st.lists(
        st.one_of(
            _logged.map(lambda t: jsonable(t).encode("utf-8", "surrogatepass")),
            garbage.map(lambda g: g if isinstance(g, bytes) else g.encode()),
        ),
        max_size=5,
    ).map(lambda lines: ("bytes", b"\n".join(lines))),
    st.sampled_from([("link-secret", b""), ("fifo", b""), ("directory", b"")]),
)


def run_log(sandbox: Sandbox, example) -> bool:
    kind, payload = example
    rel = os.path.join("conversation-log", "processed", "turns-20260101T000000.jsonl")
    sandbox.plant(rel, kind, payload)
    mark_before(sandbox)
    turns = ConversationLog(sandbox.documents).read(rel)
    transcript(turns)
    for turn in turns:
        if turn.role not in ("user", "assistant") or not isinstance(turn.content, str):
            raise Violation("a malformed turn was read")
    return not turns


CONVERSATION_LOG = Surface("conversation log lines", log_files, run_log)
