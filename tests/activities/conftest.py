"""The activity tier: each activity called as the worker calls it (inside an activity
context, from `ActivityEnvironment`), on a real store in a temp directory, with no
Temporal server. What is checked is the activity boundary: argument → store effect →
result, and how a failure reaches Temporal (its type and whether it is retried)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from dreamkeeper.activities.stores import StoreRegistry
from dreamkeeper.core.settings import EmbeddingSettings
from dreamkeeper.testing.scripted_embeddings import concept_vector
from dreamkeeper.testing.scripted_llm import ScriptedLLM

AGENT = "a1"


@dataclass
class Run:
    """One ActivityEnvironment per test, recording the heartbeats' details."""

    env: ActivityEnvironment = field(default_factory=ActivityEnvironment)
    beats: list[tuple[Any, ...]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.env.on_heartbeat = lambda *details: self.beats.append(details)

    def __call__(self, activity: Callable[..., Any], *args: Any) -> Any:
        return self.env.run(activity, *args)

    def fails(self, activity: Callable[..., Any], *args: Any) -> ApplicationError:
        """The ApplicationError the activity hands to Temporal (anything else fails)."""
        with pytest.raises(ApplicationError) as caught:
            self.env.run(activity, *args)
        return caught.value


@pytest.fixture
def run() -> Run:
    return Run()


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    """The scripted OpenAI-compatible server, on 127.0.0.1 for this test."""
    server = ScriptedLLM()
    yield server
    server.close()


@pytest.fixture
def registry(tmp_path) -> StoreRegistry:
    return StoreRegistry(tmp_path)


@dataclass
class ConceptEmbedder:
    """The scripted embedder's vectors (dreamkeeper.testing.scripted_embeddings), in
    process: the `Embedder` the stores take, with no endpoint to run. `down`: every
    text gets no vector, as from an endpoint that does not answer."""

    dim: int = 24
    down: bool = False
    settings: EmbeddingSettings = EmbeddingSettings(base_url="scripted", model="scripted-embed")
    texts: list[str] = field(default_factory=list)

    @property
    def model_key(self) -> bytes:
        return self.settings.model_key

    def embed(self, texts, *, timeout=None, retries=2) -> list[np.ndarray | None]:
        self.texts += texts
        if self.down:
            return [None] * len(texts)
        return [np.asarray(concept_vector(t, self.dim), dtype=np.float32) for t in texts]

    def embed_query(self, text: str) -> np.ndarray | None:
        return self.embed([text])[0]

    def close(self) -> None:
        pass
