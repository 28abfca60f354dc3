"""Settled near-duplicate clusters, per agent: `consolidation/clusters.json`.

A cluster the LLM was shown and did not merge is settled with a decline count; gating
reopens it (merge-only) after a backoff. The file is small (one record per cluster that
is still a cluster) and replaced atomically; a malformed file is set aside and treated
as empty — the worst case is that settled clusters are shown again one cycle early.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from dreamkeeper.policies.gating import SettledCluster
from dreamkeeper.stores.files import atomic_write_text
from dreamkeeper.stores.models import as_utc

log = logging.getLogger(__name__)


class ClusterState:
    def __init__(self, agent_root: Path) -> None:
        self.path = agent_root / "consolidation" / "clusters.json"

    def load(self) -> dict[str, SettledCluster]:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            records = [
                SettledCluster(
                    members=tuple(r["members"]),
                    declines=int(r["declines"]),
                    settled_at=as_utc(datetime.fromisoformat(r["settledAt"])),
                )
                for r in raw["clusters"]
            ]
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            aside = self.path.with_suffix(".json.malformed")
            log.warning("%s is malformed (%s); moved to %s, starting empty", self.path, exc, aside)
            self.path.replace(aside)
            return {}
        return {r.key: r for r in records}

    def save(self, records: Iterable[SettledCluster]) -> None:
        ordered = sorted(records, key=lambda r: r.key)
        atomic_write_text(
            self.path,
            json.dumps(
                {"clusters": [
                    {"members": list(r.members), "declines": r.declines,
                     "settledAt": r.settled_at.isoformat()}
                    for r in ordered
                ]},
                indent=1,
            ),
        )  # fmt: skip
