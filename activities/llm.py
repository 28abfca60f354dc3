"""An OpenAI-compatible chat endpoint over httpx, and the save-enrichment contract.

Errors are sorted for Temporal: a 4xx or a reply that does not parse is non-retryable
(retrying will not fix it; the original stays), a 5xx or a connection failure is
retryable (bounded by the activity's retry policy).

Replies are hostile input: the HTTP body is read to at most `MAX_HTTP_BODY_BYTES`, the
reply text parsed by `stores.safe_json` (at most `MAX_REPLY_BYTES`, nested at most
`MAX_REPLY_DEPTH`), and anything a parser cannot use — too big, too deep, not JSON, the
wrong shape, or a parser's own surprise — is `MalformedLLMOutput` at once, never a
retry. Enrichment facts are checked against exactly the store's rules before anything
is saved: a fact the store would refuse is dropped and counted, never a save that fails
half-way; a reply has at most `MAX_FACTS_PER_REPLY` facts (the rest ignored, counted).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from temporalio import activity
from temporalio.exceptions import ApplicationError

from dreamkeeper.core.errors import (
    InvalidInput,
    LLMRejected,
    LLMUnavailable,
    MalformedLLMOutput,
)
from dreamkeeper.core.settings import LLMSettings
from dreamkeeper.core.validation import (
    MAX_CONTENT_CHARS,
    MAX_REPLACES,
    validate_category,
    validate_content,
    validate_metadata,
    validate_tags,
)
from dreamkeeper.stores import safe_json

SUBJECT_TIME_KEYS = ("subjectTime", "subjectTimeStart", "subjectTimeEnd")
# A reply's text: enough for any honest answer (20 facts of a 20,000-character note, a
# batch of merges), small enough that what it becomes fits a Temporal payload.
MAX_REPLY_BYTES = 524_288
MAX_REPLY_DEPTH = 8  # replies nest 4 deep: {"toSave": [{"tags": [...]}]}
MAX_HTTP_BODY_BYTES = 8 * 1_048_576  # the completion wrapping the reply, escapes and all
MAX_FACTS_PER_REPLY = 20


async def chat(settings: LLMSettings, messages: list[dict[str, str]]) -> str:
    if not settings.base_url:
        raise LLMRejected("no LLM configured")
    headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
    url = f"{settings.base_url}/chat/completions"
    body = {"model": settings.model, "messages": messages, "temperature": 0}
    try:
        async with httpx.AsyncClient(timeout=settings.timeout_seconds) as http:
            async with http.stream("POST", url, json=body, headers=headers) as response:
                status = response.status_code
                data = await _read_bounded(response, MAX_HTTP_BODY_BYTES if status < 400 else 200)
    except httpx.HTTPError as exc:
        raise LLMUnavailable(f"{url}: {type(exc).__name__}: {exc}") from None
    if 400 <= status < 500:
        text = data[:200].decode("utf-8", "replace")
        raise LLMRejected(f"{url} answered {status}: {text}")
    if status >= 500:
        raise LLMUnavailable(f"{url} answered {status}")
    if len(data) > MAX_HTTP_BODY_BYTES:
        raise MalformedLLMOutput(f"the completion is larger than {MAX_HTTP_BODY_BYTES} bytes")
    try:
        raw = safe_json.loads(data, max_bytes=MAX_HTTP_BODY_BYTES, max_depth=MAX_REPLY_DEPTH)
        content = raw["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):  # UnsafeJSON is a ValueError
        raise MalformedLLMOutput("not an OpenAI-style chat completion") from None
    if not isinstance(content, str):
        raise MalformedLLMOutput("the completion's message content is not text")
    return content


async def _read_bounded(response: httpx.Response, limit: int) -> bytes:
    """The body, but at most `limit + 1` bytes of it (so the caller sees it is larger)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            break
    return b"".join(chunks)[: limit + 1]


HEARTBEAT_EVERY_SECONDS = 2.0


async def heartbeating(call):
    """Await an LLM call while heartbeating, so a worker that dies mid-call is noticed
    within the heartbeat timeout instead of the whole start-to-close timeout."""
    task = asyncio.ensure_future(call)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=HEARTBEAT_EVERY_SECONDS)
            if done:
                return task.result()
            activity.heartbeat("waiting for the LLM")
    finally:
        task.cancel()


T = TypeVar("T")


async def ask_llm(
    settings: LLMSettings, messages: list[dict[str, str]], parse: Callable[[str], T], what: str
) -> T:
    """One LLM call from inside an activity, heartbeating, with its errors sorted for
    Temporal: refused or unparseable → non-retryable, unavailable → retryable. Parsing
    is deterministic: whatever a parser raises on a reply, asking again for the same
    reply cannot help, so every parse failure is `MalformedLLMOutput`."""
    try:
        text = await heartbeating(chat(settings, messages))
        try:
            return parse(text)
        except MalformedLLMOutput:
            raise
        except Exception as exc:  # noqa: BLE001 - a parser's surprise is still a bad reply
            activity.logger.exception("%s: the reply could not be parsed", what)
            raise MalformedLLMOutput(
                f"{what} reply could not be parsed ({type(exc).__name__})"
            ) from None
    except (LLMRejected, MalformedLLMOutput, LLMUnavailable) as exc:
        if not exc.retryable:
            activity.logger.warning("%s failed for good: %s", what, exc)
        raise ApplicationError(
            str(exc), type=exc.failure_type, non_retryable=not exc.retryable
        ) from None


def unfence(text: str) -> str:
    """The reply without a Markdown code fence around it (```json ... ```). Linear in
    the text: a regular expression with `\\s*` before the closing fence took quadratic
    time on a long run of whitespace."""
    text = text.strip()
    if text.startswith("```"):
        text = text[3:]
        if text[:4].lower() == "json":
            text = text[4:]
    if text.endswith("```"):
        text = text[:-3]
    return text.strip()


