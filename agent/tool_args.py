"""The memory tools' arguments as pydantic models: one class per tool gives both the
JSON schema the model is shown and the validation its call goes through, so the two
cannot drift. Handlers keep plain keyword signatures for Python callers."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dreamkeeper.agent.recall import (
    SEARCH_MEMORY,
    SEARCH_MEMORY_HEADLINE,
    SEARCH_MEMORY_SCOPE,
    SEARCH_WORKING_MEMORY,
    SEARCH_WORKING_MEMORY_HEADLINE,
    SEARCH_WORKING_MEMORY_SCOPE,
)
from dreamkeeper.core.validation import PREVIEW_CHARS

SAVE_MEMORY = "save_memory"
DELETE_MEMORY = "delete_memory"
UPDATE_MEMORY_IMPORTANCE = "update_memory_importance"
SAVE_TO_WORKING_MEMORY = "save_to_working_memory"
GET_FROM_WORKING_MEMORY = "get_from_working_memory"
MAX_SEARCH_LIMIT = 50

_CATEGORY_PREFIX = "category prefix, e.g. user-preferences (whole segments)"
_EVERY_TAG = "every tag must match"


class ToolArgs(BaseModel):
    """Unknown arguments are refused, not ignored: a misspelt filter must not widen a
    search or drop a field from a save silently. Strict types, as the schema says: no
    `true` for a limit, no "0.7" for an importance (an integer is a number)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class SearchMemoryArgs(ToolArgs):
    query: str | None = Field(None, description="what to look for; omit to browse")
    category: str | None = Field(None, description=_CATEGORY_PREFIX)
    tags: list[str] | None = Field(None, description=_EVERY_TAG)
    metadata: dict[str, str] | None = Field(
        None,
        description="only entries whose metadata has every one of these keys with exactly "
        'this value, e.g. {"source": "user"}',
    )
    created_after: str | None = Field(
        None,
        description="only entries first seen at or after this ISO 8601 date or time, "
        "e.g. 2026-03-01",
    )
    created_before: str | None = Field(
        None,
        description="only entries first seen at or before this ISO 8601 date or time "
        "(a date alone means its midnight UTC); current facts only unless "
        "include_superseded — for what was true at a time, use as_of",
    )
    limit: int = Field(20, ge=1, le=MAX_SEARCH_LIMIT)
    include_superseded: bool = Field(
        False,
        description="also return older versions of facts that were replaced "
        "(by default only the current version is returned)",
    )
    as_of: str | None = Field(
        None,
        description="what was true at this ISO 8601 date or time (e.g. 2025-06-01), "
        "instead of what is true now",
    )
    history: str | None = Field(
        None,
        description="a memory id: list every version of that fact, oldest first "
        "(query and filters are ignored)",
    )


class SearchWorkingMemoryArgs(ToolArgs):
    query: str | None = Field(None, description="what to look for; omit to list")
    category: str | None = Field(None, description=_CATEGORY_PREFIX)
    tags: list[str] | None = Field(None, description=_EVERY_TAG)
    namespace: str | None = Field(
        None, description="a key prefix such as patrol or subagent/t1, or 'stash'"
    )


class SaveMemoryArgs(ToolArgs):
    content: str = Field(description="the fact, self-contained")
    category: str | None = Field(
        None, description="e.g. user-preferences/timezone or project-context/x"
    )
    tags: list[str] | None = None
    source: str | None = Field(
        None, description="user (the user said it), tool:<name>, or inferred"
    )
    importance: float = Field(0.5, ge=0, le=1)
    replaces: list[str] | None = Field(
        None,
        description="ids of memories this fact replaces because the fact changed "
        "(e.g. a new address or phone number): they are kept as history, no longer "
        "returned as current. Each must be an older version of this fact (the same "
        "person or thing and the same attribute), or nothing is saved and the reply "
        "says why",
    )
    force_replace: bool = Field(
        False,
        description="replace what replaces names even if it looks like another subject "
        "(only when you are sure; it is logged)",
    )
    valid_from: str | None = Field(
        None,
        description="when the fact became true, if not now: an ISO 8601 date or time, "
        "e.g. 2026-03-01 for 'moved here on March 1st'",
    )


class DeleteMemoryArgs(ToolArgs):
    id: str = Field(description="the 12-character id shown in search results")


