"""Search attributes every Dreamkeeper workflow carries: which agent, which operation.

Keyword values only — ids and operation names, never memory content (search attributes
are visible in the UI and not encrypted by a payload codec).
"""

from __future__ import annotations

from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

AGENT_ID = SearchAttributeKey.for_keyword("AgentId")
MEMORY_OP = SearchAttributeKey.for_keyword("MemoryOp")
SEARCH_ATTRIBUTES = (AGENT_ID, MEMORY_OP)


def tagged(agent_id: str | None, op: str) -> TypedSearchAttributes:
    pairs = [SearchAttributePair(MEMORY_OP, op)]
    if agent_id is not None:
        pairs.append(SearchAttributePair(AGENT_ID, agent_id))
    return TypedSearchAttributes(pairs)
