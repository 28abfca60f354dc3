"""Who may do what through `dreamkeeper serve`: a token's grant (which agents, how much)
and the pure decisions on it. No I/O: the token store (stores.tokens) keeps the grants,
the service's guard asks these functions.

A grant names agents by exact id (`a1`) or by an id prefix ending in `*` (`acme-*`: every
agent whose id starts with `acme-`; a bare `*`: every agent). Agent ids are letters,
digits, `_` and `-` (no `/`), so a tenant is a prefix such as `acme-`.

Access is one of:
- `read`: search, get, list, context, working-memory reads, conversation reads, the
  read-only memory tools;
- `write` (read-write): everything of its agents, writes included;
- `admin`: every agent, plus the operator routes (dream approval, metrics, the agent list
  in full); the shared DREAMKEEPER_SERVE_TOKEN is an admin token.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from dreamkeeper.core.errors import InvalidInput


class Access(StrEnum):
    READ = "read"
    WRITE = "write"
    ADMIN = "admin"


_PATTERN = re.compile(r"\*|[A-Za-z0-9][A-Za-z0-9_\-]{0,63}\*?")
MAX_PATTERNS = 64

# The memory tools that only read: a read token may call these and no others.
READ_ONLY_TOOLS = frozenset({"search_memory", "search_working_memory", "get_from_working_memory"})


def validate_pattern(pattern: str) -> str:
    if not isinstance(pattern, str) or not _PATTERN.fullmatch(pattern):
        raise InvalidInput(
            f"invalid agent pattern {pattern!r}: an agent id (letters, digits, '_' or '-'), "
            "a prefix ending in '*' (acme-*), or '*' for every agent"
        )
    return pattern


def validate_patterns(patterns: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    if not patterns:
        raise InvalidInput(
            "a token needs at least one agent, agent prefix (acme-*) or * in its scope (--scope)"
        )
    if len(patterns) > MAX_PATTERNS:
        raise InvalidInput(f"at most {MAX_PATTERNS} agent patterns per token")
    return tuple(dict.fromkeys(validate_pattern(p) for p in patterns))


def pattern_covers(pattern: str, agent_id: str) -> bool:
    if pattern.endswith("*"):
        return agent_id.startswith(pattern[:-1])
    return agent_id == pattern


@dataclass(frozen=True)
class Grant:
    """What one presented token allows."""

    token_id: str  # "shared" for DREAMKEEPER_SERVE_TOKEN, "open" with no token configured
    access: Access
    agents: tuple[str, ...] = ("*",)

    @property
    def admin(self) -> bool:
        return self.access is Access.ADMIN

    def covers(self, agent_id: str) -> bool:
        """The agent is within this token's reach (at any access)."""
        return self.admin or any(pattern_covers(p, agent_id) for p in self.agents)

    def may_write(self, agent_id: str) -> bool:
        return self.covers(agent_id) and self.access is not Access.READ

    def may_call_tool(self, agent_id: str, tool: str) -> bool:
        return self.may_write(agent_id) or (self.covers(agent_id) and tool in READ_ONLY_TOOLS)


SHARED = Grant("shared", Access.ADMIN)
OPEN = Grant("open", Access.ADMIN)  # no token configured anywhere: today's open server


class Need(StrEnum):
    """What a route or tool asks of the caller's grant for its agent. Each route of the
    service declares its own (service.access); nothing guesses it from a path."""

    READ = "read"
    WRITE = "write"
    ADMIN = "admin"
    TOOL = "tool"  # decided by the tool's name (read-only tools need read)


class Verdict(StrEnum):
    ALLOWED = "allowed"
    UNKNOWN = "unknown"  # out of reach: answered exactly as an agent that does not exist
    FORBIDDEN = "forbidden"  # in reach, but not for this (403)


def allowed(grant: Grant, agent_id: str, need: Need, tool: str | None = None) -> bool:
    """Whether the grant allows the need on an agent it covers (the caller checks
    `covers` first: an agent out of reach is answered as unknown, not as forbidden)."""
    if need is Need.ADMIN:
        return grant.admin
    if need is Need.READ:
        return grant.covers(agent_id)
    if need is Need.TOOL:
        return grant.may_call_tool(agent_id, tool or "")
    return grant.may_write(agent_id)


def decide(
    grant: Grant | None, agent_id: str, need: Need | None, tool: str | None = None
) -> Verdict:
    """The one decision every route, the search fast path and every MCP tool call take.
    It fails closed: no grant (the request did not pass the guard) is out of reach, and a
    route that declares no need is refused to every token."""
    if grant is None or not grant.covers(agent_id):
        return Verdict.UNKNOWN
    if need is None or not allowed(grant, agent_id, need, tool):
        return Verdict.FORBIDDEN
    return Verdict.ALLOWED


def forbidden_detail(agent_id: str, need: Need | None, tool: str | None = None) -> str:
    """What a 403 says: what the token lacks, never anything about other agents."""
    if need is Need.ADMIN:
        what = "needs an admin token"
    elif need is Need.TOOL:
        what = f"tool {tool!r} writes: this token may only read agent {agent_id}"
    elif need is None:
        what = "this route declares no access, so no token may use it"
    else:
        what = f"this token may only read agent {agent_id}"
    return f"{what}; nothing was done"
