from __future__ import annotations

import json
from datetime import UTC, datetime

from dreamkeeper.core.models import MemoryEntry, content_fingerprint

FIELDS = {
    "id",
    "revision",
    "retiredInto",
    "appliedOps",
    "content",
    "category",
    "tags",
    "createdAt",
    "updatedAt",
    "metadata",
    "importanceScore",
    "lastSeenAt",
    "reinforcementCount",
    "archivedAt",
    "archiveReason",
    "consolidationReviewedHash",
    "validFrom",
    "invalidAt",
    "supersededBy",
}


def test_round_trip_writes_every_field_in_camel_case():
    at = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
    entry = MemoryEntry(
        id="0123456789ab",
        content="User lives in Chicago",
        category="user-preferences/tz",
        tags=["tz"],
        created_at=at,
        last_seen_at=at,
        metadata={"source": "user"},
        importance_score=0.9,
        reinforcement_count=3,
    )
    raw = json.loads(entry.to_json())
    assert set(raw) == FIELDS
    assert raw["importanceScore"] == 0.9 and raw["archivedAt"] is None
    assert MemoryEntry.from_json(entry.to_json()) == entry


def test_legacy_file_without_newer_fields_loads_with_documented_defaults():
    legacy = {
        "id": "0123456789ab",
        "content": "old fact",
        "category": None,
        "tags": ["a"],
        "createdAt": "2024-06-01T10:00:00+00:00",
        "updatedAt": None,
        "metadata": None,
        "importanceScore": 0.4,
    }
    entry = MemoryEntry.from_json(json.dumps(legacy))
    assert entry.last_seen_at == datetime(2024, 6, 1, 10, tzinfo=UTC)
    assert entry.reinforcement_count == 1
    assert entry.metadata == {} and entry.archived_at is None


def test_naive_timestamps_are_read_as_utc():
    entry = MemoryEntry.from_json(
        json.dumps({"id": "0123456789ab", "content": "x", "createdAt": "2024-06-01T10:00:00"})
    )
    assert entry.created_at.tzinfo is not None
    assert entry.created_at == datetime(2024, 6, 1, 10, tzinfo=UTC)


def test_fingerprint_is_first_eight_bytes_of_sha256_hex():
    assert content_fingerprint("abc") == "ba7816bf8f01cfea"
