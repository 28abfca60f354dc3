"""The `dreamkeeper` command line.

Exit codes: 0 success; 2 the request cannot be done as asked (bad input, unknown id,
conflict, a setting out of range, another store on the task queue) — one line on
stderr; 1 anything else (Temporal or a worker unreachable in time, an unexpected
error); 130 interrupted (Ctrl-C). With -v an error is not caught here: it propagates
to `entry()`, which lets Python print its own traceback and exits with the same code.
Output cut short by a closed pipe (`| head`) is not an error. The console script exits
through `entry()`, which flushes and ends the process at once: interpreter shutdown with
the Temporal SDK's runtime threads alive can abort (exit 134 or 139) after the work is
done, so an error is not left to end the process either.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NoReturn

from dreamkeeper.cli import config, database, dev, dream, forget, memory, serve, token, transfer
from dreamkeeper.cli.common import Command, refuse_url, require_store, service_settings
from dreamkeeper.core.errors import DreamkeeperError, InvalidInput
from dreamkeeper.core.settings import StoreSettings
from dreamkeeper.core.validation import validate_agent_id
from dreamkeeper.worker.logs import configure_logging

# Each group registers its commands, their options and handlers next to the handlers.
COMMAND_GROUPS = (memory, forget, dream, config, transfer, database, token, serve, dev)


class UsageError(InvalidInput):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, like every other bad input
        raise UsageError(f"{self.prog}: {message}")


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
        help="log at debug level; an error is raised, with its full traceback",
    )


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """Every command's parser below `parser`, actions (`dream undo`) included."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield child
                yield from _parsers(child)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dreamkeeper", description="Long-term memory for LLM agents.")
    _global_options(parser)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for group in COMMAND_GROUPS:
        group.register(sub)
    for command in _parsers(parser):
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


def _check_target(args: argparse.Namespace, settings: StoreSettings) -> None:
    """What a command's parser declared about it (`set_defaults`): `local_only`, no serve
    route does it; `existing_store`, an unknown agent or data directory is refused before
    anything creates a lock file or directory for it."""
    if getattr(args, "local_only", False):
        refuse_url(args, f"`{args.command}`")
    if getattr(args, "existing_store", False) and not service_settings(args).url:
        require_store(settings)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit code (for tests: no process exit here). With -v
    an error propagates (to a debugger, to `entry()`) instead of becoming a code."""
    parser = build_parser()
    verbose = False
    try:
        args = parser.parse_args(argv)
        verbose = args.verbose
        # Long-running commands report what they do; one-shot commands only what went wrong.
        configure_logging(verbose=verbose, quiet=not getattr(args, "reports", False))
        settings = _settings(args)
        _check_target(args, settings)
        handler: Command = args.handler
        return handler(args, settings)
    except DreamkeeperError as exc:
        if verbose:
            raise  # entry() prints the traceback and exits with exc.exit_code
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
            raise
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
    except Exception as exc:  # -v let it through: Python's own traceback, the same exit code
        sys.excepthook(type(exc), exc, exc.__traceback__)
        code = exc.exit_code if isinstance(exc, DreamkeeperError) else 1
    try:
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):
        pass
    logging.shutdown()
    os._exit(code)


if __name__ == "__main__":
    entry()
