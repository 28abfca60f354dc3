"""The switch: which backend holds every tier — files under one data directory (the
embedded default, `stores.files`) or one PostgreSQL database (`DREAMKEEPER_DATABASE_URL`,
`stores.postgres`). Everything that opens a store — the worker, serve, the codec server,
`MemoryClient`, every CLI command, `migrate`, the benches — asks `open_backend()` for it:
this is the one place that reads the database setting or names a backend class, so no
caller can write to one backend while the rest of the deployment reads the other.

Each backend is imported only when chosen: a process given a database never loads the
file backend's modules, and one given a data directory never loads PostgreSQL's
(tests/stores/test_wings.py)."""

from __future__ import annotations

from dreamkeeper.core.settings import StoreSettings
from dreamkeeper.stores.contract.backend import StoreBackend


def open_backend(settings: StoreSettings) -> StoreBackend:
    """The backend the settings name: the database when `database_url` is set, else the
    data directory (which a database process still uses for its payload key and keyring,
    as the codec does)."""
    if settings.database_url:
        from dreamkeeper.stores.postgres.backend import PostgresBackend

        return PostgresBackend(settings.database_url, settings.data_dir)
    from dreamkeeper.stores.files.backend import FileBackend

    return FileBackend(settings.data_dir)
