"""Reading `merge-coverage-vocabulary.json`: bad config never disables coverage checking.

    {"extraCommonWords": [...], "alwaysSpecificWords": [...], "numericExemptCategories": [...]}

Missing file → the built-in baseline. Malformed file → the baseline plus a warning.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from dreamkeeper.policies.coverage import DEFAULT_VOCABULARY, Vocabulary

log = logging.getLogger(__name__)

FILE_NAME = "merge-coverage-vocabulary.json"
_KEYS = ("extraCommonWords", "alwaysSpecificWords", "numericExemptCategories")


@dataclass(frozen=True)
class LoadedVocabulary:
    vocabulary: Vocabulary
    source: str  # the file read, or "built-in baseline"
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


def load_vocabulary(agent_root: Path) -> LoadedVocabulary:
    path = agent_root / FILE_NAME
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        loaded = LoadedVocabulary(DEFAULT_VOCABULARY, "built-in baseline")
    except (OSError, ValueError) as exc:
        loaded = _fallback(path, f"cannot be parsed ({exc})")
    else:
        problem = _problem(raw)
        if problem:
            loaded = _fallback(path, problem)
        else:
            loaded = LoadedVocabulary(
                Vocabulary.build(
                    raw.get("extraCommonWords", []),
                    raw.get("alwaysSpecificWords", []),
                    raw.get("numericExemptCategories", []),
                ),
                str(path),
            )
    if loaded.warning:
        log.warning(loaded.warning)
    log.info(loaded.summary)
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
    return None


def _fallback(path: Path, problem: str) -> LoadedVocabulary:
    return LoadedVocabulary(
        DEFAULT_VOCABULARY,
        "built-in baseline",
        warning=f"{path} {problem}: using the built-in baseline, coverage checking stays on",
    )
