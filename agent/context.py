"""The per-turn context: what an agent's LLM sees of memory before the user's message.

1. Long-term recall: BM25 (hybrid with embeddings) search of the user message, 8 results,
   however short ("What is Bob's phone number?" is the commonest recall there is) —
   skipped only for a message that is nothing but chit-chat ("ok", "thanks!", "hi
   there"), which would match whatever happens to mention those words.
2. First turn with no hits: the 5 most recently reinforced entries instead.
3. Delta injection: only entries not yet injected this session.
4. All of it in one "Recalled from long-term memory" system message.
5. The session's own working-memory inventory: keys, expiry, category, tags — never the
   content (the model fetches what it needs).
6. User sessions: patrol findings in working memory.
7. User sessions: subagent `-index` keys in working memory.
8. The last 20 turns, preceded by the out-of-window recall message when older turns
   exist.

Returned as OpenAI-style messages; the caller puts its system prompt first and the
user's message last. Reads only — nothing here starts a workflow.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from dreamkeeper.agent.out_of_window import OutOfWindowRecall
from dreamkeeper.agent.session import ContextKind, SessionContext
from dreamkeeper.stores.contract import ConversationStore, MemoryStore, WorkingMemoryStore
from dreamkeeper.stores.contract.working import WorkingEntry
from dreamkeeper.stores.search.bm25 import query_terms
from dreamkeeper.stores.search.query import conflict_note, format_hit, search

RECALL_LIMIT = 8
FIRST_TURN_FALLBACK = 5
# Words a message may consist of and still ask nothing of memory: acknowledgements and
# greetings. A message with any other searchable word is searched.
CHITCHAT = frozenset(
    query_terms(
        "ok okay k kk thanks thank thx ty cheers yes yeah yep yup no nope nah sure great "
        "cool nice good fine alright right hi hello hey bye goodbye lol haha hmm oh ah wow "
        "perfect awesome got understood noted please welcome morning evening night much "
        "lot sounds sound agreed exactly indeed"
    )
)
REPLAYED_TURNS = 20
INDEX_SUFFIX = "-index"

RECALLED_HEADER = "Recalled from long-term memory (relevant to this message):"
RECENT_HEADER = (
    "Recalled from long-term memory (most recent entries; nothing matched this message):"
)
WORKING_HEADER = (
    "Working memory (scratch space — use search_working_memory or get_from_working_memory "
    "to retrieve):"
)
PATROL_HEADER = (
    "Patrol findings in working memory (use get_from_working_memory with the full key to read):"
)
SUBAGENT_HEADER = (
    "Subagent results in working memory (use get_from_working_memory with the full key to read):"
)

Message = dict[str, str]


@dataclass
class TurnContext:
    messages: list[Message]
    recalled: list[str] = field(default_factory=list)  # long-term ids injected this turn
    timings: dict[str, float] = field(default_factory=dict)  # seconds per step


def format_expiry(expires_at: datetime, now: datetime) -> str:
    left = max(timedelta(0), expires_at - now)
    seconds = int(left.total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"expires in {hours}h{minutes:02d}m"
    return f"expires in {minutes}m{seconds:02d}s"


def describe_entry(entry: WorkingEntry, now: datetime) -> str:
    """Expiry, category and tags of a working-memory entry — never its content."""
    parts = [format_expiry(entry.expires_at, now)]
    if entry.category:
        parts.append(f"category: {entry.category}")
    if entry.tags:
        parts.append(f"tags: {', '.join(entry.tags)}")
    return ", ".join(parts)


def inventory_line(entry: WorkingEntry, now: datetime) -> str:
    return f"- {entry.key}: {describe_entry(entry, now)}"


class ContextBuilder:
    def __init__(
        self,
        memory: MemoryStore,
        working: WorkingMemoryStore,
        conversations: ConversationStore,
        *,
        recall: OutOfWindowRecall | None = None,
        replayed_turns: int = REPLAYED_TURNS,
    ) -> None:
        self.memory = memory
        self.working = working
        self.conversations = conversations
        self.recall = recall or OutOfWindowRecall()
        self.replayed_turns = replayed_turns
        # Delta injection: the long-term entries each conversation has already been shown.
        self._injected: dict[str, set[str]] = {}

    def build(self, session: SessionContext, user_message: str) -> TurnContext:
        clock = time.perf_counter
        started = clock()
        timings: dict[str, float] = {}
        messages: list[Message] = []
        conversation = self.conversations.conversation(session.conversation_id)
        timings["conversation"] = clock() - started

        mark = clock()
        recalled = self._long_term(session, user_message, first_turn=len(conversation) == 0)
        if recalled:
            messages.append(_system(recalled[0]))
        timings["long_term"] = clock() - mark

        mark = clock()
        now = self.working.now()
        own = self.working.list(session.namespace).entries
        if own:
            messages.append(
                _system("\n".join([WORKING_HEADER] + [inventory_line(e, now) for e in own]))
            )
        if session.kind is ContextKind.USER:
            patrol = self.working.list("patrol").entries
            if patrol:
                lines = [inventory_line(e, now) for e in patrol]
                messages.append(_system("\n".join([PATROL_HEADER, *lines])))
            index_keys = [
                e
                for e in self.working.list("subagent").entries
                if e.key.rsplit("/", 1)[-1].endswith(INDEX_SUFFIX)
            ]
            if index_keys:
                lines = [inventory_line(e, now) for e in index_keys]
                messages.append(_system("\n".join([SUBAGENT_HEADER, *lines])))
        timings["working"] = clock() - mark

        mark = clock()
        note = self.recall.message(conversation, self.replayed_turns, user_message)
        if note is not None:
            messages.append(_system(note))
        replayed = conversation.turns[-self.replayed_turns :] if self.replayed_turns > 0 else ()
        messages += [{"role": t.role, "content": t.content} for t in replayed]
        timings["conversation"] += clock() - mark
        timings["total"] = clock() - started
        return TurnContext(messages, recalled[1] if recalled else [], timings)

    def _long_term(
        self, session: SessionContext, message: str, *, first_turn: bool
    ) -> tuple[str, list[str]] | None:
        # A conversation with no turns is new or expired: it has seen nothing yet.
        seen = set() if first_turn else self._injected.get(session.conversation_id, set())
        hits = []
        if asks_memory(message):
            hits = search(self.memory, message, limit=RECALL_LIMIT)
        header = RECALLED_HEADER
        if not hits and first_turn:
            hits = search(self.memory, None, limit=FIRST_TURN_FALLBACK)
            header = RECENT_HEADER
        fresh = [h for h in hits if h.entry.id not in seen]
        self._injected[session.conversation_id] = seen | {h.entry.id for h in fresh}
        if not fresh:
            return None
        now = self.memory.now()
        lines = [
            format_hit(h.entry, now, conflict=conflict_note(self.memory, h.entry)) for h in fresh
        ]
        return "\n".join([header, *lines]), [h.entry.id for h in fresh]


def asks_memory(message: str) -> bool:
    """Whether a user message has any word worth searching memory for: one that is no
    function word (`query_terms` drops those) and no chit-chat."""
    return any(term not in CHITCHAT for term in query_terms(message))


def _system(content: str) -> Message:
    return {"role": "system", "content": content}
