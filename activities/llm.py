"""An OpenAI-compatible chat endpoint over httpx, and the save-enrichment contract.

Errors are sorted for Temporal: a 4xx or a reply that does not parse is non-retryable
(retrying will not fix it; the original stays), a 5xx or a connection failure is
retryable (bounded by the activity's retry policy).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import httpx
from pydantic import BaseModel, Field, ValidationError, field_validator
from temporalio import activity
from temporalio.exceptions import ApplicationError

from dreamkeeper.stores.validation import MAX_CONTENT_CHARS

SUBJECT_TIME_KEYS = ("subjectTime", "subjectTimeStart", "subjectTimeEnd")


class LLMRejected(Exception):
    """The endpoint refused the request (4xx): not retryable."""


class MalformedLLMOutput(Exception):
    """The reply is not what the prompt asked for: not retryable."""


class LLMUnavailable(Exception):
    """5xx or connection trouble: retryable."""


@dataclass(frozen=True)
class LLMSettings:
    base_url: str | None = None
    model: str = "llama3.1"
    api_key: str | None = None
    timeout_seconds: float = 60.0

    @property
    def configured(self) -> bool:
        return bool(self.base_url)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> LLMSettings:
        env = os.environ if env is None else env
        timeout = env.get("DREAMKEEPER_LLM_TIMEOUT_SECONDS", "60")
        try:
            seconds = float(timeout)
        except ValueError:
            raise ValueError(
                f"DREAMKEEPER_LLM_TIMEOUT_SECONDS={timeout!r} is not a number"
            ) from None
        return cls(
            base_url=(env.get("DREAMKEEPER_LLM_BASE_URL") or "").rstrip("/") or None,
            model=env.get("DREAMKEEPER_LLM_MODEL") or "llama3.1",
            api_key=env.get("DREAMKEEPER_LLM_API_KEY") or None,
            timeout_seconds=seconds,
        )


async def chat(settings: LLMSettings, messages: list[dict[str, str]]) -> str:
    if not settings.base_url:
        raise LLMRejected("no LLM configured")
    headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
    url = f"{settings.base_url}/chat/completions"
    body = {"model": settings.model, "messages": messages, "temperature": 0}
    try:
        async with httpx.AsyncClient(timeout=settings.timeout_seconds) as http:
            response = await http.post(url, json=body, headers=headers)
    except httpx.HTTPError as exc:
        raise LLMUnavailable(f"{url}: {type(exc).__name__}: {exc}") from None
    if 400 <= response.status_code < 500:
        raise LLMRejected(f"{url} answered {response.status_code}: {response.text[:200]}")
    if response.status_code >= 500:
        raise LLMUnavailable(f"{url} answered {response.status_code}")
    try:
        return response.json()["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise MalformedLLMOutput("not an OpenAI-style chat completion") from None


_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.MULTILINE)
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
    Temporal: refused or unparseable → non-retryable, unavailable → retryable."""
    try:
        return parse(await heartbeating(chat(settings, messages)))
    except (LLMRejected, MalformedLLMOutput) as exc:
        activity.logger.warning("%s failed for good: %s", what, exc)
        raise ApplicationError(str(exc), type=type(exc).__name__, non_retryable=True) from None
    except LLMUnavailable as exc:
        raise ApplicationError(str(exc), type="LLMUnavailable") from None


def parse_json_reply(text: str, what: str) -> object:
    """JSON from an LLM reply, tolerating a Markdown code fence around it."""
    try:
        return json.loads(_FENCE.sub("", text.strip()))
    except ValueError:
        raise MalformedLLMOutput(f"{what} reply is not JSON") from None


class EnrichedFact(BaseModel):
    content: str = Field(min_length=1, max_length=MAX_CONTENT_CHARS)
    category: str | None = None
    tags: list[str] = Field(default_factory=list)
    importance: float = Field(default=0.5, ge=0.0, le=1.0)
    metadata: dict[str, str] | None = None

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
"subjectTimeStart" | "subjectTimeEnd": ISO date} (only when confident)}. Keep every \
name, number, date, email, URL and handle verbatim. Reply [] if nothing is worth keeping."""


def parse_enrichment(text: str) -> list[EnrichedFact]:
    raw = parse_json_reply(text, "enrichment")
    if not isinstance(raw, list):
        raise MalformedLLMOutput("enrichment reply is not a JSON array")
    try:
        return [EnrichedFact.model_validate(item) for item in raw]
    except ValidationError as exc:
        raise MalformedLLMOutput(f"enrichment item invalid: {exc.errors()[0]['msg']}") from None
