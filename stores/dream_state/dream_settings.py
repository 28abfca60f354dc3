"""An agent's own dream settings: `{agent root}/consolidation/dream-settings.json`.

Today one: `approval` (off | risky | all), which every cycle of that agent uses — the
scheduled sweep's too — unless the cycle's options ask for approval themselves. Read
each cycle by candidate gating; a missing or malformed file means the default (off),
and a malformed one is reported, never fatal.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.stores import safe_json
from dreamkeeper.stores.files import atomic_write_text, real_directory

log = logging.getLogger(__name__)

APPROVAL_MODES = ("off", "risky", "all")
MAX_FILE_BYTES = 65_536


def _path(agent_root: Path) -> Path:
    return agent_root / "consolidation" / "dream-settings.json"


def read_approval(agent_root: Path) -> str | None:
    path = _path(agent_root)
    try:
        if not real_directory(agent_root, path.parent, create=False):
            return None
        raw = safe_json.load_file(path, max_bytes=MAX_FILE_BYTES, max_depth=2)
        mode = raw.get("approval") if isinstance(raw, dict) else None
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # UnsafeJSON is a ValueError
        log.warning("%s is unreadable (%s); approval stays off", path, exc)
        return None
    if mode not in APPROVAL_MODES:
        log.warning("%s: approval %r is not one of %s; off", path, mode, APPROVAL_MODES)
        return None
    return str(mode)


def write_approval(agent_root: Path, mode: str) -> None:
    if mode not in APPROVAL_MODES:
        raise InvalidInput(f"approval {mode!r}: expected one of {', '.join(APPROVAL_MODES)}")
    atomic_write_text(
        _path(agent_root), json.dumps({"approval": mode}, indent=1), within=agent_root
    )
