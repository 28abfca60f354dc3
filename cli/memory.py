"""The memory commands: save, search, tags, show, delete, restore, archived, purge, stats.

Writes go through the worker (a workflow each), or straight to the store with --direct,
or to a serve with --url; reads go to the store or the serve. Bad input raises
`InvalidInput` (exit 2), an unreachable server or worker `Unavailable` (exit 1);
`cli.main` turns both into one line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from dreamkeeper.agent.recall import SEARCH_MEMORY, empty_result
from dreamkeeper.cli.common import (
    Subparsers,
    add_direct,
    add_json,
    memory_client,
    remote_client,
)
from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.models import SOURCE_KEY, MemoryEntry, utc_now
from dreamkeeper.core.settings import StoreSettings, embedding_settings
from dreamkeeper.core.validation import (
    MAX_CONTENT_CHARS,
    parse_moment,
    validate_category,
    validate_content,
    validate_entry_id,
    validate_importance,
    validate_replaces,
    validate_tags,
)
from dreamkeeper.policies.provenance import parse_source
from dreamkeeper.stores.backends import open_backend
from dreamkeeper.stores.contract import MemoryStore
from dreamkeeper.stores.longterm.conflicts import note_conflicts
from dreamkeeper.stores.longterm.supersede import (
    apply_replaces,
    check_replaceable,
    restore_or_unsupersede,
)
from dreamkeeper.stores.search.query import (
    DEFAULT_LIMIT,
    conflict_note,
    display_text,
    format_hit,
    format_taxonomy,
    search,
)
from dreamkeeper.stores.vectors.embedding_client import embedding_client

if TYPE_CHECKING:
    from dreamkeeper.agent.remote import RemoteMemoryClient

MAX_RETENTION_DAYS = 36_500


def read_content(args: argparse.Namespace) -> str:
    """CONTENT, or `-` for stdin, or --file PATH (for content too long for an argv)."""
    if args.file is not None and args.content is not None:
        raise InvalidInput("give CONTENT or --file, not both")
    if args.file is not None:
        try:
            with open(args.file, "rb") as handle:
                data = handle.read(_READ_CAP)
        except OSError as exc:
            raise InvalidInput(f"cannot read {args.file}: {exc.strerror or exc}") from None
        return _decode(data, args.file)
    if args.content == "-":
        return _decode(sys.stdin.buffer.read(_READ_CAP), "stdin")
    if args.content is None:
        raise InvalidInput("save needs CONTENT, '-' (stdin) or --file PATH")
    return args.content


# At most 4 bytes a character: a read this long holds more characters than the limit.
_READ_CAP = MAX_CONTENT_CHARS * 4 + 1


def _decode(data: bytes, where: str) -> str:
    if len(data) >= _READ_CAP:
        # Only the first bytes were read: their count is not the size, so name the limit.
        raise InvalidInput(
            f"{where} holds more than {MAX_CONTENT_CHARS} characters: the limit is "
            f"{MAX_CONTENT_CHARS}; split it into focused entries"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"{where} is not UTF-8 text") from None


def _entry_json(entry: MemoryEntry, score: float | None = None) -> dict[str, Any]:
    data = entry.model_dump(mode="json", by_alias=True, exclude={"applied_ops"})
    if score is not None:
        data["score"] = round(score, 6)
    return data


def _print_entries(
    entries: list[MemoryEntry], store: MemoryStore, *, validity: bool = False
) -> None:
    now = store.now()
    for entry in entries:
        print(format_hit(entry, now, validity=validity, conflict=conflict_note(store, entry)))


def _asks_versions(args: argparse.Namespace) -> bool:
    return bool(args.include_superseded or args.as_of or args.history)


def _store(settings: StoreSettings, *, hybrid: bool = False) -> MemoryStore:
    embeddings = embedding_client(embedding_settings()) if hybrid else None
    return open_backend(settings).memory(settings.agent_id, embeddings=embeddings)


def save(args: argparse.Namespace, settings: StoreSettings) -> int:
    content = validate_content(read_content(args))
    parsed = parse_source(args.source)
    remote = remote_client(args)
    replaces = validate_replaces(args.replaces)
    valid_from = parse_moment(args.valid_from, "--valid-from")
    if remote is None:
        # Refuse bad input here, before a server or the store's writer lock (a refused
        # save leaves no trace), with the store's own messages.
        validate_category(args.category)
        validate_tags(args.tags)
        validate_importance(args.importance)
        if args.entry_id is not None:
            validate_entry_id(args.entry_id)
    if remote is None and args.direct:
        metadata = {SOURCE_KEY: parsed.value} if parsed.value else {}
        print(_save_direct(args, settings, content, metadata, replaces, valid_from))
    else:

        async def go() -> str:
            memory = remote if remote is not None else await memory_client(settings)
            ack = await memory.save_memory(
                settings.agent_id,
                content,
                category=args.category,
                tags=args.tags,
                source=args.source,
                importance=args.importance,
                entry_id=args.entry_id,
                idempotency_key=args.idempotency_key,
                replaces=replaces or None,
                force_replace=args.force_replace,
                valid_from=valid_from,
            )
            return ack.entry_id

        print(asyncio.run(go()))
    if parsed.note:
        print(f"note: {parsed.note}", file=sys.stderr)
    return 0


def _save_direct(
    args: argparse.Namespace,
    settings: StoreSettings,
    content: str,
    metadata: dict[str, str],
    replaces: list[str],
    valid_from: datetime | None,
) -> str:
    """`save --direct`: into the store in this process, without the worker; the new
    entry's id."""
    store = _store(settings)
    with store.writing():
        # The worker's save makes the same checks: another subject is refused (exit
        # 2, the reason on stderr) unless --force-replace, which the journal records.
        forced = check_replaceable(
            store,
            replaces,
            args.entry_id or "",
            content=content,
            category=args.category,
            force=args.force_replace,
        )
        entry = store.create(
            content,
            category=args.category,
            tags=args.tags,
            metadata=metadata,
            importance=args.importance,
            entry_id=args.entry_id,
            valid_from=valid_from,
        )
        apply_replaces(store, entry.id, replaces, forced=forced)
    if not replaces:
        note_conflicts(store, entry.id)
    for old_id, why in forced.items():
        print(f"note: replaced {old_id} over the subject check ({why})", file=sys.stderr)
    return entry.id


