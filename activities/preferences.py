"""Preference inference activities: rotate the conversation log, infer from it."""

from __future__ import annotations

import asyncio

from temporalio import activity
from temporalio.exceptions import ApplicationError

from dreamkeeper.activities.dream_prompts import PREFERENCE_PROMPT, parse_preferences
from dreamkeeper.activities.llm import ask_llm
from dreamkeeper.activities.stores import StoreRegistry
from dreamkeeper.core.dream_payloads import (
    CycleInput,
    InferInput,
    InferredFact,
    InferResult,
    RotateResult,
)
from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.settings import LLMSettings
from dreamkeeper.policies.preferences import needs_permission
from dreamkeeper.stores.conversation.conversation_log import (
    ConversationLog,
    LoggedTurn,
    rotated_name,
)

MAX_TRANSCRIPT_CHARS = 60_000


def rotation_name(as_of) -> str:
    return f"turns-{as_of:%Y%m%dT%H%M%S}"


def transcript(turns: list[LoggedTurn]) -> str:
    """Turns grouped by session, newest kept when the log is longer than the budget."""
    by_session: dict[str, list[LoggedTurn]] = {}
    for turn in turns:
        by_session.setdefault(turn.session_id, []).append(turn)
    blocks = []
    for session, items in by_session.items():
        lines = [f"{t.at:%Y-%m-%d %H:%M} {t.role}: {t.content}" for t in items]
        blocks.append(f"## session {session}\n" + "\n".join(lines))
    text = "\n\n".join(blocks)
    return text[-MAX_TRANSCRIPT_CHARS:]


class PreferenceActivities:
    def __init__(self, stores: StoreRegistry, llm: LLMSettings) -> None:
        self._stores = stores
        self._llm = llm

    @activity.defn(name="rotate_conversation_log")
    def rotate_conversation_log(self, inp: CycleInput) -> RotateResult:
        with self._stores.using(inp.agent_id, store_id=inp.store_id) as store:
            log = ConversationLog(store.documents)
            rotated = log.rotate(rotation_name(inp.as_of))
            if rotated is None:
                return RotateResult()
            # The rotated log's document name, not a path: any worker can read it.
            return RotateResult(path=rotated, turns=len(log.read(rotated)))

    @activity.defn(name="infer_preferences")
    async def infer_preferences(self, inp: InferInput) -> InferResult:
        if not self._llm.configured:
            return InferResult(skipped="no LLM configured: preference inference skipped")
        with self._stores.using(inp.agent_id, heartbeat=False) as store:
            # Only a log this agent's own rotation produced may be read.
            try:
                name = rotated_name(inp.path, inp.agent_id)
            except InvalidInput as exc:
                raise ApplicationError(
                    str(exc), type=InvalidInput.failure_type, non_retryable=True
                ) from None
            log = ConversationLog(store.documents)
        turns = await asyncio.to_thread(log.read, name)
        if not turns:
            return InferResult(skipped="the conversation log had no readable turns")
        messages = [
            {"role": "system", "content": PREFERENCE_PROMPT},
            {"role": "user", "content": transcript(turns)},
        ]
        reply = await ask_llm(
            self._llm, messages, parse_preferences, f"preference inference of {inp.agent_id}"
        )
        if reply.dropped or reply.ignored:
            activity.logger.warning(
                "preference inference of %s: dropped %d preference(s) the store would "
                "refuse, ignored %d past the cap",
                inp.agent_id,
                reply.dropped,
                reply.ignored,
            )
        return InferResult(
            facts=[
                InferredFact(
                    content=p.content,
                    tags=p.tags,
                    importance=p.importance,
                    requires_user_permission=needs_permission(p.content),
                )
                for p in reply.to_save
            ],
            dropped=reply.dropped,
            ignored=reply.ignored,
        )
