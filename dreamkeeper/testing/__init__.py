"""Test doubles the Dreamkeeper suite uses, shipped for yours: an OpenAI-compatible
scripted LLM and embeddings server on 127.0.0.1, a fake clock, the adversarial LLM of
the dream-cycle benchmark, and the store audit of the kill-storm harness.
(`dreamkeeper.testing.hostile` needs hypothesis.)"""

from dreamkeeper.testing.audit import AckedSave, StoreAudit, audit_store
from dreamkeeper.testing.clock import FakeClock
from dreamkeeper.testing.scripted_embeddings import ScriptedEmbeddings
from dreamkeeper.testing.scripted_llm import Reply, ScriptedLLM, tool_call

__all__ = [
    "AckedSave",
    "FakeClock",
    "Reply",
    "ScriptedEmbeddings",
    "ScriptedLLM",
    "StoreAudit",
    "audit_store",
    "tool_call",
]