def delete(args: argparse.Namespace, settings: StoreSettings) -> int:
    validate_entry_id(args.id)
    remote = remote_client(args)
    if remote is not None:
        entry_id = asyncio.run(remote.delete_memory(settings.agent_id, args.id)).entry_id
    elif args.direct:
        entry_id = _store(settings).archive(args.id, "deleted by agent tool").id
    else:

        async def go() -> str:
            memory = await memory_client(settings)
            return (await memory.delete_memory(settings.agent_id, args.id)).entry_id

        entry_id = asyncio.run(go())
    print(f"archived {entry_id} (recoverable with `dreamkeeper restore {entry_id}` until purged)")
    return 0


def restore(args: argparse.Namespace, settings: StoreSettings) -> int:
    validate_entry_id(args.id)
    remote = remote_client(args)
    if remote is not None:
        result = remote.restore_memory(settings.agent_id, args.id, force=args.force)
        entry_id = asyncio.run(result).entry_id
    elif args.direct:
        entry_id = restore_or_unsupersede(_store(settings), args.id, force=args.force).id
    else:

        async def go() -> str:
            memory = await memory_client(settings)
            result = await memory.restore_memory(settings.agent_id, args.id, force=args.force)
            return result.entry_id

        entry_id = asyncio.run(go())
    print(f"restored {entry_id}")
    return 0


# -- reads and local maintenance ---------------------------------------------------------


def _metadata_args(pairs: list[str]) -> dict[str, str]:
    metadata = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidInput(f"invalid --meta {pair!r}: expected KEY=VALUE")
        metadata[key] = value
    return metadata


def search_cmd(args: argparse.Namespace, settings: StoreSettings) -> int:
    metadata = _metadata_args(args.metadata)
    remote = remote_client(args)
    if remote is not None:
        return _remote_search(args, settings, remote, metadata)
    store = _store(settings, hybrid=True)
    hits = search(store, args.query, **_search_filters(args, metadata))
    if args.json:
        print(json.dumps([_entry_json(h.entry, h.score) for h in hits], indent=2))
        return 0
    _print_entries([h.entry for h in hits], store, validity=_asks_versions(args))
    if args.query and args.query.strip():
        if not hits:
            print(empty_result(SEARCH_MEMORY, args.query))
    else:
        if not hits:
            print("No live memories in this scope.")
        print(format_taxonomy(store.categories()))
    return 0