def parse_json_reply(text: str, what: str) -> object:
    """JSON from an LLM reply, tolerating a Markdown code fence around it; bounded in
    size and nesting (`stores.safe_json`)."""
    if not isinstance(text, str):
        raise MalformedLLMOutput(f"{what} reply is not text")
    if len(text) > MAX_REPLY_BYTES:  # before any scan of it
        raise MalformedLLMOutput(f"{what} reply is longer than {MAX_REPLY_BYTES} bytes")
    try:
        return safe_json.loads(unfence(text), max_bytes=MAX_REPLY_BYTES, max_depth=MAX_REPLY_DEPTH)
    except safe_json.UnsafeJSON as exc:
        raise MalformedLLMOutput(f"{what} reply is not usable JSON: {exc}") from None


_ID = re.compile(r"[0-9a-f]{12}")


class EnrichedFact(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    content: str = Field(min_length=1, max_length=MAX_CONTENT_CHARS)
    category: str | None = None
    tags: list[str] = Field(default_factory=list)
    importance: float = Field(default=0.5, ge=0.0, le=1.0)
    metadata: dict[str, str] | None = None
    replaces: list[str] = Field(default_factory=list)
    # When the fact became true, read from the note ("moved here last week"): text here,
    # checked by the host against the save time before it is used (`valid_from_proposal`).
    valid_from: str | None = Field(default=None, alias="validFrom")

    @field_validator("valid_from", mode="before")
    @classmethod
    def _text_only(cls, value: object) -> str | None:
        # Anything but a short string is no proposal: the fact is kept without it.
        return value if isinstance(value, str) and 0 < len(value) <= 64 else None

    @field_validator("replaces", mode="before")
    @classmethod
    def _ids_only(cls, value: object) -> list[str]:
        # Anything but a short list of well-formed ids is no proposal at all; whether
        # an id was shown, and may be replaced, the host decides.
        if not isinstance(value, list):
            return []
        return [v for v in value[:MAX_REPLACES] if isinstance(v, str) and _ID.fullmatch(v)]

    @field_validator("importance")
    @classmethod
    def _clamp(cls, value: float) -> float:
        return min(0.95, max(0.2, value))  # the prompt's range; the host enforces it

    @field_validator("metadata")
    @classmethod
    def _subject_time_only(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if not value:
            return None
        return {k: v for k, v in value.items() if k in SUBJECT_TIME_KEYS} or None


ENRICH_PROMPT = """You turn a raw note an AI agent wants to remember into focused, \
self-contained long-term memory entries. Reply with a JSON array only, no prose. Each \
element: {"content": str, "category": str or null (like "user-preferences/timezone"), \
"tags": [str], "importance": number 0.2-0.95, "metadata": {"subjectTime" | \
"subjectTimeStart" | "subjectTimeEnd": ISO date} (only when confident), "replaces": \
[id] (only ids listed under "Existing memories", and only when this fact gives a new \
value for exactly the same thing, making that memory outdated), "validFrom": ISO date \
(only when the note says when the fact became or becomes true, e.g. "last week", \
"starting Monday": read against the note's "Saved at")}. Keep every name, number, \
date, email, URL and handle verbatim. Reply [] if nothing is worth keeping."""

EXISTING_HEADER = "Existing memories (id, category: text):"


SAVED_AT = "Saved at:"


def enrich_message(
    note: str, existing: list[tuple[str, str | None, str]], saved_at: datetime | None = None
) -> str:
    """The user message of an enrichment call: the note, when it was saved (what
    relative dates in it are read against), and the nearest existing memories a fact of
    it may replace (id, category, text)."""
    parts = [note]
    if saved_at is not None:
        parts += ["", f"{SAVED_AT} {saved_at.isoformat(timespec='minutes')} ({saved_at:%A})"]
    if existing:
        lines = [f"- [{i}] {c or 'uncategorized'}: {' '.join(t.split())}" for i, c, t in existing]
        parts += ["", EXISTING_HEADER, *lines]
    return "\n".join(parts)


@dataclass(frozen=True)
class Enrichment:
    """A parsed enrichment reply: the facts the store will accept, and how many it
    would not (`dropped`) or that came past the cap (`ignored`)."""

    facts: list[EnrichedFact]
    dropped: int = 0
    ignored: int = 0


def store_valid_fact(item: object) -> EnrichedFact:
    """One reply item as a fact the store accepts as it stands — content, tags,
    subject-time metadata and importance checked by the store's own validators (an
    invalid category becomes None: the caller's applies). InvalidInput otherwise."""
    try:
        fact = EnrichedFact.model_validate(item)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"]) or "item"
        raise InvalidInput(f"{where}: {error['msg']}") from None
    validate_content(fact.content)
    try:
        category = validate_category(fact.category) if fact.category else None
    except InvalidInput:
        category = None
    return fact.model_copy(
        update={
            "category": category,
            "tags": validate_tags(fact.tags),
            "metadata": validate_metadata(fact.metadata) or None,
        }
    )


def parse_enrichment(text: str) -> Enrichment:
    raw = parse_json_reply(text, "enrichment")
    if not isinstance(raw, list):
        raise MalformedLLMOutput("enrichment reply is not a JSON array")
    facts, dropped = [], 0
    for item in raw[:MAX_FACTS_PER_REPLY]:
        try:
            facts.append(store_valid_fact(item))
        except InvalidInput:
            dropped += 1
    return Enrichment(facts, dropped, max(0, len(raw) - MAX_FACTS_PER_REPLY))
