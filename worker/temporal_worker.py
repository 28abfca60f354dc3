"""Building the Temporal worker that hosts every Dreamkeeper workflow and activity."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from temporalio.client import Client
from temporalio.worker import Interceptor, PollerBehaviorSimpleMaximum, Worker

from dreamkeeper.activities.agents import AgentActivities
from dreamkeeper.activities.consolidation import ConsolidationActivities
from dreamkeeper.activities.dream_review import DreamReviewActivities
from dreamkeeper.activities.dream_undo import UndoActivities
from dreamkeeper.activities.embeddings import EmbeddingActivities
from dreamkeeper.activities.entry_ops import EntryActivities
from dreamkeeper.activities.forget import ForgetActivities
from dreamkeeper.activities.idle import IdleCheckActivities
from dreamkeeper.activities.maintenance import MaintenanceActivities
from dreamkeeper.activities.preferences import PreferenceActivities
from dreamkeeper.activities.save import SaveActivities
from dreamkeeper.activities.search import SearchActivities
from dreamkeeper.activities.stores import HEARTBEATS, StoreRegistry
from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.settings import (
    EmbeddingSettings,
    LLMSettings,
    StoreSettings,
    WorkerSettings,
    embedding_settings,
)
from dreamkeeper.core.shards import ShardMap
from dreamkeeper.stores.backends import open_backend
from dreamkeeper.stores.vectors.embedding_client import embedding_client
from dreamkeeper.workflows.consolidation import Consolidation
from dreamkeeper.workflows.dream import Dream
from dreamkeeper.workflows.dream_ops import ApplyDreamPlan, UndoDream
from dreamkeeper.workflows.entry_ops import ArchiveMemory, RestoreMemory, UpdateMemoryImportance
from dreamkeeper.workflows.forget import Forget
from dreamkeeper.workflows.maintenance import ArchivePurge, ImportanceDecay
from dreamkeeper.workflows.preferences import PreferenceInference
from dreamkeeper.workflows.save import SaveMemory
from dreamkeeper.workflows.search import SearchMemory
from dreamkeeper.workflows.store_claim import StoreClaim
from dreamkeeper.workflows.sweep import DreamSweep

DEFAULT_TASK_QUEUE = "dreamkeeper"
WORKFLOWS = [
    SaveMemory,
    SearchMemory,
    DreamSweep,
    Dream,
    Consolidation,
    PreferenceInference,
    ArchivePurge,
    ImportanceDecay,
    ArchiveMemory,
    RestoreMemory,
    UpdateMemoryImportance,
    StoreClaim,
    ApplyDreamPlan,
    UndoDream,
    Forget,
]


def worker_activities(
    settings: StoreSettings,
    llm: LLMSettings | None = None,
    embeddings: EmbeddingSettings | None = None,
    tuning: WorkerSettings | None = None,
    stores: StoreRegistry | None = None,
    shard: tuple[ShardMap, str] | None = None,
) -> list[Callable]:
    """Every activity, bound to one store registry (open stores kept in a bounded LRU)
    on the backend the settings name (a data directory or a database)."""
    llm = llm if llm is not None else LLMSettings.from_env()
    embeddings = embeddings if embeddings is not None else embedding_settings()
    tuning = tuning if tuning is not None else WorkerSettings()
    HEARTBEATS.start()  # here, never inside an activity: see Heartbeats
    if stores is None:
        stores = StoreRegistry(
            open_backend(settings),
            embedding_client(embeddings),
            max_open=tuning.max_open_stores,
            max_memory_mb=tuning.max_store_memory_mb,
            misrouted=shard_guard(*shard) if shard is not None else None,
        )
    return [*memory_activities(stores, llm, settings), *dream_activities(stores, llm, settings)]


def memory_activities(
    stores: StoreRegistry, llm: LLMSettings, settings: StoreSettings
) -> list[Callable]:
    """The steps of what an agent (or a person) asks for: save, search, the changes to
    one entry, and forget."""
    entries = EntryActivities(stores)
    save = SaveActivities(stores, llm, settings.floor)
    return [
        AgentActivities(stores.backend).list_agents,
        entries.archive_memory,
        entries.restore_memory,
        entries.update_memory_importance,
        save.persist_original,
        save.enrich_memory,
        save.save_fact,
        save.retire_original,
        save.dedup_original,
        save.mark_original,
        EmbeddingActivities(stores).embed_entries,
        SearchActivities(stores).search_memory,
        ForgetActivities(stores, settings).forget,
    ]


def dream_activities(
    stores: StoreRegistry, llm: LLMSettings, settings: StoreSettings
) -> list[Callable]:
    """The steps of background maintenance: the dream cycle, its review and undo,
    preference inference, decay and the purge."""
    maintenance = MaintenanceActivities(
        stores,
        retention=settings.archive_retention,
        decay=settings.decay,
        floor=settings.floor,
    )
    dream = ConsolidationActivities(stores, llm, settings.floor)
    preferences = PreferenceActivities(stores, llm)
    review = DreamReviewActivities(
        stores, floor=settings.floor, decay=settings.decay, retention=settings.archive_retention
    )
    idle = IdleCheckActivities(
        stores,
        llm,
        retention=settings.archive_retention,
        decay=settings.decay,
        floor=settings.floor,
    )
    return [
        idle.dream_work,
        maintenance.purge_archived,
        maintenance.decay_importance,
        dream.fold_exact_duplicates,
        dream.gate_candidates,
        dream.propose_consolidation,
        dream.review_merges,
        dream.repair_merge,
        dream.save_merged_entry,
        dream.archive_merged_sources,
        dream.prune_ephemeral,
        dream.supersede_outdated,
        dream.find_conflicts,
        dream.stamp_reviewed,
        preferences.rotate_conversation_log,
        preferences.infer_preferences,
        review.plan_details,
        review.check_plan_sources,
        review.apply_fold,
        review.apply_decay,
        review.apply_purge,
        review.record_canaries,
        review.check_recall,
        UndoActivities(stores).undo_dream,
    ]


def shard_guard(shards: ShardMap, shard: str) -> Callable[[str], str | None]:
    """Why this worker (serving `shard`) must refuse an agent, or None when it owns it."""
    if shard not in shards.shards:
        raise InvalidInput(f"DREAMKEEPER_SHARD={shard!r} is not in the shard map")

    def misrouted(agent_id: str) -> str | None:
        owner = shards.shard_for(agent_id)
        if owner == shard:
            return None
        return (
            f"agent {agent_id!r} belongs to shard {owner!r} (task queue "
            f"{shards.shards[owner]!r}), not to this worker's shard {shard!r}: the caller "
            "routed it with another shard map"
        )

    return misrouted


def worker_tuning() -> WorkerSettings:
    """The worker's concurrency settings, from the environment."""
    return WorkerSettings.from_env()