def _search_filters(args: argparse.Namespace, metadata: dict[str, str]) -> dict[str, Any]:
    """`search`'s filters, the same for the store and a remote serve."""
    return {
        "category": args.category,
        "tags": args.tags,
        "limit": args.limit,
        "include_archived": args.include_archived,
        "include_superseded": args.include_superseded,
        "as_of": args.as_of,
        "history": args.history,
        "created_after": args.created_after,
        "created_before": args.created_before,
        "metadata": metadata,
    }


def _remote_search(
    args: argparse.Namespace,
    settings: StoreSettings,
    remote: RemoteMemoryClient,
    metadata: dict[str, str],
) -> int:
    hits = remote.search_memory(settings.agent_id, args.query, **_search_filters(args, metadata))
    if args.json:
        print(json.dumps([_entry_json(h.entry, h.score) for h in hits], indent=2))
        return 0
    now = utc_now()
    for hit in hits:
        print(format_hit(hit.entry, now, validity=_asks_versions(args)))
    if args.query and args.query.strip() and not hits:
        print(empty_result(SEARCH_MEMORY, args.query))
    elif not hits:
        print("No live memories in this scope.")
    return 0


def tags(args: argparse.Namespace, settings: StoreSettings) -> int:
    found = _store(settings).tags()
    if args.json:
        print(json.dumps(found))
    else:
        print("\n".join(found) if found else "No tags on live memories.")
    return 0


def show(args: argparse.Namespace, settings: StoreSettings) -> int:
    remote = remote_client(args)
    if remote is not None:
        entry = remote.get_memory(settings.agent_id, validate_entry_id(args.id))
        if args.json:
            print(json.dumps(_entry_json(entry), indent=2))
        else:
            print(format_hit(entry, utc_now()))
            print(display_text(entry.content, keep_newlines=True))
        return 0
    store = _store(settings)
    entry = store.require(args.id)
    if args.json:
        print(json.dumps(_entry_json(entry), indent=2))
    else:
        _print_entries([entry], store)
        print(display_text(entry.content, keep_newlines=True))
    return 0


def archived(args: argparse.Namespace, settings: StoreSettings) -> int:
    remote = remote_client(args)
    entries = (
        remote.archived(settings.agent_id) if remote is not None else _store(settings).archived()
    )
    if args.json:
        print(json.dumps([_entry_json(e) for e in entries], indent=2))
    elif not entries:
        print("No archived memories.")
    else:
        now = utc_now()
        for entry in entries:
            print(format_hit(entry, now))
    return 0


def purge(args: argparse.Namespace, settings: StoreSettings) -> int:
    days = args.retention_days
    if days is not None and not -1 <= days <= MAX_RETENTION_DAYS:
        raise InvalidInput(f"--retention-days {days} is out of range (-1 to {MAX_RETENTION_DAYS})")
    retention = settings.archive_retention if days is None else timedelta(days=days)
    store = _store(settings)
    if retention <= timedelta(0):
        # Zero or less turns purging off: the store keeps everything and counts nothing.
        print(
            f"purge is off (retention {retention.days} days): kept all "
            f"{len(store.archived())} archived"
        )
        return 0
    report = store.purge(retention, keep=settings.floor.protects)
    print(
        f"purged {len(report.purged)} of {report.considered} archived "
        f"({report.kept_in_retention} within retention, "
        f"{len(report.kept_high_value)} kept above the high-value floor)"
    )
    return 0


def stats(args: argparse.Namespace, settings: StoreSettings) -> int:
    store = _store(settings)
    live = store.entries()
    sources: dict[str, int] = {}
    for entry in live:
        key = entry.source or "unknown"
        sources[key] = sources.get(key, 0) + 1
    print(
        json.dumps(
            {
                "agent": store.agent_id,
                "live": len(live),
                "archived": len(store.archived()),
                "categories": store.categories(),
                "sources": dict(sorted(sources.items())),
                "skippedFiles": {str(p): reason for p, reason in store.problems().items()},
            },
            indent=2,
        )
    )
    return 0


# -- the parsers -------------------------------------------------------------------------

ID_HELP = "the memory's id (12 hex digits)"


def register(sub: Subparsers) -> None:
    """`local_only`: no serve route does it, so --url is refused; `existing_store`: it
    reads or changes an agent's store, so an unknown agent (a typo) is refused, as serve
    refuses it, before anything creates a lock file or directory for it. `save` (like
    `import`) is how an agent comes to exist."""
    _register_save(sub)
    _register_search(sub)
    _register_entry_commands(sub)


