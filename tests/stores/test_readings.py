"""stores.longterm.readings: what an embedding model reads a fact as about, cached per
model and text, and nothing where the model cannot answer."""

from __future__ import annotations

import numpy as np

from dreamkeeper.core.settings import EmbeddingSettings
from dreamkeeper.stores.longterm.readings import NO_READINGS, prepare


class _Model:
    """Words of one concept share a dimension; `down` answers nothing."""

    CONCEPTS = ({"live", "lives", "home", "renting", "city"}, {"work", "works", "company"})

    def __init__(self, key: bytes = b"m1", down: bool = False) -> None:
        self.settings = EmbeddingSettings(model="concepts", local=True)
        self.key, self.down, self.texts = key, down, []

    @property
    def model_key(self) -> bytes:
        return self.key

    def embed(self, texts, *, timeout=None, retries=0):  # noqa: ANN001, ANN201
        self.texts += list(texts)
        if self.down:
            return [None] * len(texts)
        out = []
        for text in texts:
            vector = np.zeros(16, dtype=np.float32)
            for word in text.lower().replace("?", " ").replace(".", " ").split():
                hit = [i for i, c in enumerate(self.CONCEPTS) if word in c]
                vector[hit[0] if hit else 2 + len(word) % 14] += 1.0 if hit else 0.2
            out.append(vector)
        return out

    def embed_query(self, text):  # noqa: ANN001, ANN201
        return self.embed([text])[0]

    def close(self) -> None:
        pass


def test_a_reading_names_the_attribute_whose_questions_the_fact_answers():
    model = _Model()
    fact = "Ana Costa is renting in Ghent these days."
    readings = prepare(model, [fact, "The weather is cold."])
    assert readings[fact].attribute() == "home"
    assert "The weather is cold." not in readings  # no entity: nothing to ask about
    assert "Where does Ana Costa live?" in model.texts


def test_readings_are_cached_per_model_and_text():
    first = _Model(b"cache-test")
    fact = "Omar Wei is renting in Oslo now."
    prepare(first, [fact])
    asked = len(first.texts)
    again = prepare(first, [fact, fact])
    assert len(first.texts) == asked and again[fact].attribute() == "home"
    other = _Model(b"cache-test-2")  # another model: its own readings
    prepare(other, [fact])
    assert fact in other.texts


def test_no_model_or_a_model_that_does_not_answer_gives_no_reading():
    assert prepare(None, ["Ana Costa is renting in Ghent."]) is NO_READINGS
    down = _Model(b"down", down=True)
    assert prepare(down, ["Ana Costa is renting in Ghent."]) == {}
