"""The `dreamkeeper` command line.

Exit codes: 0 success; 2 the request cannot be done as asked (bad input, unknown id,
conflict, a setting out of range, another store on the task queue) — one line on
stderr; 1 anything else (Temporal or a worker unreachable in time, an unexpected
error); 130 interrupted (Ctrl-C). Output cut short by a closed pipe (`| head`) is not
an error. The console script exits through `entry()`, which flushes and ends the process
at once: interpreter shutdown with the Temporal SDK's runtime threads alive can abort
(exit 134 or 139) after the work is done.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from dreamkeeper.core.errors import DreamkeeperError, InvalidInput
from dreamkeeper.core.settings import StoreSettings
from dreamkeeper.core.validation import validate_agent_id
from dreamkeeper.stores.search import DEFAULT_LIMIT
from dreamkeeper.cli import dream as dream_cli
from dreamkeeper.cli import memory as commands
from dreamkeeper.cli import serve as service_commands
from dreamkeeper.worker.logs import configure_logging

Command = Callable[[argparse.Namespace, StoreSettings], int]


class UsageError(InvalidInput):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, like every other bad input
        raise UsageError(f"{self.prog}: {message}")


JSON_HELP = "print JSON instead of text"


def _direct(p: argparse.ArgumentParser) -> None:
    p.add_argument("--direct", action="store_true", help="write the store, not via the worker")


def _global_options(parser: argparse.ArgumentParser, *, after: bool = False) -> None:
    """--data, --agent, --url and -v: before the subcommand, and again after it (as
    `dreamkeeper mcp --agent A`). After it they default to SUPPRESS, so an option given
    only before the subcommand is not reset by the subcommand's parser."""
    unset: str | None = argparse.SUPPRESS if after else None
    parser.add_argument(
        "--data",
        default=unset,
        help="data directory (env DREAMKEEPER_DATA, default ./.dreamkeeper)",
    )
    parser.add_argument(
        "--agent", default=unset, help="agent id (env DREAMKEEPER_AGENT, default 'default')"
    )
    parser.add_argument(
        "--url",
        default=unset,
        help="a `dreamkeeper serve` to read and write through (env DREAMKEEPER_URL); "
        "--data is then that server's",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS if after else False,
        help="log at debug level; an error prints its traceback",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dreamkeeper", description="Long-term memory for LLM agents.")
    _global_options(parser)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("save", help="save a memory; prints its id once it is durable")
    p.set_defaults(handler=commands.save)
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
    _direct(p)

    p = sub.add_parser("search", help="search memories; no query browses recent ones")
    p.set_defaults(handler=commands.search_cmd)
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
    p.add_argument("--json", action="store_true", help=JSON_HELP)

    p = sub.add_parser("tags", help="the distinct tags of live memories, sorted")
    p.set_defaults(handler=commands.tags)
    p.add_argument("--json", action="store_true", help=JSON_HELP)

    p = sub.add_parser("show", help="show one memory, archived ones too")
    p.set_defaults(handler=commands.show)
    p.add_argument("id", help="the memory's id (12 hex digits)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)

    p = sub.add_parser("delete", help="archive a memory (recoverable until purged)")
    p.set_defaults(handler=commands.delete)
    p.add_argument("id", help="the memory's id (12 hex digits)")
    _direct(p)

    p = sub.add_parser("restore", help="bring an archived memory back")
    p.set_defaults(handler=commands.restore)
    p.add_argument("id", help="the memory's id (12 hex digits)")
    p.add_argument(
        "--force",
        action="store_true",
        help="even if what it was merged into is live (then both count it)",
    )
    _direct(p)

    p = sub.add_parser("archived", help="list archived memories")
    p.set_defaults(handler=commands.archived)
    p.add_argument("--json", action="store_true", help=JSON_HELP)

    p = sub.add_parser("purge", help="hard-delete memories archived longer than the retention")
    p.set_defaults(handler=commands.purge)
    p.add_argument(
        "--retention-days",
        type=int,
        help="archived longer than N days (default DREAMKEEPER_ARCHIVE_RETENTION_DAYS; "
        "0 or -1: purge nothing)",
    )

    p = sub.add_parser(
        "dream", help="run a dream cycle; --dry-run previews it, `dream undo RUN_ID` reverts one"
    )
    p.set_defaults(handler=dream_cli.dream)
    p.add_argument(
        "words",
        nargs="*",
        metavar="ACTION",
        help="undo RUN_ID | pending | approve [KEY...] | reject [KEY...] (no KEY: all)",
    )
    # Not dest `run`: parsed options share one namespace with the handler main() calls.
    p.add_argument(
        "--run", dest="run_id", help="approve/reject/pending: the Consolidation workflow id"
    )
    p.add_argument(
        "--set-approval",
        choices=["off", "risky", "all"],
        help="the agent's approval setting for every later cycle (written to its store)",
    )
    p.add_argument("--dry-run", action="store_true", help="plan the cycle, apply nothing")
    p.add_argument("--apply", metavar="PLAN", help="apply exactly this plan (a file, or -)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)

    p = sub.add_parser("stats", help="counts, categories, sources and skipped files")
    p.set_defaults(handler=commands.stats)
    p = sub.add_parser("config", help="print the effective settings (secrets hidden)")
    p.set_defaults(handler=commands.config)
    p.add_argument("--json", action="store_true", help="as JSON, one object per section")
    p = sub.add_parser("worker", help="run the Temporal worker (TEMPORAL_ADDRESS, ...)")
    p.set_defaults(handler=commands.worker)
    p.add_argument(
        "--reclaim",
        action="store_true",
        help="take over a task queue claimed by another data directory",
    )
    p = sub.add_parser(
        "dev",
        help="start a local Temporal dev server (UI :8233) and `serve` on it (worker + API)",
    )
    p.set_defaults(handler=commands.dev)
    p.add_argument("--demo", action="store_true", help="run a short tour through the workflows")
    p.add_argument(
        "--port",
        dest="temporal_port",
        type=int,
        help="the dev server's gRPC port (default 7233; the worker connects to it)",
    )
    p.add_argument("--ui-port", type=int, help="the dev server's web UI port (default 8233)")
    p = sub.add_parser(
        "embed-server", help="serve local embeddings (extra: dreamkeeper[local-embeddings])"
    )
    p.set_defaults(handler=commands.embed_server)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="port to bind (8765)")
    p = sub.add_parser("codec-server", help="decrypt payloads for the Temporal UI and CLI")
    p.set_defaults(handler=commands.codec_server)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    p.add_argument("--port", type=int, default=8081, help="port to bind (8081)")
    p = sub.add_parser(
        "serve", help="run the worker and the memory service (HTTP API, MCP, /metrics)"
    )
    p.set_defaults(handler=service_commands.serve)
    p.add_argument("--host", help="address to bind (env DREAMKEEPER_SERVE_HOST, 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (env DREAMKEEPER_SERVE_PORT, 8780)")
    p.add_argument(
        "--reclaim",
        action="store_true",
        help="take over a task queue claimed by another data directory",
    )
    p = sub.add_parser("mcp", help="the memory tools as an MCP server over stdio (--agent)")
    p.set_defaults(handler=service_commands.mcp_stdio)
    p.add_argument("--session", default="mcp", help="the session id the tools work in")
    p = sub.add_parser("export", help="write an agent's memories to a versioned JSON Lines file")
    p.set_defaults(handler=service_commands.export_cmd)
    p.add_argument("--output", "-o", help="file to write (default: stdout)")
    p.add_argument("--include-archived", action="store_true", help="archived memories too")
    p.add_argument("--with-vectors", action="store_true", help="add each entry's stored vector")
    p = sub.add_parser("import", help="bring memories from an export file into --agent's store")
    p.set_defaults(handler=service_commands.import_cmd)
    p.add_argument("file", help="an export file (- for stdin)")
    p.add_argument("--dry-run", action="store_true", help="show what would change, write nothing")
    p = sub.add_parser("demo", help="a short tour against a throwaway store")
    p.set_defaults(handler=commands.demo)
    p.add_argument("--keep", action="store_true", help="keep the demo store afterwards")
    for command in sub.choices.values():
        _global_options(command, after=True)
    return parser


def _settings(args: argparse.Namespace) -> StoreSettings:
    settings = StoreSettings.from_env()
    overrides: dict[str, object] = {}
    # An empty --data or --agent is a mistake, not "the default": refused, never a write
    # to ./.dreamkeeper or agent 'default' the caller did not name.
    if args.data is not None:
        if not args.data.strip():
            raise InvalidInput("--data is empty: name a data directory")
        overrides["data_dir"] = Path(args.data)
    if args.agent is not None:
        overrides["agent_id"] = validate_agent_id(args.agent)
    if overrides:
        settings = StoreSettings(**{**settings.__dict__, **overrides})
    return settings


# Commands that only work on a local store: no serve route does what they do.
LOCAL_ONLY = ("export", "import", "stats", "tags", "purge")
# Commands that read or change an agent's existing store: an unknown agent (a typo) is
# refused, as serve refuses it, before anything creates a lock file or directory for it.
# `save` and `import` are how an agent comes to exist; `dream` checks for itself (a
# plan names its agent).
EXISTING_STORE = (
    *("search", "tags", "show", "archived", "stats", "export"),
    *("delete", "restore", "purge"),
)


def _check_target(args: argparse.Namespace, settings: StoreSettings) -> None:
    if args.command in LOCAL_ONLY:
        commands.refuse_url(args, f"`{args.command}`")
    if args.command in EXISTING_STORE and not service_commands.service_settings(args).url:
        commands.require_store(settings)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit code (for tests: no process exit here)."""
    parser = build_parser()
    verbose = False
    try:
        args = parser.parse_args(argv)
        verbose = args.verbose
        # Long-running commands report what they do; one-shot commands only what went wrong.
        quiet = args.command not in (
            "worker",
            "dev",
            "serve",
            "codec-server",
            "embed-server",
            "demo",
        )
        configure_logging(verbose=verbose, quiet=quiet)
        settings = _settings(args)
        _check_target(args, settings)
        handler: Command = args.handler
        return handler(args, settings)
    except DreamkeeperError as exc:
        if verbose:
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except SystemExit as exc:  # argparse's --help: its code, not a process exit
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except BrokenPipeError:
        raise
    except Exception as exc:  # noqa: BLE001 - the CLI reports; the traceback only with -v
        if verbose:
            traceback.print_exc()
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def entry() -> NoReturn:
    """The console script: run, flush, and end the process with exactly that code."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        code = 0  # the reader went away (`| head`): nothing more to say
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    try:
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):
        pass
    logging.shutdown()
    os._exit(code)


if __name__ == "__main__":
    entry()
