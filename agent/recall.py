"""The recall-search family: names, headlines and the empty-result rule in one place.

Two sibling searches are told apart by what the caller wants, not by which store holds
it. Every description leads with its headline and names its sibling; every empty result
names the sibling and never re-suggests the tool that just came back empty.
"""

from __future__ import annotations

SEARCH_MEMORY = "search_memory"
SEARCH_WORKING_MEMORY = "search_working_memory"

SEARCH_MEMORY_HEADLINE = "RECALL WHAT YOU CONCLUDED"
SEARCH_WORKING_MEMORY_HEADLINE = "RECALL WHAT A TOOL RETURNED"

SEARCH_MEMORY_SCOPE = "durable cross-session knowledge the agent chose to keep"
SEARCH_WORKING_MEMORY_SCOPE = "this session's cached tool payloads and scratch entries"

SIBLINGS = {
    SEARCH_MEMORY: (SEARCH_WORKING_MEMORY, SEARCH_WORKING_MEMORY_HEADLINE),
    SEARCH_WORKING_MEMORY: (SEARCH_MEMORY, SEARCH_MEMORY_HEADLINE),
}


def empty_result(tool: str, query: str) -> str:
    """What a recall tool says when a real query matched nothing."""
    sibling, headline = SIBLINGS[tool]
    store = "long-term memory" if tool == SEARCH_MEMORY else "working memory"
    return (
        f"Nothing in {store} matched {query!r}. That is not evidence it was never said or "
        f"never known: try {sibling} ({headline})."
    )
