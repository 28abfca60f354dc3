"""Readings: what an embedding model says a fact is about, for the subject check when
the vocabulary cannot tell (`policies.subject.Reading`, used by `policies.supersede`).

A fact's reading is, per vocabulary attribute, its best cosine similarity with the
questions that attribute answers, asked of the fact's own entity: "Ana Costa is renting
in Ghent these days" against "Where does Ana Costa live?", "Which city is Ana Costa's
home?", "Where does Ana Costa work?", "Who is Ana Costa's manager?", … The model is the store's (the in-process one unless an endpoint is set).
A reading depends only on the model and the text, so it is cached per both, and the
questions per entity.

Never under the writer lock: a save `prepare`s the readings of the texts its locked
step will judge (the new fact, what it names in `replaces`, its likely-conflict
candidates, found by the same keyword search) and hands them in as a mapping; the locked
step never calls the model. A text it was not handed reads as nothing: the check then
answers "cannot tell" where the vocabulary does. Without a model there are no readings.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping

import numpy as np

from dreamkeeper.policies.subject import Reading, questions, subject_of
from dreamkeeper.stores.vectors.embedder import Embedder

Readings = Mapping[str, Reading]
NO_READINGS: Readings = {}

MAX_READINGS = 8192  # facts' readings kept, per process (a few floats each)
# Question vectors kept: about 55 questions an entity, so some 300 entities (at 384
# dimensions, 25 MB at most).
MAX_QUESTIONS = 16384
_lock = threading.Lock()
_readings: OrderedDict[tuple[bytes, str], Reading] = OrderedDict()
_questions: OrderedDict[tuple[bytes, str], np.ndarray] = OrderedDict()


def _remember(cache: OrderedDict, key: tuple[bytes, str], value: object, cap: int) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > cap:
        cache.popitem(last=False)


def _vectors(embedder: Embedder, texts: list[str]) -> dict[str, np.ndarray]:
    """Unit vectors of `texts` (questions cached); a text the model could not embed is
    left out."""
    key = embedder.model_key
    out: dict[str, np.ndarray] = {}
    with _lock:
        for text in texts:
            found = _questions.get((key, text))
            if found is not None:
                out[text] = found
    missing = [t for t in dict.fromkeys(texts) if t not in out]
    if missing:
        for text, vector in zip(missing, embedder.embed(missing), strict=True):
            if vector is None:
                continue
            vector = np.asarray(vector, dtype=np.float32)
            norm = float(np.linalg.norm(vector))
            if norm > 0:
                out[text] = vector / norm
    return out


def prepare(embedder: Embedder | None, texts: Iterable[str]) -> Readings:
    """The readings of `texts`, embedding what the cache lacks (call outside the writer
    lock). A text that names no entity, or that the model could not embed, has none."""
    if embedder is None:
        return NO_READINGS
    key = embedder.model_key
    wanted = list(dict.fromkeys(t for t in texts if t))
    out: dict[str, Reading] = {}
    with _lock:
        for text in wanted:
            found = _readings.get((key, text))
            if found is not None:
                _readings.move_to_end((key, text))
                out[text] = found
    asked = {t: questions(subject_of(t)) for t in wanted if t not in out}
    asked = {t: q for t, q in asked.items() if q}
    if not asked:
        return out
    question_texts = [q for qs in asked.values() for _, q in qs]
    vectors = _vectors(embedder, [*asked, *question_texts])
    with _lock:
        for question in question_texts:
            if question in vectors:
                _remember(_questions, (key, question), vectors[question], MAX_QUESTIONS)
        for text, qs in asked.items():
            fact = vectors.get(text)
            if fact is None or any(q not in vectors for _, q in qs):
                continue
            best: dict[str, float] = {}
            for name, q in qs:  # an attribute's best-answered question
                best[name] = max(best.get(name, -1.0), float(vectors[q] @ fact))
            reading = Reading(tuple(best.items()))
            _remember(_readings, (key, text), reading, MAX_READINGS)
            out[text] = reading
    return out