def _register_save(sub: Subparsers) -> None:
    p = sub.add_parser("save", help="save a memory; prints its id once it is durable")
    p.set_defaults(handler=save)
    p.add_argument("content", nargs="?", help="the text, or - to read it from stdin")
    p.add_argument("--file", help="read the text from this file")
    p.add_argument("--category", help="a/b/c path of [A-Za-z0-9_-] segments")
    p.add_argument(
        "--tag", action="append", dest="tags", default=[], help="a tag (repeatable, up to 32)"
    )
    p.add_argument("--source", help="user, tool:<name> or inferred")
    p.add_argument("--importance", type=float, default=0.5, help="0 to 1 (default 0.5)")
    p.add_argument("--entry-id", help="the id to save under: repeating the call is safe")
    p.add_argument("--idempotency-key", help="derive the id from this key (same effect)")
    p.add_argument(
        "--replaces",
        action="append",
        default=[],
        metavar="ID",
        help="a memory this fact replaces (a changed fact; kept as history; repeatable); "
        "refused (exit 2, nothing saved) unless it is an older version of the same fact",
    )
    p.add_argument(
        "--force-replace",
        action="store_true",
        help="replace what --replaces names even if it looks like another subject (journaled)",
    )
    p.add_argument(
        "--valid-from",
        metavar="WHEN",
        help="when the fact became true, if not now: an ISO 8601 date or time (2026-03-01)",
    )
    add_direct(p)


def _register_search(sub: Subparsers) -> None:
    p = sub.add_parser("search", help="search memories; no query browses recent ones")
    p.set_defaults(handler=search_cmd, existing_store=True)
    p.add_argument("query", nargs="?", help="what to look for; none: browse recent memories")
    p.add_argument("--category", help="only this category and the ones under it")
    p.add_argument(
        "--tag", action="append", dest="tags", default=[], help="only entries with this tag"
    )
    p.add_argument(
        "--meta",
        action="append",
        dest="metadata",
        default=[],
        metavar="KEY=VALUE",
        help="only entries whose metadata has KEY equal to VALUE (repeatable)",
    )
    p.add_argument("--created-after", help="ISO 8601 date or time, inclusive")
    p.add_argument("--created-before", help="ISO 8601 date or time, inclusive")
    p.add_argument(
        "--limit", type=int, default=DEFAULT_LIMIT, help=f"at most N hits (default {DEFAULT_LIMIT})"
    )
    p.add_argument("--include-archived", action="store_true", help="archived memories too")
    p.add_argument(
        "--include-superseded", action="store_true", help="replaced versions of facts too"
    )
    p.add_argument("--as-of", help="what was true at this ISO 8601 date or time")
    p.add_argument("--history", metavar="ID", help="every version of this fact, oldest first")
    add_json(p)


def _register_entry_commands(sub: Subparsers) -> None:
    """One memory or the store as a whole: tags, show, delete, restore, archived,
    purge, stats."""
    p = sub.add_parser("tags", help="the distinct tags of live memories, sorted")
    p.set_defaults(handler=tags, local_only=True, existing_store=True)
    add_json(p)

    p = sub.add_parser("show", help="show one memory, archived ones too")
    p.set_defaults(handler=show, existing_store=True)
    p.add_argument("id", help=ID_HELP)
    add_json(p)

    p = sub.add_parser("delete", help="archive a memory (recoverable until purged)")
    p.set_defaults(handler=delete, existing_store=True)
    p.add_argument("id", help=ID_HELP)
    add_direct(p)

    p = sub.add_parser("restore", help="bring an archived memory back")
    p.set_defaults(handler=restore, existing_store=True)
    p.add_argument("id", help=ID_HELP)
    p.add_argument(
        "--force",
        action="store_true",
        help="even if what it was merged into is live (then both count it)",
    )
    add_direct(p)

    p = sub.add_parser("archived", help="list archived memories")
    p.set_defaults(handler=archived, existing_store=True)
    add_json(p)

    p = sub.add_parser("purge", help="hard-delete memories archived longer than the retention")
    p.set_defaults(handler=purge, local_only=True, existing_store=True)
    p.add_argument(
        "--retention-days",
        type=int,
        help="archived longer than N days (default DREAMKEEPER_ARCHIVE_RETENTION_DAYS; "
        "0 or -1: purge nothing)",
    )

    p = sub.add_parser("stats", help="counts, categories, sources and skipped files")
    p.set_defaults(handler=stats, local_only=True, existing_store=True)
