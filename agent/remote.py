"""`RemoteMemoryClient`: `MemoryClient`'s methods against a `dreamkeeper serve` over HTTP,
for an agent in another container, on another host, or without the data volume. Same
names, arguments and results (`search_memory` → `SearchHit`s, `save_memory` → `SaveAck`
once durable, ...; both implement `agent.api.MemoryBackend`) and the same errors: the
server's problem JSON carries the `core.errors` category, raised here as that exception.
A call the service has no route for (a dream's dry run, applying a plan, undo) raises
`LocalClientRequired`.

It needs only the core and httpx: an agent that talks to a serve loads no store, no
search index and no Temporal (an import contract in pyproject.toml keeps it so).
`agent.connect.connect_memory` picks this client or the local one by configuration.

Reads are synchronous (as the local client's, which reads files); writes are async.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any, Literal, Self, Unpack

import httpx

from dreamkeeper.agent.api import BoundAgent, LocalClientRequired
from dreamkeeper.agent.session import SessionContext
from dreamkeeper.agent.tool_args import tool_specs
from dreamkeeper.core.agent_api import (
    SaveOptions,
    SearchHit,
    SearchOptions,
    require_known,
    wire_filters,
)
from dreamkeeper.core.api import (
    ContextResponse,
    DreamStarted,
    DreamStatus,
    EntriesResponse,
    SearchResponse,
    ToolResult,
)
from dreamkeeper.core.dream_payloads import DreamResult
from dreamkeeper.core.dream_plan import ApplyPlanResult, ApprovalState, DreamPlan, UndoResult
from dreamkeeper.core.errors import DreamkeeperError, InvalidInput, Unavailable, error_for
from dreamkeeper.core.forgetting import ForgetReceipt, ForgetRequest
from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.core.payloads import EntryOpResult, SaveAck
from dreamkeeper.core.settings import ServiceSettings
from dreamkeeper.core.validation import validate_agent_id

DEFAULT_TIMEOUT = 60.0  # a save waits for the worker (the server's own save timeout)


def _error(response: httpx.Response, *, sent_token: bool = False) -> DreamkeeperError:
    try:
        body = response.json()
        category, detail = body.get("category"), body.get("detail") or response.text
    except (ValueError, AttributeError):
        category, detail = None, response.text[:500]
    if response.status_code == 401:
        if sent_token:
            return InvalidInput(
                "the memory service refused this client's token (DREAMKEEPER_TOKEN, else "
                "DREAMKEEPER_SERVE_TOKEN): it is not one the server accepts"
            )
        return InvalidInput(
            "the memory service needs a token: set DREAMKEEPER_TOKEN (one from `dreamkeeper "
            "token create`) or DREAMKEEPER_SERVE_TOKEN"
        )
    if sent_token and response.status_code == 404 and str(detail).startswith("unknown agent "):
        # The server answers an agent out of the token's reach exactly as one that does
        # not exist; the client, which knows it sent a token, names both.
        detail = f"{detail} (or this client's token does not reach it)"
    mapped = error_for(category, detail)
    if mapped is not None:
        return mapped
    if response.status_code >= 500:
        return Unavailable(f"the memory service answered {response.status_code}: {detail}")
    return InvalidInput(
        f"the memory service refused the request ({response.status_code}): {detail}"
    )


class RemoteMemoryClient:
    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._headers = headers
        self._timeout = timeout
        self._http = httpx.Client(
            base_url=self.url, headers=headers, timeout=timeout, transport=transport
        )
        self._async: httpx.AsyncClient | None = None
        self._async_loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def from_settings(cls, service: ServiceSettings | None = None) -> RemoteMemoryClient:
        service = service or ServiceSettings.from_env()
        if not service.url:
            raise InvalidInput("no memory service configured: set DREAMKEEPER_URL")
        return cls(service.url, token=service.sent_token)

    # -- plumbing ----------------------------------------------------------------------

    def _path(self, agent_id: str, rest: str = "") -> str:
        return f"/v1/agents/{validate_agent_id(agent_id)}{rest}"

    def _checked(self, response: httpx.Response) -> Any:
        if response.is_success:
            return response.json()
        raise _error(response, sent_token=bool(self._headers))

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            return self._checked(self._http.request(method, path, **kwargs))
        except httpx.TransportError as exc:
            raise Unavailable(f"cannot reach the memory service at {self.url}: {exc}") from None

    async def _arequest(self, method: str, path: str, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        if self._async is None or self._async_loop is not loop:
            # One per event loop: a CLI runs each command in its own asyncio.run.
            self._async = httpx.AsyncClient(
                base_url=self.url, headers=self._headers, timeout=self._timeout
            )
            self._async_loop = loop
        try:
            return self._checked(await self._async.request(method, path, **kwargs))
        except httpx.TransportError as exc:
            raise Unavailable(f"cannot reach the memory service at {self.url}: {exc}") from None

    def close(self) -> None:
        self._http.close()

    async def aclose(self) -> None:
        self._http.close()
        if self._async is not None:
            await self._async.aclose()
            self._async = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def agent(self, agent_id: str) -> RemoteAgentMemory:
        return RemoteAgentMemory(self, agent_id)

    # -- reads -------------------------------------------------------------------------

    def search_memory(
        self, agent_id: str, query: str | None = None, **filters: Unpack[SearchOptions]
    ) -> list[SearchHit]:
        require_known(dict(filters), SearchOptions)
        body = {"query": query, **wire_filters(filters)}
        found = SearchResponse.model_validate(
            self._request("POST", self._path(agent_id, "/search"), json=body)
        )
        return [SearchHit(h.entry, h.score) for h in found.hits]

    def get_memory(self, agent_id: str, entry_id: str) -> MemoryEntry:
        return MemoryEntry.model_validate(
            self._request("GET", self._path(agent_id, f"/memories/{entry_id}"))
        )

    def archived(self, agent_id: str) -> list[MemoryEntry]:
        data = self._request("GET", self._path(agent_id, "/archived"))
        return EntriesResponse.model_validate(data).entries

    def context(self, agent_id: str, session: SessionContext, user_message: str) -> ContextResponse:
        body = {"session": session.id, "kind": str(session.kind), "message": user_message}
        return ContextResponse.model_validate(
            self._request("POST", self._path(agent_id, "/context"), json=body)
        )

    # -- writes (through the server's workflows) ----------------------------------------

    async def save_memory(
        self, agent_id: str, content: str, **options: Unpack[SaveOptions]
    ) -> SaveAck:
        require_known(dict(options), SaveOptions)
        body = {
            "content": content,
            **{k: v.isoformat() if isinstance(v, datetime) else v for k, v in options.items()},
        }
        data = await self._arequest("POST", self._path(agent_id, "/memories"), json=body)
        return SaveAck.model_validate(data)

    async def delete_memory(self, agent_id: str, entry_id: str) -> EntryOpResult:
        data = await self._arequest("DELETE", self._path(agent_id, f"/memories/{entry_id}"))
        return EntryOpResult.model_validate(data)

    async def restore_memory(
        self, agent_id: str, entry_id: str, *, force: bool = False
    ) -> EntryOpResult:
        path = self._path(agent_id, f"/memories/{entry_id}/restore")
        return EntryOpResult.model_validate(
            await self._arequest("POST", path, json={"force": force})
        )

    async def update_memory_importance(
        self, agent_id: str, entry_id: str, importance: float
    ) -> EntryOpResult:
        path = self._path(agent_id, f"/memories/{entry_id}/importance")
        return EntryOpResult.model_validate(
            await self._arequest("PUT", path, json={"importance": importance})
        )

    async def forget(self, agent_id: str, request: ForgetRequest) -> ForgetReceipt:
        """Erase on the server now (`POST /v1/agents/{agent}/forget`); its receipt."""
        request.checked()
        body = request.model_dump(mode="json", by_alias=True)
        data = await self._arequest("POST", self._path(agent_id, "/forget"), json=body)
        return ForgetReceipt.model_validate(data)

    async def start_dream(self, agent_id: str) -> DreamStarted:
        """Start (or join) the agent's dream cycle; returns its workflow id."""
        return DreamStarted.model_validate(
            await self._arequest("POST", self._path(agent_id, "/dream"))
        )

    async def dream_status(self, agent_id: str) -> DreamStatus:
        return DreamStatus.model_validate(
            await self._arequest("GET", self._path(agent_id, "/dream"))
        )

    async def run_dream(self, agent_id: str, *, poll: float = 0.5) -> DreamResult:
        """Run (or join) the agent's dream cycle and wait for its result."""
        await self.start_dream(agent_id)
        while True:
            status = await self.dream_status(agent_id)
            if status.status == "COMPLETED" and status.result is not None:
                return DreamResult.model_validate(status.result)
            if status.status not in ("RUNNING", "NONE"):
                raise Unavailable(f"dream cycle {status.workflow_id} ended {status.status}")
            await asyncio.sleep(poll)

    def _no_route(self, call: str) -> LocalClientRequired:
        return LocalClientRequired(
            f"{call} needs a local MemoryClient: the memory service at {self.url} has no "
            "route for it. Run it where the worker's data directory is (connect without "
            "DREAMKEEPER_URL), or with `dreamkeeper dream` there"
        )

    async def dry_run_dream(self, agent_id: str) -> DreamResult:
        validate_agent_id(agent_id)
        raise self._no_route("dream(dry_run=True)")

    async def apply_dream_plan(self, plan: DreamPlan) -> ApplyPlanResult:
        raise self._no_route("apply_plan(plan)")

    async def undo_dream(self, agent_id: str, run_id: str) -> UndoResult:
        validate_agent_id(agent_id)
        raise self._no_route("undo_dream(run_id)")

    async def dream_approval(
        self, agent_id: str, action: Literal["pending", "approve", "reject"], keys: list[str]
    ) -> ApprovalState:
        """What the agent's current cycle waits on (`pending`), or approve/reject items by
        key (none: all)."""
        path = self._path(agent_id, f"/dream/{action}")
        if action == "pending":
            return ApprovalState.model_validate(await self._arequest("GET", path))
        return ApprovalState.model_validate(await self._arequest("POST", path, json={"keys": keys}))

    async def call_tool(
        self, agent_id: str, session: SessionContext, name: str, arguments: dict | None
    ) -> str:
        path = self._path(agent_id, f"/sessions/{session.id}/tools/{name}")
        body = {"arguments": arguments or {}, "kind": str(session.kind)}
        return ToolResult.model_validate(await self._arequest("POST", path, json=body)).text


