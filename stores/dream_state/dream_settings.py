"""An agent's own dream settings: the document `consolidation/dream-settings.json`.

Today one: `approval` (off | risky | all), which every cycle of that agent uses — the
scheduled sweep's too — unless the cycle's options ask for approval themselves. Read
each cycle by candidate gating; a missing or malformed file means the default (off),
and a malformed one is reported, never fatal.
"""

from __future__ import annotations

import json
import logging

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.stores import safe_json
from dreamkeeper.stores.contract.documents import AgentDocuments

log = logging.getLogger(__name__)

APPROVAL_MODES = ("off", "risky", "all")
MAX_FILE_BYTES = 65_536


NAME = "consolidation/dream-settings.json"


def read_approval(documents: AgentDocuments) -> str | None:
    try:
        data = documents.read(NAME, max_bytes=MAX_FILE_BYTES)
        if data is None:
            return None
        raw = safe_json.loads(data, max_bytes=MAX_FILE_BYTES, max_depth=2)
        mode = raw.get("approval") if isinstance(raw, dict) else None
    except (OSError, ValueError) as exc:  # UnsafeJSON is a ValueError
        log.warning("%s is unreadable (%s); approval stays off", documents.location(NAME), exc)
        return None
    if mode not in APPROVAL_MODES:
        log.warning(
            "%s: approval %r is not one of %s; off", documents.location(NAME), mode, APPROVAL_MODES
        )
        return None
    return str(mode)


def write_approval(documents: AgentDocuments, mode: str) -> None:
    if mode not in APPROVAL_MODES:
        raise InvalidInput(f"approval {mode!r}: expected one of {', '.join(APPROVAL_MODES)}")
    documents.write(NAME, json.dumps({"approval": mode}, indent=1).encode("utf-8"))
