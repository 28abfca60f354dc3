"""Workflow type names and workflow ids: what a client starts by name, what an operator
types into the Temporal UI, and what the workflow definitions declare — one place, so the
two sides never drift (tests check each definition's name against these)."""

from __future__ import annotations

from datetime import timedelta

SAVE_MEMORY = "SaveMemory"
SEARCH_MEMORY = "SearchMemory"
SAVE_UPDATE = "save"  # SaveMemory's update: returns once the original is durable
DREAM = "Dream"
DREAM_SWEEP = "DreamSweep"
CONSOLIDATION = "Consolidation"
PREFERENCE_INFERENCE = "PreferenceInference"
ARCHIVE_PURGE = "ArchivePurge"
IMPORTANCE_DECAY = "ImportanceDecay"
UNDO_DREAM = "UndoDream"
APPLY_DREAM_PLAN = "ApplyDreamPlan"
ARCHIVE_MEMORY = "ArchiveMemory"
RESTORE_MEMORY = "RestoreMemory"
UPDATE_MEMORY_IMPORTANCE = "UpdateMemoryImportance"
STORE_CLAIM = "StoreClaim"
FORGET = "Forget"

DREAM_SCHEDULE_ID = "dreamkeeper-dream-sweep"
DREAM_SWEEP_ID = "dream-sweep"
# A cycle that has not finished by then is stuck, not slow: it fails, visibly, and the
# next scheduled start runs a fresh one instead of joining it forever.
DREAM_TIMEOUT = timedelta(hours=2)

# StoreClaim's memo: which store a task queue serves, and the id of the payload key its
# worker seals with (absent: it seals nothing).
CLAIM_STORE_ID = "storeId"
CLAIM_LOCATION = "location"
CLAIM_SEALED_WITH = "sealedWith"


def save_workflow_id(agent_id: str, entry_id: str) -> str:
    return f"save-{agent_id}-{entry_id}"


def dream_workflow_id(agent_id: str) -> str:
    return f"dream-{agent_id}"


def entry_op_workflow_id(op: str, agent_id: str, entry_id: str) -> str:
    return f"{op}-{agent_id}-{entry_id}"


def forget_workflow_id(agent_id: str, request_id: str) -> str:
    """One run per request: asked again with the same request id, the same run answers."""
    return f"forget-{agent_id}-{request_id}"


def claim_workflow_id(task_queue: str) -> str:
    return f"dreamkeeper-store-{task_queue}"
