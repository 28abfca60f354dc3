"""Hostile input for every surface that reads what it did not write, shared by the
property tests (`tests/test_hostile_input.py`) and the fuzzing benchmark
(`bench/fuzz.py`). Dev-only: it needs hypothesis and is not part of the installed
package.

- `sandbox`: the temp root around a store, and `check`, which judges one run;
- `strategies`: hostile values;
- one module per kind of surface: `surfaces_cli` (argv, stdin, environment),
  `surfaces_store` (the long-term store's files), `surfaces_sessions` (working memory,
  conversations, the conversation log), `surfaces_llm` (LLM replies), `surfaces_transfer`
  (import files, dream undo run ids).
"""

from tests.harness.hostile.sandbox import Outcome, Sandbox, Surface, Violation, check
from tests.harness.hostile.surfaces_cli import CLI, SETTINGS
from tests.harness.hostile.surfaces_llm import CONSOLIDATION, ENRICHMENT, PREFERENCES, REPAIR
from tests.harness.hostile.surfaces_sessions import CONVERSATION, CONVERSATION_LOG, WORKING
from tests.harness.hostile.surfaces_store import CLUSTERS, ENTRY_FILES, JOURNAL, VOCABULARY
from tests.harness.hostile.surfaces_transfer import IMPORT, UNDO

SURFACES = [
    CLI,
    ENTRY_FILES,
    JOURNAL,
    VOCABULARY,
    SETTINGS,
    ENRICHMENT,
    CONSOLIDATION,
    REPAIR,
    PREFERENCES,
    WORKING,
    CONVERSATION,
    CONVERSATION_LOG,
    CLUSTERS,
    IMPORT,
    UNDO,
]

__all__ = [
    "CLI",
    "CLUSTERS",
    "CONSOLIDATION",
    "CONVERSATION",
    "CONVERSATION_LOG",
    "ENRICHMENT",
    "ENTRY_FILES",
    "IMPORT",
    "JOURNAL",
    "PREFERENCES",
    "REPAIR",
    "SETTINGS",
    "SURFACES",
    "UNDO",
    "VOCABULARY",
    "WORKING",
    "Outcome",
    "Sandbox",
    "Surface",
    "Violation",
    "check",
]
