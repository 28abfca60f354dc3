"""`MemoryClient`: what an agent process uses. Writes start workflows; reads go straight
to the store (no workflow round trip on the hot path): the data directory, or with
`DREAMKEEPER_DATABASE_URL` the database, so a client on another host than every worker
searches without their filesystem. With an embedding model
configured, its stores search hybrid (the query is embedded here; entries' vectors are
made by the worker).

Writes are safe to retry. `save_memory` takes a caller-chosen `entry_id` (or an
`idempotency_key` it derives one from): the same id names the same workflow, so a retry
never makes a second original, and once that workflow has completed a retry is answered
from it without a new run. The client itself retries what Temporal refuses for a
while (a workflow task retried after a worker was killed), and gives up after
`save_timeout` seconds with an `Unavailable` that names the entry id: the save is
queued and completes when a worker polls the task queue.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from datetime import timedelta
from types import TracebackType
from typing import Any, Self, Unpack

from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    ChildWorkflowError,
    WorkflowAlreadyStartedError,
)
from temporalio.service import RPCError, RPCStatusCode

from dreamkeeper.agent import dream_ops
from dreamkeeper.agent.api import Opening
from dreamkeeper.agent.handle import AgentMemory
from dreamkeeper.client.attributes import tagged
from dreamkeeper.client.claims import Claim, claim_of
from dreamkeeper.client.codec import (
    cannot_seal,
    missing_key_note,
    seal_for_agent,
    sealing_key_id,
)
from dreamkeeper.client.connection import connect, settle_runtime
from dreamkeeper.client.pending import run_task_queue, worker_runs, worker_took
from dreamkeeper.core import names
from dreamkeeper.core.agent_api import (
    SaveOptions,
    SearchFilters,
    SearchHit,
    SearchOptions,
    require_known,
    wire_filters,
)
from dreamkeeper.core.dream_payloads import DreamInput, DreamResult
from dreamkeeper.core.dream_plan import ApplyPlanResult, DreamPlan, UndoResult
from dreamkeeper.core.errors import (
    Conflict,
    DatabaseUnavailable,
    InvalidInput,
    StoreMismatch,
    Unavailable,
    error_for,
)
from dreamkeeper.core.forgetting import (
    ForgetInput,
    ForgetOutcome,
    ForgetReceipt,
    ForgetRequest,
    describe_request,
    new_request_id,
)
from dreamkeeper.core.models import MemoryEntry, utc_now
from dreamkeeper.core.payloads import (
    EntryOpInput,
    EntryOpResult,
    SaveAck,
    SaveInput,
    SaveResult,
    SearchInput,
    SearchOutput,
    content_sha256,
)
from dreamkeeper.core.settings import (
    EmbeddingSettings,
    StoreSettings,
    TemporalSettings,
    embedding_settings,
)
from dreamkeeper.core.shards import ShardMap
from dreamkeeper.core.validation import (
    VALID_FROM_MAX_AHEAD,
    check_moment,
    new_entry_id,
    parse_moment,
    validate_agent_id,
    validate_category,
    validate_content,
    validate_entry_id,
    validate_flag,
    validate_importance,
    validate_replaces,
    validate_tags,
)
from dreamkeeper.policies.provenance import parse_source
from dreamkeeper.stores.backends import open_backend
from dreamkeeper.stores.contract import ConversationStore, MemoryStore, WorkingMemoryStore
from dreamkeeper.stores.contract.backend import FILES
from dreamkeeper.stores.contract.identity import StoreIdentity
from dreamkeeper.stores.forget import MAX_PHRASE_CHARS, MIN_PHRASE_CHARS
from dreamkeeper.stores.search.query import search
from dreamkeeper.stores.vectors.embedding_client import Embedder, embedding_client

log = logging.getLogger(__name__)

DEFAULT_SAVE_TIMEOUT = 30.0
_RETRY_PAUSE = (0.2, 0.5, 1.0, 2.0)  # then 2 s between attempts until the deadline
# What Temporal answers while a workflow task is being retried after a worker died, or
# while the server is briefly away: worth another try with the same workflow id.
_TRANSIENT = {
    RPCStatusCode.UNAVAILABLE,
    RPCStatusCode.DEADLINE_EXCEEDED,
    RPCStatusCode.CANCELLED,
    RPCStatusCode.RESOURCE_EXHAUSTED,
    RPCStatusCode.ABORTED,
    RPCStatusCode.FAILED_PRECONDITION,
    RPCStatusCode.INTERNAL,
    RPCStatusCode.UNKNOWN,
}


def entry_id_for(agent_id: str, idempotency_key: str) -> str:
    """The entry id a caller's idempotency key names (stable across processes)."""
    return hashlib.sha256(f"{agent_id}\n{idempotency_key}".encode()).hexdigest()[:12]