class UpdateImportanceArgs(ToolArgs):
    id: str = Field(description="the memory's id")
    importance: float = Field(ge=0, le=1)


class SaveToWorkingMemoryArgs(ToolArgs):
    key: str = Field(description="a plain key such as emails_inbox")
    data: str = Field(description="the text to keep")
    ttl_minutes: float | None = Field(None, gt=0, le=10080)
    category: str | None = Field(None, description="optional category")
    tags: list[str] | None = None


class GetFromWorkingMemoryArgs(ToolArgs):
    key: str = Field(description="plain or full key")


# name → (description, arguments), in the order the tools are offered.
TOOLS: dict[str, tuple[str, type[ToolArgs]]] = {
    SEARCH_MEMORY: (
        f"{SEARCH_MEMORY_HEADLINE}. Searches {SEARCH_MEMORY_SCOPE}: facts, preferences and "
        "lessons saved in earlier sessions, ranked by keyword relevance and importance. "
        "Omit query to browse the most recently reinforced entries and see the category "
        f"taxonomy. For what a tool returned in this session use {SEARCH_WORKING_MEMORY} "
        f"({SEARCH_WORKING_MEMORY_HEADLINE}).",
        SearchMemoryArgs,
    ),
    SEARCH_WORKING_MEMORY: (
        f"{SEARCH_WORKING_MEMORY_HEADLINE}. Searches {SEARCH_WORKING_MEMORY_SCOPE}: your "
        "own working-memory namespace and this run's stashed tool results, with a "
        f"{PREVIEW_CHARS}-character preview per hit. Omit query to list entries (newest "
        "first, no preview). namespace looks elsewhere: 'patrol', 'subagent/<task>', or "
        "'stash' for tool results elided from this run's context. For conclusions kept "
        f"across sessions use {SEARCH_MEMORY} ({SEARCH_MEMORY_HEADLINE}).",
        SearchWorkingMemoryArgs,
    ),
    SAVE_MEMORY: (
        "Save a durable fact, preference or lesson to long-term memory. It is kept at once; "
        "enrichment and deduplication run in the background.",
        SaveMemoryArgs,
    ),
    DELETE_MEMORY: (
        "Archive a long-term memory by id: hidden from search, recoverable until it is "
        "purged after the retention period. Use for facts that are wrong or obsolete. "
        "The reply quotes what was archived, so you can tell the user.",
        DeleteMemoryArgs,
    ),
    UPDATE_MEMORY_IMPORTANCE: (
        "Re-score a long-term memory's importance (0 to 1); higher ranks it first and "
        "protects it from pruning at 0.8 and above.",
        UpdateImportanceArgs,
    ),
    SAVE_TO_WORKING_MEMORY: (
        "Keep data for this session in working memory (your own namespace), e.g. a large "
        "payload to come back to. Expires after ttl_minutes (default 5).",
        SaveToWorkingMemoryArgs,
    ),
    GET_FROM_WORKING_MEMORY: (
        "Read a working-memory entry: a plain key from your namespace, or a full key "
        "(patrol/..., subagent/..., stash/...) from anywhere.",
        GetFromWorkingMemoryArgs,
    ),
}


def parameters_schema(args: type[ToolArgs]) -> dict[str, Any]:
    """The model's JSON schema as function-calling clients expect it: an optional
    argument is shown as its type (it may be omitted), not as "X or null", and
    pydantic's titles are dropped. Validation still takes an explicit null for an
    optional argument as "left out", which is what models mean by it."""
    schema = args.model_json_schema()
    properties = {}
    for name, prop in schema["properties"].items():
        options = [p for p in prop.pop("anyOf", []) if p != {"type": "null"}]
        if len(options) == 1:
            prop = {**options[0], **prop}
        prop.pop("title", None)
        if prop.get("default", 0) is None:
            del prop["default"]
        properties[name] = prop
    return {
        "type": "object",
        "properties": properties,
        "required": schema.get("required", []),
        "additionalProperties": False,
    }


def tool_specs() -> list[dict]:
    """The tools' OpenAI function-calling definitions (`tools=` of a chat request)."""
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": description,
                "parameters": parameters_schema(args),
            },
        }
        for name, (description, args) in TOOLS.items()
    ]
