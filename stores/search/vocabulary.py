"""Reading `merge-coverage-vocabulary.json`: bad config never disables coverage checking.

    {"extraCommonWords": [...], "alwaysSpecificWords": [...], "numericExemptCategories": [...]}

Missing file → the built-in baseline. Malformed file → the baseline plus a warning:
not JSON, deeper than a few levels, larger than `MAX_FILE_BYTES`, more than `MAX_WORDS`
words in a list or a word longer than `MAX_WORD_CHARS`, a category that is not one, a
symlink, FIFO or directory in its place — never an exception that fails the dream.
"""

from __future__ import annotations

from dataclasses import dataclass

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.validation import validate_category
from dreamkeeper.policies.coverage import DEFAULT_VOCABULARY, Vocabulary
from dreamkeeper.stores import safe_json
from dreamkeeper.stores.contract.documents import AgentDocuments

FILE_NAME = "merge-coverage-vocabulary.json"
_KEYS = ("extraCommonWords", "alwaysSpecificWords", "numericExemptCategories")
MAX_FILE_BYTES = 262_144
MAX_WORDS = 1_000  # per list: the vocabulary travels in the dream's workflow history
MAX_WORD_CHARS = 64


@dataclass(frozen=True)
class LoadedVocabulary:
    vocabulary: Vocabulary
    source: str  # where the document read is, or "built-in baseline"
    warning: str | None = None

    @property
    def summary(self) -> str:
        v = self.vocabulary
        return (
            f"merge-coverage vocabulary from {self.source} — "
            f"{len(v.common | v.extra_common)} common words, "
            f"{len(v.always_specific)} reclaimed as specifics, "
            f"{len(v.numeric_exempt_categories)} numeric-exempt categories"
        )


def load_vocabulary(documents: AgentDocuments) -> LoadedVocabulary:
    """The agent's vocabulary, from its document `FILE_NAME` (`stores.contract.documents`). Logs
    nothing: its caller reports `warning` and `summary` once, with the agent's id."""
    path = documents.location(FILE_NAME)
    try:
        data = documents.read(FILE_NAME, max_bytes=MAX_FILE_BYTES)
        if data is None:
            raise FileNotFoundError(path)
        raw = safe_json.loads(data, max_bytes=MAX_FILE_BYTES, max_depth=2)
    except FileNotFoundError:
        loaded = LoadedVocabulary(DEFAULT_VOCABULARY, "built-in baseline")
    except (OSError, ValueError) as exc:  # UnsafeJSON is a ValueError
        loaded = _fallback(path, f"cannot be parsed ({exc})")
    else:
        problem = _problem(raw)
        if problem or not isinstance(raw, dict):
            loaded = _fallback(path, problem or "is not a JSON object")
        else:
            loaded = LoadedVocabulary(
                Vocabulary.build(
                    raw.get("extraCommonWords", []),
                    raw.get("alwaysSpecificWords", []),
                    raw.get("numericExemptCategories", []),
                ),
                path,
            )
    return loaded


def _problem(raw: object) -> str | None:
    if not isinstance(raw, dict):
        return "is not a JSON object"
    unknown = sorted(set(raw) - set(_KEYS))
    if unknown:
        return f"has unknown keys {unknown}"
    for key in _KEYS:
        value = raw.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            return f"{key} must be a list of non-empty strings"
        if len(value) > MAX_WORDS:
            return f"{key} has {len(value)} items (at most {MAX_WORDS})"
        if any(len(v) > MAX_WORD_CHARS for v in value):
            return f"{key} has an item longer than {MAX_WORD_CHARS} characters"
    for category in raw.get("numericExemptCategories", []):
        try:
            validate_category(category.rstrip("/"))
        except InvalidInput:
            return f"numericExemptCategories: {category[:80]!r} is not a category"
    return None


def _fallback(path: str, problem: str) -> LoadedVocabulary:
    return LoadedVocabulary(
        DEFAULT_VOCABULARY,
        "built-in baseline",
        warning=f"{path} {problem}: using the built-in baseline, coverage checking stays on",
    )
