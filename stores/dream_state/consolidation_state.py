"""Settled near-duplicate clusters, per agent: the document `consolidation/clusters.json`
(`stores.contract.documents`).

A cluster the LLM was shown and did not merge is settled with a decline count; gating
reopens it (merge-only) after a backoff. The file is small (one record per cluster that
is still a cluster) and replaced atomically; a malformed file is set aside and treated
as empty — the worst case is that settled clusters are shown again one cycle early.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterable
from datetime import datetime

from dreamkeeper.core.models import as_utc
from dreamkeeper.policies.gating import SettledCluster
from dreamkeeper.stores import safe_json
from dreamkeeper.stores.contract.documents import AgentDocuments

NAME = "consolidation/clusters.json"
ASIDE = "consolidation/clusters.json.malformed"
MAX_FILE_BYTES = 64 * 1_048_576
MAX_MEMBERS = 10_000
MAX_ID_CHARS = 64
MAX_DECLINES = 1_000_000

log = logging.getLogger(__name__)


class ClusterState:
    def __init__(self, documents: AgentDocuments) -> None:
        self.documents = documents

    def load(self) -> dict[str, SettledCluster]:
        try:
            data = self.documents.read(NAME, max_bytes=MAX_FILE_BYTES)
            if data is None:
                return {}
            raw = safe_json.loads(data, max_bytes=MAX_FILE_BYTES, max_depth=4)
            records = [_record(r) for r in raw["clusters"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:  # UnsafeJSON: ValueError
            log.warning(
                "%s is malformed (%s); moved to %s, starting empty",
                self.documents.location(NAME),
                exc,
                ASIDE,
            )
            with contextlib.suppress(OSError):
                self.documents.rename(NAME, ASIDE)
            return {}
        return {r.key: r for r in records}

    def save(self, records: Iterable[SettledCluster]) -> None:
        ordered = sorted(records, key=lambda r: r.key)
        self.documents.write(
            NAME,
            json.dumps(
                {
                    "clusters": [
                        {
                            "members": list(r.members),
                            "declines": r.declines,
                            "settledAt": r.settled_at.isoformat(),
                        }
                        for r in ordered
                    ]
                },
                indent=1,
            ).encode("utf-8"),
        )


def _record(raw: object) -> SettledCluster:
    """One record as `save` writes it; ValueError or TypeError for anything else."""
    if not isinstance(raw, dict):
        raise TypeError("a cluster record is not an object")
    members, declines, settled = raw["members"], raw["declines"], raw["settledAt"]
    if not isinstance(members, list) or not 0 < len(members) <= MAX_MEMBERS:
        raise ValueError("members is not a list of ids")
    if not all(isinstance(m, str) and 0 < len(m) <= MAX_ID_CHARS for m in members):
        raise ValueError("members is not a list of ids")
    if isinstance(declines, bool) or not isinstance(declines, int):
        raise TypeError("declines is not a whole number")
    if not 0 <= declines <= MAX_DECLINES:
        raise ValueError(f"declines {declines} is out of range")
    if not isinstance(settled, str):
        raise TypeError("settledAt is not text")
    return SettledCluster(tuple(members), declines, as_utc(datetime.fromisoformat(settled)))
