"""`dreamkeeper db upgrade`, `db status` (the PostgreSQL schema) and `dreamkeeper
migrate --to postgresql://...` (a data directory copied into a database)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from dreamkeeper.cli.common import Subparsers, add_json
from dreamkeeper.core.errors import InvalidInput, SettingsError
from dreamkeeper.core.settings import StoreSettings, check_database_url

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from dreamkeeper.stores.identity import StoreIdentity
    from dreamkeeper.stores.migrate import AgentCopy


def _url(args: argparse.Namespace, settings: StoreSettings) -> str:
    """--database, else DREAMKEEPER_DATABASE_URL; one of them is needed."""
    url = getattr(args, "database", None) or settings.database_url
    if not url:
        raise InvalidInput(
            f"`{args.command}` needs a database: set DREAMKEEPER_DATABASE_URL or pass "
            "--database postgresql://user@host/dbname"
        )
    try:
        return check_database_url(url)
    except ValueError as exc:
        raise SettingsError(f"--database: {exc}") from None


def db_upgrade(args: argparse.Namespace, settings: StoreSettings) -> int:
    from dreamkeeper.stores.postgres.database import Database
    from dreamkeeper.stores.postgres.migrations import SCHEMA_VERSION, upgrade

    db = Database(_url(args, settings), max_size=1)
    try:
        applied = upgrade(db)
    finally:
        db.close()
    for migration in applied:
        print(f"applied {migration.version}: {migration.name}")
    state = "upgraded to" if applied else "already at"
    print(f"the database at {db.location} is {state} schema version {SCHEMA_VERSION}")
    return 0


def db_status(args: argparse.Namespace, settings: StoreSettings) -> int:
    """Exit 0 when the schema is this code's, 2 when it needs `db upgrade` (or newer code)."""
    import json

    from dreamkeeper.stores.backends import PostgresBackend
    from dreamkeeper.stores.postgres.migrations import SCHEMA_VERSION, current_version

    backend = PostgresBackend(_url(args, settings))
    have = current_version(backend.db)
    identity = backend.read_identity()
    if have == SCHEMA_VERSION:
        state = "current"
    elif have < SCHEMA_VERSION:
        state = "needs `dreamkeeper db upgrade`"
    else:
        state = "newer than this Dreamkeeper: upgrade Dreamkeeper"
    status = {
        "database": backend.location,
        "schemaVersion": have,
        "codeSchemaVersion": SCHEMA_VERSION,
        "state": state,
        "storeId": identity.store_id if identity else None,
    }
    if args.json:
        print(json.dumps(status, indent=2))
    else:
        print(f"database: {backend.location}")
        print(f"schema: version {have} (this Dreamkeeper: {SCHEMA_VERSION}): {state}")
        if identity is not None:
            print(f"store: {identity.store_id}")
    return 0 if have == SCHEMA_VERSION else 2


def migrate_cmd(args: argparse.Namespace, settings: StoreSettings) -> int:
    from dreamkeeper.cli.common import require_data_dir
    from dreamkeeper.stores.backends import FileBackend, PostgresBackend
    from dreamkeeper.stores.migrate import carry_agent_keys, migrate

    url = _url(argparse.Namespace(command="migrate", database=args.to), settings)
    require_data_dir(settings)
    source = FileBackend(settings.data_dir)
    # The data directory's payload key seals what is copied (stores.postgres.sealing).
    target = PostgresBackend(url, settings.data_dir)
    target.check_ready()  # the schema first: `db upgrade` is a deliberate step
    print(f"copying {source.location} into {target.location}", file=sys.stderr, flush=True)
    report = migrate(source, target, progress=_print_progress)
    tokens = report.tokens
    print(
        f"access tokens: {tokens.tokens} ({tokens.carried} new this run, {tokens.revoked} "
        f"revocations carried){'; the database is marked as issuing tokens' if tokens.issued else ''}",
        file=sys.stderr,
        flush=True,
    )
    keys = carry_agent_keys(settings.data_dir, target.db)
    print(
        f"payload data keys: {keys.keys} ({keys.carried} new this run), "
        f"{keys.destroyed} destroyed ids added",
        file=sys.stderr,
        flush=True,
    )
    conflicts = [(a.agent_id, i) for a in report.agents for i in a.conflicts]
    for agent_id, entry_id in conflicts:
        print(f"conflict: agent {agent_id} memory {entry_id} is in the database with other content")
    for mismatch in (*report.mismatches, *tokens.mismatches, *keys.mismatches):
        print(f"mismatch: {mismatch}")
    agents = len(report.agents)
    if report.verified and not conflicts and not keys.mismatches:
        print(
            f"migrated {agents} agents, {report.entries} memories ({report.created} new this "
            f"run), {tokens.tokens} access tokens, {keys.keys} payload data keys: counts and "
            "content hashes match"
        )
        # Only once the copy is verified: what lets the database's workers take over the
        # task queue this directory's workers claimed (worker.claim), and nothing else.
        _record_move(settings.data_dir, source.location, target.identity)
        return 0
    print(
        f"migrated {agents} agents with {len(conflicts)} conflicts and "
        f"{len(report.mismatches) + len(tokens.mismatches) + len(keys.mismatches)} mismatches: "
        "the database differs "
        f"from {source.location}"
    )
    return 2


def _print_progress(done: int, total: int, copy: AgentCopy) -> None:
    print(
        f"[{done}/{total}] agent {copy.agent_id}: {copy.entries} memories "
        f"({copy.created} new), {copy.working} working-memory keys, {copy.turns} "
        f"turns, {copy.documents} documents",
        file=sys.stderr,
        flush=True,
    )


def _record_move(data_dir: Path, location: str, target: Callable[[], StoreIdentity]) -> None:
    """Record in the data directory that its store moved into the store `target`
    identifies, and say so."""
    from dreamkeeper.stores.identity import record_move

    try:
        moved = record_move(data_dir, target())
    except OSError as exc:
        print(
            f"note: cannot record the move in {location} ({exc.strerror or exc}): "
            "start the first worker on the database with --reclaim",
            file=sys.stderr,
        )
        return
    if moved:
        print(
            f"{location} records the move: workers on the database take "
            "over the task queue its workers served"
        )


def register(sub: Subparsers) -> None:
    """`db` alone is `db status`. An action's options default to SUPPRESS, so one given
    before the action (`db --json status`) is kept."""
    p = sub.add_parser("db", help="the PostgreSQL schema: `db status` (alone too), `db upgrade`")
    p.set_defaults(handler=db_status, local_only=True)
    _database_option(p)
    add_json(p)
    actions = p.add_subparsers(dest="db_action", metavar="ACTION", title="actions")
    a = actions.add_parser("upgrade", help="apply the schema migrations the database lacks")
    a.set_defaults(handler=db_upgrade)
    _database_option(a, default=argparse.SUPPRESS)
    a = actions.add_parser("status", help="the schema version and the store id")
    a.set_defaults(handler=db_status)
    _database_option(a, default=argparse.SUPPRESS)
    add_json(a, default=argparse.SUPPRESS)

    p = sub.add_parser(
        "migrate", help="copy the data directory's agents into a PostgreSQL database"
    )
    p.set_defaults(handler=migrate_cmd, local_only=True)
    p.add_argument(
        "--to", required=True, metavar="URL", help="the database: postgresql://user@host/dbname"
    )


def _database_option(p: argparse.ArgumentParser, default: object = None) -> None:
    p.add_argument(
        "--database",
        default=default,
        metavar="URL",
        help="postgresql:// URL (env DREAMKEEPER_DATABASE_URL)",
    )
