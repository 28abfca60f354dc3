"""Test doubles the Dreamkeeper suite uses, shipped for yours: an OpenAI-compatible
scripted LLM and embeddings server on 127.0.0.1, and a fake clock. They depend on
`dreamkeeper.core` at most (an import contract keeps it so), never on a store, a
workflow or the worker. The development harness (hostile input, the store audit, the
adversarial LLM) lives in the repository's tests/harness/ and is not installed."""

from dreamkeeper.testing.clock import FakeClock
from dreamkeeper.testing.scripted_embeddings import ScriptedEmbeddings
from dreamkeeper.testing.scripted_llm import Reply, ScriptedLLM, tool_call

__all__ = [
    "FakeClock",
    "Reply",
    "ScriptedEmbeddings",
    "ScriptedLLM",
    "tool_call",
]