def _application_error(exc: BaseException | None) -> ApplicationError | None:
    """The ApplicationError at the root of a workflow, update or activity failure."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ApplicationError):
            return seen
        if isinstance(
            seen,
            WorkflowFailureError | WorkflowUpdateFailedError | ActivityError | ChildWorkflowError,
        ):
            seen = seen.cause
        else:
            seen = seen.__cause__
    return None


def _as_dreamkeeper_error(exc: Exception) -> Exception:
    """A failure from a workflow as the error a `--direct` call would have raised."""
    app = _application_error(exc)
    if app is not None and (mapped := error_for(app.type, app.message)) is not None:
        return mapped
    if isinstance(exc, RPCError) and "search attribute" in exc.message.lower():
        return InvalidInput(
            "the Temporal namespace lacks Dreamkeeper's search attributes (AgentId, MemoryOp): "
            "start `dreamkeeper worker` once (it registers them), or run `temporal operator "
            "search-attribute create --name AgentId --type Keyword` and the same for MemoryOp"
        )
    return exc


def _checked_forget(request: ForgetRequest) -> ForgetRequest:
    """The request, refused here (`InvalidInput`) when the store would refuse it, so a
    caller's mistake starts no run and leaves no failed one."""
    request.checked()
    for entry_id in request.ids:
        validate_entry_id(entry_id)
    if request.match is not None:
        if len(request.match.strip()) < MIN_PHRASE_CHARS:
            raise InvalidInput(f"a forget phrase needs at least {MIN_PHRASE_CHARS} characters")
        if len(request.match) > MAX_PHRASE_CHARS:
            raise InvalidInput(f"a forget phrase is at most {MAX_PHRASE_CHARS} characters")
    return request


def _retrieve_start_error(start: WithStartWorkflowOperation) -> None:
    """The SDK sets the failed call's error on the start operation's handle future too;
    unread, asyncio prints it ("Future exception was never retrieved") at exit — noise on
    a CLI's stderr. Read it (the SDK has no public way to ask whether it is done)."""
    future = getattr(start, "_workflow_handle", None)
    if isinstance(future, asyncio.Future) and future.done() and not future.cancelled():
        future.exception()


async def _pause_before_retry(
    entry_id: str, refusal: Exception, attempt: int, deadline: float
) -> None:
    """The pause before another try of a save the server refused for now: longer with
    each attempt, never past the deadline."""
    pause = _RETRY_PAUSE[min(attempt, len(_RETRY_PAUSE) - 1)]
    log.debug(
        "save %s refused for now (%s); retrying in %.1fs with the same id",
        entry_id,
        refusal,
        pause,
    )
    loop = asyncio.get_running_loop()
    await asyncio.sleep(min(pause, max(0.0, deadline - loop.time())))


