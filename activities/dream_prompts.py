"""What the dream cycle asks the LLM, and how its replies are parsed.

Replies are parsed into pydantic models; anything else is `MalformedLLMOutput`, which
the activity turns into a non-retryable failure that changes nothing. Proposals are
bounded (reply size and nesting, merges per batch, ids per list, text length) so a
runaway reply cannot bloat workflow history; merged text is checked by the store's
rules in review (`policies.consolidation`). Preferences are checked by the store's
rules here: one the store would refuse is dropped and counted, never a save that fails
half-way.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pydantic import BaseModel, Field, ValidationError, field_validator

from dreamkeeper.activities.llm import parse_json_reply
from dreamkeeper.core.errors import InvalidInput, MalformedLLMOutput
from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.core.validation import MAX_CONTENT_CHARS, MAX_TAGS, validate_content, validate_tags
from dreamkeeper.policies.merge import SUBJECT_TIME, SUBJECT_TIME_END, SUBJECT_TIME_START

MAX_MERGES_PER_BATCH = 25
MAX_IDS_PER_LIST = 500
MAX_PREFERENCES = 20
MAX_PREFERENCE_CHARS = 2_000
CHARS_PER_TOKEN = 4  # a coarse, model-independent estimate for reporting

CONSOLIDATE_PROMPT = """You maintain an AI agent's long-term memory. Below are memory \
entries, each with an ID. Find entries that say the same thing or belong together and \
merge them, and find entries that are truly ephemeral (stale chatter, one-off status \
with no lasting value). Reply with one JSON object only:
{"toDelete": [ids of ephemeral entries], "toSave": [{"content": str, "category": str, \
"tags": [str], "sourceIds": [ids merged into this entry], "importance": number 0-1}], \
"superseded": [{"id": id of an outdated entry, "by": id of the newer listed entry that \
gives the current value of the same thing}]}
An outdated entry (an old address, a former manager) is history, not ephemeral: list it \
in superseded, never in toDelete, and do not merge it with its newer version.
Rules: a merged entry must keep every name, number, date, email, URL, handle and phone \
number of every source, verbatim. Use only IDs listed below. Do not list a merge's \
sources in toDelete. Entries reinforced many times or with high importance matter. \
When unsure, leave entries alone: {"toDelete": [], "toSave": []} is a fine answer."""

REPAIR_PROMPT = """A proposed merge of memory entries dropped details. Rewrite the merged \
text so that it keeps everything it has and also contains each of these, verbatim: \
{missing}. Reply with one JSON object only: {{"content": str}}."""

PREFERENCE_PROMPT = """From the conversation below, infer lasting preferences of the \
user about how the agent should behave. Thresholds: if the user was very irritated, one \
occurrence is enough; mild pushback needs two occurrences; a casual remark needs three \
or more. Ignore one-off requests. Reply with one JSON object only:
{"toSave": [{"content": "The user prefers ...", "tags": [str], "importance": number 0-1}]}
Reply {"toSave": []} when nothing qualifies."""


def _day(value: datetime) -> str:
    return value.strftime("%Y-%m-%d")


def entry_line(number: int, entry: MemoryEntry) -> str:
    meta = entry.metadata
    subject = meta.get(SUBJECT_TIME) or (
        f"{meta[SUBJECT_TIME_START]}..{meta.get(SUBJECT_TIME_END, '')}"
        if meta.get(SUBJECT_TIME_START)
        else None
    )
    head = (
        f"{number}. [ID:{entry.id}] category={entry.category or '-'} "
        f"importance={entry.importance_score:.2f} reinforced={entry.reinforcement_count}× "
        f"first={_day(entry.created_at)} last={_day(entry.last_seen_at)}"
    )
    if subject:
        head += f" subject={subject}"
    head += f" tags=[{', '.join(entry.tags)}]"
    return f"{head}\n{entry.content}"


def consolidation_messages(
    entries: Sequence[MemoryEntry],
    hints: Sequence[Sequence[str]],
    feedback: Sequence[MemoryEntry],
) -> list[dict[str, str]]:
    parts = [entry_line(n, e) for n, e in enumerate(entries, start=1)]
    body = "\n\n".join(parts)
    if hints:
        body += "\n\nLikely duplicates (merge if they say the same thing):\n" + "\n".join(
            "- " + ", ".join(group) for group in hints
        )
    if feedback:
        body += "\n\nRecent feedback from the user (context, not entries):\n" + "\n".join(
            f"- {f.content}" for f in feedback
        )
    return [
        {"role": "system", "content": CONSOLIDATE_PROMPT},
        {"role": "user", "content": body},
    ]


def repair_messages(
    sources: Sequence[MemoryEntry], merged: str, missing: Sequence[str]
) -> list[dict[str, str]]:
    listed = "\n\n".join(f"Source [ID:{s.id}]:\n{s.content}" for s in sources)
    return [
        {"role": "system", "content": REPAIR_PROMPT.format(missing=", ".join(missing))},
        {"role": "user", "content": f"{listed}\n\nMerged text:\n{merged}"},
    ]


