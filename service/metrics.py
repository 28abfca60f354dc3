"""The service's Prometheus metrics (prometheus-client), on their own registry so two
apps in one process (tests) never share counters.

Counted where `serve` sees them: saves by outcome as the caller got it, search and
context latency. Counted in serve's worker (`WorkflowOutcomes`, a worker interceptor):
what every SaveMemory it runs did (enriched / kept / deduplicated / failed), whoever
started it — serve, an agent's MemoryClient, the CLI — and every dream cycle it runs,
the schedule's included, with what it merged, rejected, refused and pruned. Store sizes,
the embedding backlog and, on a database, whether it answers are read at scrape time.

The Temporal SDK runtime's own metrics (worker polls, task latencies, ...) are exported by
the runtime on its own address (`DREAMKEEPER_TEMPORAL_METRICS_ADDRESS`); `/metrics`
appends that text, so one scrape sees both.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import httpx
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from temporalio import workflow
from temporalio.exceptions import FailureError
from temporalio.worker import (
    ExecuteWorkflowInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from dreamkeeper.core import names
from dreamkeeper.core.dream_payloads import DreamResult
from dreamkeeper.stores.contract import MemoryStore

log = logging.getLogger(__name__)

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


class StoreSizes(Collector):
    """Live and archived entries per agent, and (with embeddings configured) the live
    entries that have no vector file yet — one directory listing per agent; a vector made
    from older content is not counted. `agents` names the agents whose stores are open
    already (serve's bounded set): a scrape that opened every agent's store took 43 s and
    1 GB at 1,000 agents (bench/fleet.py), and a fleet's sizes are the database's to
    count, not one process's."""

    def __init__(
        self,
        agents: Callable[[], Iterable[str]],
        store: Callable[[str], MemoryStore],
        *,
        embeddings: bool = False,
        per_agent: bool = True,
    ) -> None:
        self._agents = agents
        self._store = store
        self._embeddings = embeddings
        self._per_agent = per_agent

    def collect(self) -> Iterable[GaugeMetricFamily]:
        # Agent ids are names a tenant may not want a scraper to learn: without
        # per_agent (DREAMKEEPER_SERVE_METRICS_AGENTS) the sizes are totals.
        by = ["agent"] if self._per_agent else []
        sizes = GaugeMetricFamily(
            "dreamkeeper_store_entries", "Entries in an agent's store", labels=[*by, "state"]
        )
        backlog = GaugeMetricFamily(
            "dreamkeeper_embedding_backlog",
            "Live entries without a vector file yet (embeddings configured)",
            labels=by,
        )
        totals = {"live": 0, "archived": 0, "backlog": 0}
        try:
            agents = list(self._agents())
        except Exception as exc:  # noqa: BLE001 - the database is down: no sizes to report
            log.warning("store sizes: %s", exc)
            return
        for agent in agents:
            try:
                store = self._store(agent)
                live = len(store.entries())
                archived = len(store.archived())
                unembedded = store.unembedded() if self._embeddings else 0
            except Exception as exc:  # noqa: BLE001 - a scrape reports what it can
                log.warning("store sizes for %s: %s", agent if self._per_agent else "an agent", exc)
                continue
            if self._per_agent:
                sizes.add_metric([agent, "live"], live)
                sizes.add_metric([agent, "archived"], archived)
                if self._embeddings:
                    backlog.add_metric([agent], unembedded)
            totals["live"] += live
            totals["archived"] += archived
            totals["backlog"] += unembedded
        if not self._per_agent:
            sizes.add_metric(["live"], totals["live"])
            sizes.add_metric(["archived"], totals["archived"])
            backlog.add_metric([], totals["backlog"])
        yield sizes
        if self._embeddings:
            yield backlog


class DatabaseUp(Collector):
    """`dreamkeeper_database_up`: 1 when the store's database answers a round trip at
    scrape time, 0 when it does not."""

    def __init__(self, check: Callable[[], None]) -> None:
        self._check = check

    def collect(self) -> Iterable[GaugeMetricFamily]:
        up = GaugeMetricFamily(
            "dreamkeeper_database_up",
            "Whether the store's PostgreSQL database answers (1) or not (0), asked at scrape",
        )
        try:
            self._check()
        except Exception as exc:  # noqa: BLE001 - a scrape reports what it finds
            log.warning("database: %s", exc)
            up.add_metric([], 0)
        else:
            up.add_metric([], 1)
        yield up


class ServiceMetrics:
    def __init__(self, temporal_metrics: str | None = None) -> None:
        self.registry = CollectorRegistry()
        self.temporal_metrics = temporal_metrics
        r = self.registry
        self.saves = Counter(
            "dreamkeeper_saves",
            "Save requests by the outcome the caller got (saved, repeated, invalid, "
            "conflict, unavailable, error)",
            ["outcome"],
            registry=r,
        )
        self.save_results = Counter(
            "dreamkeeper_save_results",
            "What each SaveMemory workflow this worker ran did (enriched, kept, "
            "deduplicated, failed)",
            ["outcome"],
            registry=r,
        )
        self.search_seconds = Histogram(
            "dreamkeeper_search_seconds",
            "Long-term memory search latency",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.context_seconds = Histogram(
            "dreamkeeper_context_seconds",
            "Per-turn context build latency",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.tool_calls = Counter(
            "dreamkeeper_tool_calls", "Memory tool calls (HTTP and MCP)", ["tool"], registry=r
        )
        self.dreams = Counter(
            "dreamkeeper_dream_cycles",
            "Dream cycles this worker ran, the schedule's included (completed, planned: "
            "a dry run, failed)",
            ["outcome"],
            registry=r,
        )
        self.dream_items = Counter(
            "dreamkeeper_dream_items",
            "What dream cycles did: merged, rejected, refused, pruned, purged",
            ["what"],
            registry=r,
        )

    def watch_stores(
        self,
        agents: Callable[[], Iterable[str]],
        store: Callable[[str], MemoryStore],
        *,
        embeddings: bool = False,
        per_agent: bool = True,
    ) -> None:
        self.registry.register(
            StoreSizes(agents, store, embeddings=embeddings, per_agent=per_agent)
        )

    def watch_database(self, check: Callable[[], None]) -> None:
        """The database-up gauge, from `check` (raises when the database does not answer)."""
        self.registry.register(DatabaseUp(check))

    def interceptor(self) -> Interceptor:
        """For the worker: counts the outcome of every SaveMemory and Dream it runs."""
        return WorkflowOutcomes(self)

    def workflow_done(self, workflow_type: str, result: object | None) -> None:
        """A SaveMemory or Dream run ended: `result` is its result, None if it failed."""
        if workflow_type == names.SAVE_MEMORY:
            outcome = getattr(result, "outcome", None) if result is not None else "failed"
            self.save_results.labels(str(outcome or "failed")).inc()
        elif workflow_type == names.DREAM:
            if isinstance(result, DreamResult):
                self.dream_done(result)
            else:
                self.dreams.labels("failed").inc()

    def dream_done(self, result: DreamResult) -> None:
        if result.plan is not None:  # a dry run: nothing was done
            self.dreams.labels("planned").inc()
            return
        c = result.consolidation
        self.dreams.labels("completed").inc()
        self.dream_items.labels("merged").inc(len(c.merged))
        self.dream_items.labels("rejected").inc(len(c.rejected))
        self.dream_items.labels("refused").inc(c.unsafe + len(c.refused_prunes))
        self.dream_items.labels("pruned").inc(len(c.pruned))
        self.dream_items.labels("purged").inc(len(result.purge.purged))

    async def exposition(self) -> bytes:
        text = generate_latest(self.registry)
        if self.temporal_metrics:
            try:
                async with httpx.AsyncClient(timeout=2.0) as http:
                    answer = await http.get(f"http://{self.temporal_metrics}/metrics")
                text += answer.content
            except httpx.HTTPError as exc:
                log.warning("Temporal runtime metrics at %s: %s", self.temporal_metrics, exc)
        return text


COUNTED = (names.SAVE_MEMORY, names.DREAM)


class WorkflowOutcomes(Interceptor):
    """Counts how SaveMemory and Dream runs end, on the worker that runs them: the only
    place that sees every run, however it was started. A replay (a worker picking up a
    run after a restart, a query on a finished run) returns the result again, so only a
    run's first, live ending is counted."""

    def __init__(self, metrics: ServiceMetrics) -> None:
        self._metrics = metrics

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        metrics = self._metrics

        def record(workflow_type: str, result: object | None) -> None:
            if workflow.unsafe.is_replaying():
                return
            # The counters live outside the workflow sandbox; counting is not workflow
            # logic and issues no command, so replays stay deterministic.
            with workflow.unsafe.sandbox_unrestricted():
                try:
                    metrics.workflow_done(workflow_type, result)
                except Exception as exc:  # noqa: BLE001 - metrics never fail a workflow
                    log.warning("counting %s: %s", workflow_type, exc)

        class Counted(WorkflowInboundInterceptor):
            async def execute_workflow(self, input: ExecuteWorkflowInput) -> object:
                workflow_type = workflow.info().workflow_type
                if workflow_type not in COUNTED:
                    return await super().execute_workflow(input)
                try:
                    result = await super().execute_workflow(input)
                except FailureError:  # the run fails (a bug instead retries its task)
                    record(workflow_type, None)
                    raise
                record(workflow_type, result)
                return result

        return Counted
