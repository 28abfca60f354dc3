"""`dreamkeeper export` and `import`: an agent's memories as a versioned JSON Lines file,
and back (read with a progress bar when stderr is a terminal). Both work on the store
this process reaches itself: the data directory, or the database of
DREAMKEEPER_DATABASE_URL (never through a serve)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import IO

from dreamkeeper.cli.common import Subparsers
from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.settings import StoreSettings, embedding_settings
from dreamkeeper.stores.backends import open_backend
from dreamkeeper.stores.forget import note_export
from dreamkeeper.stores.longterm.transfer import (
    ImportFile,
    apply_import,
    plan_import,
    read_export,
    write_export,
)
from dreamkeeper.stores.vectors.embedding_client import embedding_client


def _lines(handle: IO[str]) -> Iterator[str]:
    for line in handle:
        yield line.rstrip("\n")


def read_with_progress(path: str) -> ImportFile:
    with ExitStack() as stack:
        if path == "-":
            handle: IO[str] = sys.stdin
        else:
            try:
                handle = stack.enter_context(open(path, encoding="utf-8"))
            except OSError as exc:
                raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from None
        try:
            if not sys.stderr.isatty():
                return read_export(_lines(handle))
            from rich.progress import Progress

            with Progress(transient=True) as bar:
                task = bar.add_task("reading", total=None)
                return read_export(_lines(handle), progress=lambda n: bar.update(task, completed=n))
        except UnicodeDecodeError:
            raise InvalidInput(f"{path} is not UTF-8 text") from None


def export_cmd(args: argparse.Namespace, settings: StoreSettings) -> int:
    store = open_backend(settings).memory(settings.agent_id)
    options = {"include_archived": args.include_archived, "with_vectors": args.with_vectors}
    if args.output is None:
        count = write_export(store, sys.stdout, **options)
    else:
        try:
            with open(args.output, "w", encoding="utf-8") as out:
                count = write_export(store, out, **options)
        except OSError as exc:
            raise InvalidInput(f"cannot write {args.output}: {exc.strerror or exc}") from None
        # So that a later `forget` finds the copy this wrote (stdout is out of reach).
        note_export(store.documents, Path(args.output))
    print(f"exported {count} memories of agent {settings.agent_id}", file=sys.stderr)
    return 0


def import_cmd(args: argparse.Namespace, settings: StoreSettings) -> int:
    parsed = read_with_progress(args.file)
    embeddings = embedding_client(embedding_settings())
    store = open_backend(settings).memory(settings.agent_id, embeddings=embeddings)
    if args.dry_run:
        plan = plan_import(store, parsed)
    else:
        plan = apply_import(store, parsed)
    print(plan.summary(dry_run=args.dry_run))
    if args.dry_run:
        for entry_id in plan.create:
            print(f"  + {entry_id}")
        for entry_id in plan.conflicts:
            print(f"  ! {entry_id} (conflict)")
    return 0


def register(sub: Subparsers) -> None:
    p = sub.add_parser("export", help="write an agent's memories to a versioned JSON Lines file")
    p.set_defaults(handler=export_cmd, local_only=True, existing_store=True)
    p.add_argument("--output", "-o", help="file to write (default: stdout)")
    p.add_argument("--include-archived", action="store_true", help="archived memories too")
    p.add_argument("--with-vectors", action="store_true", help="add each entry's stored vector")

    # No existing_store: importing is how an agent (and a data directory) comes to exist.
    p = sub.add_parser("import", help="bring memories from an export file into --agent's store")
    p.set_defaults(handler=import_cmd, local_only=True)
    p.add_argument("file", help="an export file (- for stdin)")
    p.add_argument("--dry-run", action="store_true", help="show what would change, write nothing")