def prompt_tokens(messages: Sequence[dict[str, str]]) -> int:
    return sum(len(m["content"]) for m in messages) // CHARS_PER_TOKEN


def _bounded_text(value: str) -> str:
    # One character past the limit survives, so the review sees it is too long.
    return value[: MAX_CONTENT_CHARS + 1]


class ProposedMergeReply(BaseModel):
    content: str
    category: str | None = None
    tags: list[str] = Field(default_factory=list)
    source_ids: list[str] = Field(default_factory=list, alias="sourceIds")
    importance: float | None = Field(default=None, ge=0.0, le=1.0)

    @field_validator("content")
    @classmethod
    def _text(cls, value: str) -> str:
        return _bounded_text(value)

    @field_validator("tags", "source_ids")
    @classmethod
    def _bounded(cls, value: list[str]) -> list[str]:
        return [str(v) for v in value[:MAX_IDS_PER_LIST]]


class SupersededReply(BaseModel):
    id: str
    by: str

    @field_validator("id", "by", mode="before")
    @classmethod
    def _text(cls, value: object) -> str:
        return str(value)[:64]


class ConsolidationReply(BaseModel):
    to_delete: list[str] = Field(default_factory=list, alias="toDelete")
    to_save: list[ProposedMergeReply] = Field(default_factory=list, alias="toSave")
    superseded: list[SupersededReply] = Field(default_factory=list)

    @field_validator("superseded", mode="before")
    @classmethod
    def _bounded_pairs(cls, value: object) -> object:
        # A garbled pair is no proposal: dropped, not a reason to lose the whole reply.
        if not isinstance(value, list):
            return []
        return [
            p
            for p in value[:MAX_IDS_PER_LIST]
            if isinstance(p, dict) and isinstance(p.get("id"), str) and isinstance(p.get("by"), str)
        ]

    @field_validator("to_delete")
    @classmethod
    def _bounded(cls, value: list[str]) -> list[str]:
        return [str(v) for v in value[:MAX_IDS_PER_LIST]]


def _model(model: type[BaseModel], text: str, what: str):
    raw = parse_json_reply(text, what)
    if not isinstance(raw, dict):
        raise MalformedLLMOutput(f"{what} reply is not a JSON object")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"])
        raise MalformedLLMOutput(f"{what} reply invalid at {where}: {error['msg']}") from None


def parse_consolidation(text: str) -> ConsolidationReply:
    reply = _model(ConsolidationReply, text, "consolidation")
    if len(reply.to_save) > MAX_MERGES_PER_BATCH:
        reply = reply.model_copy(update={"to_save": reply.to_save[:MAX_MERGES_PER_BATCH]})
    return reply


class RepairReply(BaseModel):
    content: str

    @field_validator("content")
    @classmethod
    def _text(cls, value: str) -> str:
        return _bounded_text(value)


def parse_repair(text: str) -> RepairReply:
    return _model(RepairReply, text, "merge repair")


class InferredPreference(BaseModel):
    content: str = Field(min_length=1, max_length=MAX_PREFERENCE_CHARS)
    tags: list[str] = Field(default_factory=list)
    importance: float = Field(default=0.6, ge=0.0, le=1.0)


class PreferenceReply(BaseModel):
    to_save: list[InferredPreference] = Field(default_factory=list, alias="toSave")
    dropped: int = 0  # preferences the store would refuse
    ignored: int = 0  # preferences past MAX_PREFERENCES


def store_valid_preference(item: object) -> InferredPreference:
    """One reply item as a preference the store accepts — with the `inferred` tag the
    workflow adds, so at most MAX_TAGS − 1 of its own. InvalidInput otherwise."""
    try:
        pref = InferredPreference.model_validate(item)
    except ValidationError as exc:
        raise InvalidInput(f"preference invalid: {exc.errors()[0]['msg']}") from None
    validate_content(pref.content)
    tags = validate_tags(pref.tags)
    if len(tags) > MAX_TAGS - 1:
        raise InvalidInput(f"too many tags: {len(tags)} (at most {MAX_TAGS - 1})")
    return pref.model_copy(update={"tags": tags})


def parse_preferences(text: str) -> PreferenceReply:
    raw = parse_json_reply(text, "preference inference")
    if not isinstance(raw, dict):
        raise MalformedLLMOutput("preference inference reply is not a JSON object")
    items = raw.get("toSave", [])
    if not isinstance(items, list):
        raise MalformedLLMOutput("preference inference reply invalid at toSave: not a list")
    kept, dropped = [], 0
    for item in items[:MAX_PREFERENCES]:
        try:
            kept.append(store_valid_preference(item))
        except InvalidInput:
            dropped += 1
    return PreferenceReply(
        toSave=kept, dropped=dropped, ignored=max(0, len(items) - MAX_PREFERENCES)
    )
