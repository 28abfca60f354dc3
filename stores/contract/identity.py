"""A store's identity: which data directory or database a worker or client is talking
about (a random id, and where it is, for messages). Workers claim their task queue with
it, clients compare theirs with the worker's (`check_same`)."""

from __future__ import annotations

from dataclasses import dataclass

from dreamkeeper.core.errors import StoreMismatch


@dataclass(frozen=True)
class StoreIdentity:
    store_id: str
    location: str  # host:absolute path, for messages

    def describe(self) -> str:
        return f"store {self.store_id} at {self.location}"


def check_same(expected: StoreIdentity | str | None, actual: StoreIdentity, who: str) -> None:
    """Raise `StoreMismatch` naming both sides unless `expected` is `actual`'s store."""
    if expected is None:
        return
    expected_id = expected if isinstance(expected, str) else expected.store_id
    if expected_id == actual.store_id:
        return
    theirs = expected.describe() if isinstance(expected, StoreIdentity) else f"store {expected_id}"
    raise StoreMismatch(
        f"{who} uses {theirs}, but this worker uses {actual.describe()}: they must share one "
        "data directory (set DREAMKEEPER_DATA / --data to the same place) or database "
        "(DREAMKEEPER_DATABASE_URL)"
    )