class MemoryClient:
    def __init__(
        self,
        client: Client,
        store: StoreSettings,
        task_queue: str,
        embeddings: Embedder | None = None,
        *,
        save_timeout: float = DEFAULT_SAVE_TIMEOUT,
        shards: ShardMap | None = None,
    ) -> None:
        self.client = client
        self.settings = store
        self.task_queue = task_queue
        self.shards = shards  # route each agent to its shard's task queue (core/shards.py)
        self.embeddings = embeddings
        self.save_timeout = save_timeout
        self.backend = open_backend(store)
        self._identity: StoreIdentity | None = self.backend.read_identity()
        self._stores: dict[str, MemoryStore] = {}
        self._working: dict[str, WorkingMemoryStore] = {}
        self._conversations: dict[str, ConversationStore] = {}
        self._closed = False
        self._owned: list[Embedder] = []  # what connect() opened for it, closed by aclose
        self._sealing_checked: set[str] = set()  # task queues whose claim allows our starts

    @classmethod
    def connect(
        cls,
        store: StoreSettings | None = None,
        temporal: TemporalSettings | None = None,
        embeddings: EmbeddingSettings | None = None,
        *,
        save_timeout: float | None = None,
    ) -> Opening[MemoryClient]:
        """`async with MemoryClient.connect() as memory:` (closed when the block ends), or
        `memory = await MemoryClient.connect()` and `await memory.aclose()` when done.
        Settings default to the environment (DREAMKEEPER_*, TEMPORAL_*). Fails with
        `StoreMismatch` when the task queue's worker uses another data directory or
        database, having closed what it opened."""
        return Opening(cls._connect(store, temporal, embeddings, save_timeout=save_timeout))

    @classmethod
    async def _connect(
        cls,
        store: StoreSettings | None,
        temporal: TemporalSettings | None,
        embeddings: EmbeddingSettings | None,
        *,
        save_timeout: float | None,
    ) -> MemoryClient:
        store = store or StoreSettings.from_env()
        temporal = temporal or TemporalSettings.from_env()
        # The backend's per-agent payload data keys (files, or the database's rows).
        key_store = open_backend(store).agent_keys
        embedder: Embedder | None = None
        memory: MemoryClient | None = None
        try:
            client = await connect(temporal, store.data_dir, key_store=key_store)  # client/codec.py
            embedder = embedding_client(embeddings or embedding_settings())
            shards = ShardMap.load(temporal.shard_map) if temporal.shard_map is not None else None
            memory = cls(
                client,
                store,
                temporal.task_queue,
                embedder,
                # The settings' value (DREAMKEEPER_SAVE_TIMEOUT_SECONDS) unless the caller
                # chose one here.
                save_timeout=store.save_timeout if save_timeout is None else save_timeout,
                shards=shards,
            )
            if embedder is not None:
                memory._owned.append(embedder)
            if shards is None:
                await memory.check_store()  # sharded: each worker refuses agents not its own
        except BaseException:
            # Nothing the caller never got is left open: a script that ends on this
            # error ends in order (client/connection.py).
            if memory is not None:
                await memory.aclose()
            else:
                if embedder is not None:
                    embedder.close()
                await settle_runtime()
            raise
        return memory

    async def aclose(self) -> None:
        """Close the embedding client and the open stores, and let the Temporal SDK's
        threads leave Python (`client.connection.settle_runtime`), so the process can
        end without aborting. Idempotent; the client is not used afterwards."""
        if self._closed:
            return
        self._closed = True
        for owned in self._owned:
            owned.close()
        for cache in (self._stores, self._working, self._conversations):
            cache.clear()
        await settle_runtime()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    def queue_for(self, agent_id: str) -> str:
        """The task queue of the worker that owns the agent."""
        return self.shards.task_queue_for(agent_id) if self.shards else self.task_queue

    async def check_store(self) -> None:
        """Compare this client's store with the one its task queue serves, and refuse a
        client that cannot seal what that queue's worker seals (`ready_to_start`)."""
        claim = await claim_of(self.client, self.task_queue)
        if claim is None:
            # No worker has claimed the queue yet: the first save's worker checks the
            # store; sealing is checked before each start until a claim is seen.
            return
        mine = self._identity
        if mine is None or mine.store_id != claim.store_id:
            here = mine.describe() if mine else f"no store at {self.backend.location}"
            raise StoreMismatch(
                f"this client reads {here}, but task queue {self.task_queue!r} is served by a "
                f"worker using store {claim.store_id} at {claim.location}: use the same data "
                "directory (--data / DREAMKEEPER_DATA) or database (DREAMKEEPER_DATABASE_URL), "
                "or another task queue" + missing_key_note(self.client.data_converter)
            )
        self._check_sealing(self.task_queue, claim)

    async def ready_to_start(self, task_queue: str) -> None:
        """Before any workflow starts on `task_queue`: a client without a payload key
        must not start one where payloads are sealed — its input (memory content, for a
        save) would sit in Temporal history in clear, out of `forget`'s reach, and the
        worker's sealed answer would be unreadable here anyway. The queue's claim says
        whether its worker seals; with no claim yet, agent keys kept in the store say
        that some process of the deployment did. Refused (`PayloadKeyMismatch`, exit 2)
        before anything starts; a queue found fine is not asked again."""
        if self._seals or task_queue in self._sealing_checked:
            return
        claim = await claim_of(self.client, task_queue)
        if claim is not None:
            self._check_sealing(task_queue, claim)
            return
        if await asyncio.to_thread(self.backend.holds_agent_keys):
            raise cannot_seal(
                self.client.data_converter,
                task_queue,
                f"the store at {self.backend.location} keeps payload data keys (its "
                "workers seal every payload)",
            )

    @property
    def _seals(self) -> bool:
        """Whether this client seals payloads (a payload key is configured)."""
        return sealing_key_id(self.client.data_converter) is not None

    def _check_sealing(self, task_queue: str, claim: Claim) -> None:
        if claim.sealed_with is not None and not self._seals:
            raise cannot_seal(
                self.client.data_converter,
                task_queue,
                f"the worker serving task queue {task_queue!r} seals payloads (key "
                f"{claim.sealed_with})",
            )
        self._sealing_checked.add(task_queue)

    def _with_location(self, exc: Exception) -> Exception:
        """A worker's StoreMismatch knows only the caller's store id: add where it is."""
        if isinstance(exc, StoreMismatch) and self._identity is not None:
            return StoreMismatch(f"{exc} (the caller is this client: {self._identity.describe()})")
        return exc

    def agent(self, agent_id: str) -> AgentMemory:
        """One agent's memory, bound: `memory.agent("a1").search("...")`."""
        return AgentMemory(self, agent_id)

    @property
    def store_id(self) -> str | None:
        return self._identity.store_id if self._identity else None

    def store(self, agent_id: str) -> MemoryStore:
        """The agent's long-term memory, opened once and kept current by every read."""
        if agent_id not in self._stores:
            self._stores[agent_id] = self.backend.memory(agent_id, embeddings=self.embeddings)
        return self._stores[agent_id]

    def working_memory(self, agent_id: str) -> WorkingMemoryStore:
        if agent_id not in self._working:
            self._working[agent_id] = self.backend.working(agent_id, embeddings=self.embeddings)
        return self._working[agent_id]

    def conversations(self, agent_id: str) -> ConversationStore:
        if agent_id not in self._conversations:
            self._conversations[agent_id] = self.backend.conversations(agent_id)
        return self._conversations[agent_id]

    def search_memory(
        self, agent_id: str, query: str | None = None, **filters: Unpack[SearchOptions]
    ) -> list[SearchHit]:
        """The filters are `core.agent_api.SearchOptions` (category, tags, metadata,
        created bounds, limit, include_archived)."""
        require_known(dict(filters), SearchOptions)
        return search(self.store(agent_id), query, **filters)

    def get_memory(self, agent_id: str, entry_id: str) -> MemoryEntry:
        """The entry, live or archived (`NotFound` if neither)."""
        return self.store(agent_id).require(validate_entry_id(entry_id))

    def archived(self, agent_id: str) -> list[MemoryEntry]:
        return self.store(agent_id).archived()

    async def search_on_worker(
        self, agent_id: str, query: str | None = None, **filters: Unpack[SearchFilters]
    ) -> SearchOutput:
        """`search_memory`, run by the worker that owns the agent (SearchMemory): for a
        client without the agent's files, as in a sharded deployment. The result names
        the store that served it (live entries only: the workflow reads no archive)."""
        validate_agent_id(agent_id)
        require_known(dict(filters), SearchFilters)
        await self.ready_to_start(self.queue_for(agent_id))
        return await self.client.execute_workflow(
            names.SEARCH_MEMORY,
            SearchInput(agent_id=agent_id, query=query, **wire_filters(filters)),
            id=f"search-{agent_id}-{uuid.uuid4().hex[:12]}",
            task_queue=self.queue_for(agent_id),
            result_type=SearchOutput,
            static_summary=f"search memory of agent {agent_id}",
            search_attributes=tagged(agent_id, "search"),
        )

    async def _entry_op(self, workflow: str, op: str, inp: EntryOpInput) -> EntryOpResult:
        # Validated here too, so bad input never reaches a workflow history; an unknown
        # id gets the same answer `--direct` gives, without a failed workflow.
        validate_agent_id(inp.agent_id)
        validate_entry_id(inp.entry_id)
        if self._identity is not None:
            self.store(inp.agent_id).require(inp.entry_id)
            if op == "restore":
                # A refusal found here starts no workflow: a restore the worker refused
                # would leave a failed run (and a stack trace) for a user error.
                self.store(inp.agent_id).check_restorable(inp.entry_id, force=inp.force)
        inp = inp.model_copy(update={"store_id": self.store_id})
        await self.ready_to_start(self.queue_for(inp.agent_id))
        try:
            return await self.client.execute_workflow(
                workflow,
                inp,
                id=names.entry_op_workflow_id(op, inp.agent_id, inp.entry_id),
                result_type=EntryOpResult,
                task_queue=self.queue_for(inp.agent_id),
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                static_summary=f"{op} memory {inp.entry_id} of agent {inp.agent_id}",
                search_attributes=tagged(inp.agent_id, op),
            )
        except (WorkflowFailureError, RPCError) as exc:
            raise self._with_location(_as_dreamkeeper_error(exc)) from None

    async def delete_memory(self, agent_id: str, entry_id: str) -> EntryOpResult:
        """Archive (recoverable until purged)."""
        inp = EntryOpInput(agent_id=agent_id, entry_id=entry_id)
        return await self._entry_op(names.ARCHIVE_MEMORY, "archive", inp)

    async def restore_memory(
        self, agent_id: str, entry_id: str, *, force: bool = False
    ) -> EntryOpResult:
        """Bring an archived entry back. Refused (`Conflict`) while what it was
        archived into is live, unless `force`."""
        inp = EntryOpInput(agent_id=agent_id, entry_id=entry_id, force=force)
        return await self._entry_op(names.RESTORE_MEMORY, "restore", inp)

    async def update_memory_importance(
        self, agent_id: str, entry_id: str, importance: float
    ) -> EntryOpResult:
        inp = EntryOpInput(
            agent_id=agent_id, entry_id=entry_id, importance=validate_importance(importance)
        )
        return await self._entry_op(names.UPDATE_MEMORY_IMPORTANCE, "importance", inp)

    async def save_memory(
        self, agent_id: str, content: str, **options: Unpack[SaveOptions]
    ) -> SaveAck:
        """Returns once the raw original is durable (and searchable); enrichment and
        dedup go on in the SaveMemory workflow. Calling again with the same `entry_id`
        (or `idempotency_key`) is safe: it returns the same entry, saved once. The
        options are `core.agent_api.SaveOptions`."""
        validate_agent_id(agent_id)
        require_known(dict(options), SaveOptions)
        entry_id = options.get("entry_id")
        idempotency_key = options.get("idempotency_key")
        if entry_id is not None and idempotency_key is not None:
            raise InvalidInput("give entry_id or idempotency_key, not both")
        if idempotency_key is not None:
            if not isinstance(idempotency_key, str) or not 0 < len(idempotency_key) <= 256:
                raise InvalidInput("idempotency_key must be 1-256 characters")
            entry_id = entry_id_for(agent_id, idempotency_key)
        inp = SaveInput(
            agent_id=agent_id,
            entry_id=validate_entry_id(entry_id) if entry_id is not None else new_entry_id(),
            content=validate_content(content),
            category=validate_category(options.get("category")),
            tags=validate_tags(options.get("tags")),
            source=options.get("source"),
            importance=validate_importance(options.get("importance", 0.5)),
            store_id=self.store_id,
            replaces=validate_replaces(options.get("replaces")),
            force_replace=validate_flag(options.get("force_replace", False), "force_replace"),
            # The store checks it again against its own clock.
            valid_from=check_moment(
                parse_moment(options.get("valid_from"), "valid_from"),
                "valid_from",
                now=utc_now(),
                ahead=VALID_FROM_MAX_AHEAD,
            ),
        )
        ack = await self._save(inp)
        if ack.refused is not None:
            # Nothing was saved (the run completed as refused): raised, so no caller
            # mistakes the answer for a save.
            raise error_for(ack.refused_type, ack.refused) or Conflict(ack.refused)
        return ack

    async def _save(self, inp: SaveInput) -> SaveAck:
        await self.ready_to_start(self.queue_for(inp.agent_id))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.save_timeout
        attempt = 0
        # A completed run of this id answers the save, unless it saved into another store
        # sharing the namespace (same agent and id, another data directory or database):
        # then this store still needs the save, by a new run.
        reuse = WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY
        while True:
            left = deadline - loop.time()
            if left <= 0:
                raise await self._queued(inp)
            start = self._save_start(inp, reuse)
            # The rpc_timeout alone is no deadline: while no worker takes the update, the
            # server answers the long poll before it expires and the SDK polls again, for
            # ever. The whole call runs under the deadline; the SDK reports that
            # cancellation as an RPC timeout, told apart from a refusal by `timer`.
            timer = asyncio.timeout_at(deadline)
            try:
                async with timer:
                    try:
                        return await self.client.execute_update_with_start_workflow(
                            names.SAVE_UPDATE,
                            content_sha256(inp.content),
                            start_workflow_operation=start,
                            result_type=SaveAck,
                            rpc_timeout=timedelta(seconds=max(0.5, left)),
                        )
                    except WorkflowAlreadyStartedError as exc:
                        _retrieve_start_error(start)
                        answer = await self._finished(inp, exc.run_id)
                        if answer is not None:
                            return answer
                        reuse = WorkflowIDReusePolicy.ALLOW_DUPLICATE
                        continue
            except WorkflowUpdateFailedError as exc:
                raise self._with_location(_as_dreamkeeper_error(exc)) from None
            except (RPCError, WorkflowUpdateRPCTimeoutOrCancelledError, TimeoutError) as exc:
                _retrieve_start_error(start)
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    # The SDK reports our own cancellation as an RPC timeout: pass it on.
                    raise asyncio.CancelledError from None
                if timer.expired():
                    raise await self._queued(inp) from None
                if isinstance(exc, TimeoutError):
                    raise
                mapped = _as_dreamkeeper_error(exc)
                if mapped is not exc or (
                    isinstance(exc, RPCError) and exc.status not in _TRANSIENT
                ):
                    raise mapped from None
                await _pause_before_retry(inp.entry_id, exc, attempt, deadline)
                attempt += 1

    def _save_start(
        self, inp: SaveInput, reuse: WorkflowIDReusePolicy
    ) -> WithStartWorkflowOperation[Any, SaveResult]:
        """The start of the save's workflow, with the update that asks for its answer:
        one workflow id per agent and entry, so a retried save meets the run it started."""
        return WithStartWorkflowOperation(
            names.SAVE_MEMORY,
            inp,
            id=names.save_workflow_id(inp.agent_id, inp.entry_id),
            result_type=SaveResult,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            # A save whose run completed is answered from that run (`_finished`), never
            # by a new one; a run that failed may be retried by a new run.
            id_reuse_policy=reuse,
            task_queue=self.queue_for(inp.agent_id),
            static_summary=f"save memory {inp.entry_id} for agent {inp.agent_id}",
            search_attributes=tagged(inp.agent_id, "save"),
        )

    async def _finished(self, inp: SaveInput, run_id: str | None) -> SaveAck | None:
        """The answer for a save whose workflow already completed: the same save if that
        run saved the same content, else a Conflict — refused here, so no run starts (and
        fails) with the other content, which never reaches a history. None: that run
        saved into another store, so it answers nothing for this one."""
        handle = self.client.get_workflow_handle(
            names.save_workflow_id(inp.agent_id, inp.entry_id), run_id=run_id
        )
        first: SaveInput | None = None
        async for event in handle.fetch_history_events(page_size=1):
            started = event.workflow_execution_started_event_attributes
            if started.input.payloads:
                [first] = await self.client.data_converter.decode(
                    started.input.payloads, [SaveInput]
                )
            break
        if (
            first is not None
            and first.store_id is not None
            and inp.store_id is not None
            and first.store_id != inp.store_id
        ) or not self._holds(inp.agent_id, inp.entry_id):
            return None
        if first is None or content_sha256(first.content) != content_sha256(inp.content):
            raise Conflict(
                f"memory {inp.entry_id} of agent {inp.agent_id} was already saved with other "
                "content: a new memory needs a new id (or idempotency key)"
            )
        return SaveAck(
            agent_id=inp.agent_id,
            entry_id=inp.entry_id,
            note=parse_source(first.source).note,
            already_done=True,
        )

    def _holds(self, agent_id: str, entry_id: str) -> bool:
        """Whether this client's store has the entry (live or archived); True when this
        client has no local store to look in. A completed run of a save whose entry is
        not here saved into another store of the same namespace (an older worker
        recorded no store id)."""
        if not self.backend.has_agent(agent_id):
            # A database always is a store to look in; a data directory not yet made is not.
            return self.backend.kind == FILES and not self.settings.data_dir.is_dir()
        return self.store(agent_id).get(entry_id) is not None

    async def _queued(self, inp: SaveInput) -> Unavailable:
        """The save outlived the wait: say what holds it up. A run under the save's id
        started on another task queue comes first: no worker of this client's queue ever
        sees it, whatever else is up. Then a database that does not answer, whoever
        holds the save: nothing completes it until the database answers, and it is the
        same store the worker writes (invariant 19). A
        worker that took it keeps retrying its first step (a local activity, whose
        failures Temporal does not record). No worker took it: say so."""
        queued = f"save {inp.entry_id} for agent {inp.agent_id} is queued but not yet durable"
        again = f"call again with entry_id={inp.entry_id!r} to wait"
        workflow_id = names.save_workflow_id(inp.agent_id, inp.entry_id)
        mine = self.queue_for(inp.agent_id)  # the agent's shard's
        started_on = await run_task_queue(self.client, workflow_id)
        if started_on is not None and started_on != mine:
            return Unavailable(
                f"{queued}: this save joined its run ({workflow_id}), started earlier on "
                f"task queue {started_on!r}, not on {mine!r} where this client sends agent "
                f"{inp.agent_id}'s saves (the agent's shard moved, or another client has "
                f"another queue). Only a worker polling {started_on!r} completes it: start "
                f"one there, or terminate that run and save again"
            )
        queue = f"task queue {mine!r}"
        took = await worker_took(self.client, workflow_id)
        try:
            await asyncio.to_thread(self.backend.check_reachable)
        except DatabaseUnavailable as exc:
            if took:
                return DatabaseUnavailable(
                    f"{queued}: a worker on {queue} took it and keeps retrying its first "
                    f"step, which needs the database: {exc}. It completes once the database "
                    f"answers; {again}"
                )
            return DatabaseUnavailable(
                f"{queued}: the database it needs does not answer: {exc}. It completes once "
                f"the database answers and a worker on {queue} takes it; {again}"
            )
        if took:
            return Unavailable(
                f"{queued}: a worker on {queue} took it and is still on its first step "
                f"(persisting the original) after {self.save_timeout:g}s. It completes once "
                f"that step succeeds; {again}"
            )
        return Unavailable(
            f"{queued}: no worker answered within {self.save_timeout:g}s on {queue} (is "
            f"`dreamkeeper worker` running?). It completes when a worker polls that queue; "
            f"{again}"
        )

    async def forget(self, agent_id: str, request: ForgetRequest) -> ForgetReceipt:
        """Erase now, from every tier of the store and the agent's Temporal histories (its
        data key), and return the receipt: the Forget workflow, run by the worker that
        owns the agent like every write (`workflows.forget`). Not a model tool: a person
        asks for it, through the CLI, HTTP or this call. `request.request_id` names the
        request (one is made when it has none): asked again with it, the same run
        answers. While a worker is at it this waits; with none answering within
        `save_timeout` seconds, `Unavailable`: the request stays queued, and runs when a
        worker polls the queue."""
        validate_agent_id(agent_id)
        request = _checked_forget(request)
        queue = self.queue_for(agent_id)
        await self.ready_to_start(queue)
        request = request.model_copy(update={"request_id": request.request_id or new_request_id()})
        assert request.request_id is not None
        inp = ForgetInput(
            agent=agent_id,
            request_id=request.request_id,
            scope=request.scope,
            id_count=len(request.ids),
            dry_run=request.dry_run,
            # The one part that may carry content: sealed with the agent's data key, which
            # the forget destroys (core.forgetting.ForgetInput).
            sealed_request=seal_for_agent(self.client.data_converter, agent_id, request),
            store_id=self.store_id,
        )
        workflow_id = names.forget_workflow_id(agent_id, inp.request_id)
        try:
            handle = await self.client.start_workflow(
                names.FORGET,
                inp,
                id=workflow_id,
                task_queue=queue,
                result_type=ForgetOutcome,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                # A request that completed is answered from its run, never run again; one
                # that failed may be asked again.
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
                static_summary=f"{describe_request(inp.scope, inp.id_count, inp.dry_run)} "
                f"of agent {agent_id}",
                search_attributes=tagged(agent_id, "forget"),
            )
        except WorkflowAlreadyStartedError:
            handle = self.client.get_workflow_handle(workflow_id, result_type=ForgetOutcome)
        except RPCError as exc:
            raise self._with_location(_as_dreamkeeper_error(exc)) from None
        receipt = (await self._forget_outcome(handle, inp)).receipt
        if (receipt.scope, receipt.dry_run) != (inp.scope, inp.dry_run):
            raise Conflict(
                f"request id {inp.request_id} already named another forget of agent "
                f"{agent_id} ({describe_request(receipt.scope, len(receipt.entries), receipt.dry_run)}"
                "): a new request needs a new request id"
            )
        if request.whole_agent and not request.dry_run:
            # Open stores of a directory that is gone would serve their cached entries.
            self.release(agent_id)
        return receipt

    async def _forget_outcome(
        self, handle: WorkflowHandle[Any, ForgetOutcome], inp: ForgetInput
    ) -> ForgetOutcome:
        """The run's result. A worker at it (its step heartbeats) is waited for however
        long the store takes; none taking it within `save_timeout` is `Unavailable`."""
        while True:
            timer = asyncio.timeout(self.save_timeout)
            try:
                async with timer:
                    return await handle.result()
            except (WorkflowFailureError, RPCError, TimeoutError) as exc:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise asyncio.CancelledError from None
                if not timer.expired():
                    raise self._with_location(_as_dreamkeeper_error(exc)) from None
            if not await worker_runs(self.client, handle.id):
                raise Unavailable(
                    f"forget request {inp.request_id} of agent {inp.agent} is queued but not "
                    f"done: no worker answered within {self.save_timeout:g}s on task queue "
                    f"{self.queue_for(inp.agent)!r} (is `dreamkeeper worker` running?). It "
                    f"runs when a worker polls that queue; ask again with request id "
                    f"{inp.request_id!r} to wait for its receipt"
                )

    def release(self, agent_id: str) -> None:
        """Drop the agent's open stores (their next use opens them again): a long-lived
        process that bounds how many agents it keeps open (serve) releases the rest."""
        for cache in (self._stores, self._working, self._conversations):
            cache.pop(agent_id, None)

    async def start_dream(self, agent_id: str) -> WorkflowHandle[Any, DreamResult]:
        """Start (or join, if one is running) the agent's dream cycle."""
        validate_agent_id(agent_id)
        await self.ready_to_start(self.queue_for(agent_id))
        return await self.client.start_workflow(
            names.DREAM,
            DreamInput(agent_id=agent_id, store_id=self.store_id),
            id=names.dream_workflow_id(agent_id),
            task_queue=self.queue_for(agent_id),
            result_type=DreamResult,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            static_summary=f"dream cycle for agent {agent_id}",
            search_attributes=tagged(agent_id, "dream"),
            execution_timeout=names.DREAM_TIMEOUT,
        )

    async def run_dream(self, agent_id: str) -> DreamResult:
        """Run (or join) the agent's dream cycle and wait for its result."""
        return await (await self.start_dream(agent_id)).result()

    async def dry_run_dream(self, agent_id: str) -> DreamResult:
        """Everything a cycle would do, applied nowhere: the result's `plan`."""
        return await dream_ops.dry_run(self, agent_id)

    async def apply_dream_plan(self, plan: DreamPlan) -> ApplyPlanResult:
        return await dream_ops.apply_plan(self, plan)

    async def undo_dream(self, agent_id: str, run_id: str) -> UndoResult:
        return await dream_ops.undo(self, agent_id, run_id)