def build_worker(
    client: Client,
    settings: StoreSettings,
    *,
    task_queue: str = DEFAULT_TASK_QUEUE,
    executor: ThreadPoolExecutor,
    llm: LLMSettings | None = None,
    embeddings: EmbeddingSettings | None = None,
    activities: list[Callable] | None = None,
    tuning: WorkerSettings | None = None,
    shard: tuple[ShardMap, str] | None = None,
    interceptors: Sequence[Interceptor] = (),
) -> Worker:
    """Store activities are synchronous file I/O, so they run on `executor`'s threads
    (size it with `tuning.activity_threads`): local activities too — the save's persist
    step — so too few threads queue saves behind background steps."""
    tuning = tuning if tuning is not None else WorkerSettings()
    threads = getattr(executor, "_max_workers", tuning.activity_threads)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=WORKFLOWS,
        activities=(
            activities
            if activities is not None
            else worker_activities(settings, llm, embeddings, tuning, shard=shard)
        ),
        activity_executor=executor,
        max_concurrent_activities=tuning.activity_slots(threads),
        max_concurrent_local_activities=tuning.max_concurrent_local_activities,
        max_concurrent_workflow_tasks=tuning.max_concurrent_workflow_tasks,
        workflow_task_poller_behavior=PollerBehaviorSimpleMaximum(tuning.workflow_task_pollers),
        activity_task_poller_behavior=PollerBehaviorSimpleMaximum(tuning.activity_task_pollers),
        interceptors=interceptors,
    )