class RemoteMemoryTools:
    """The 7 memory tools run by the server (`MemoryTools` there): same specs, same text."""

    def __init__(self, client: RemoteMemoryClient, agent_id: str, session: SessionContext):
        self.client = client
        self.agent_id = agent_id
        self.session = session

    @property
    def names(self) -> list[str]:
        return [spec["function"]["name"] for spec in tool_specs()]

    def specs(self) -> list[dict]:
        return tool_specs()

    async def call(self, name: str, arguments: str | dict[str, Any] | None) -> str:
        if isinstance(arguments, str):
            import json

            try:
                arguments = json.loads(arguments or "{}")
            except ValueError as exc:
                return f"Error: the arguments are not usable JSON ({exc}); nothing was done."
        if not isinstance(arguments, dict | None):
            return "Error: arguments must be a JSON object; nothing was done."
        try:
            return await self.client.call_tool(self.agent_id, self.session, name, arguments)
        except DreamkeeperError as exc:
            return f"Error: {exc}; nothing was done."


class RemoteAgentMemory(BoundAgent):
    """`agent.api.AgentHandle` for one agent, over HTTP; its tools run on the server."""

    def __init__(self, client: RemoteMemoryClient, agent_id: str) -> None:
        super().__init__(client, agent_id)
        self.client = client

    def tools(self, session: SessionContext) -> RemoteMemoryTools:
        return RemoteMemoryTools(self.client, self.agent_id, session)
