"""Input validation for everything that becomes a path, a key or stored text.

Every check raises `InvalidInput` with a message that names the offending value, and
runs before anything touches the disk, so a rejected call changes nothing.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta

from dreamkeeper.core.errors import InvalidInput

MAX_CONTENT_CHARS = 20_000
"""Largest content a single long-term entry may hold (documented in README)."""
MAX_CATEGORY_CHARS = 200
MAX_TAGS = 32
MAX_TAG_CHARS = 64
MAX_METADATA_KEYS = 32
MAX_METADATA_VALUE_CHARS = 2_000

_AGENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-]{0,63}")
_ENTRY_ID = re.compile(r"[0-9a-f]{12}")
# A dream run id names a ledger file and goes into a Temporal workflow id
# (`undo-{agent}-{run}-{suffix}`, limited to 1,000 characters by the server): a run id
# is a UUID; anything else that fits this is refused by the ledger lookup, not here.
_CYCLE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-]{0,127}")
_CATEGORY = re.compile(r"[a-zA-Z0-9_\-]+(/[a-zA-Z0-9_\-]+)*")
_METADATA_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_\-]{0,63}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def validate_agent_id(agent_id: str) -> str:
    if not isinstance(agent_id, str) or not _AGENT_ID.fullmatch(agent_id):
        raise InvalidInput(
            f"invalid agent id {agent_id!r}: use 1-64 letters, digits, '_' or '-', "
            "starting with a letter or digit"
        )
    return agent_id


def validate_entry_id(entry_id: str) -> str:
    if not isinstance(entry_id, str) or not _ENTRY_ID.fullmatch(entry_id):
        raise InvalidInput(f"invalid memory id {entry_id!r}: expected 12 lowercase hex characters")
    return entry_id


MAX_REPLACES = 16  # one fact replaces a few older versions, never a corpus


def validate_replaces(replaces: Iterable[str] | None) -> list[str]:
    """The ids a save replaces: well-formed entry ids, each once, at most `MAX_REPLACES`."""
    if replaces is None:
        return []
    if isinstance(replaces, str) or not isinstance(replaces, Iterable):
        raise InvalidInput("replaces must be a list of memory ids")
    ids = list(dict.fromkeys(validate_entry_id(i) for i in replaces))
    if len(ids) > MAX_REPLACES:
        raise InvalidInput(f"a save replaces at most {MAX_REPLACES} memories, not {len(ids)}")
    return ids


def validate_cycle_id(cycle_id: str) -> str:
    """A dream run id (`dream undo RUN_ID`): checked before any workflow starts, so a
    malformed one is a clear error at once, never a retried activity."""
    if not isinstance(cycle_id, str) or not _CYCLE_ID.fullmatch(cycle_id):
        shown = (
            cycle_id
            if not isinstance(cycle_id, str) or len(cycle_id) <= 80
            else (cycle_id[:80] + "…")
        )
        raise InvalidInput(
            f"invalid dream run id {shown!r}: use 1-128 letters, digits, '_' or '-', "
            "starting with a letter or digit (as `dreamkeeper dream` printed it)"
        )
    return cycle_id


def new_entry_id() -> str:
    return secrets.token_hex(6)


def validate_category(category: str | None) -> str | None:
    """None means uncategorized. A category is never "cleaned": bad ones are refused."""
    if category is None:
        return None
    if not isinstance(category, str) or category == "":
        raise InvalidInput("invalid category '': omit it for an uncategorized entry")
    if len(category) > MAX_CATEGORY_CHARS:
        raise InvalidInput(f"invalid category: longer than {MAX_CATEGORY_CHARS} characters")
    if ".." in category or category.startswith("/") or not _CATEGORY.fullmatch(category):
        raise InvalidInput(
            f"invalid category {category!r}: use segments of letters, digits, '_' or '-' "
            "separated by single '/', not rooted, no '..'"
        )
    return category


def category_matches(category: str | None, prefix: str) -> bool:
    """The category filter of both long-term and working memory: a whole-segment,
    case-insensitive prefix (`a/b` matches `a/b` and `a/b/c`, not `a/bc`)."""
    if category is None:
        return False
    cat, pre = category.lower(), prefix.lower().rstrip("/")
    return cat == pre or cat.startswith(pre + "/")


def validate_tags(tags: Iterable[str] | None) -> list[str]:
    if tags is None:
        return []
    if isinstance(tags, str) or not isinstance(tags, Iterable) or isinstance(tags, Mapping):
        raise InvalidInput("tags must be a list of strings")
    tags = list(tags)
    if len(tags) > MAX_TAGS:
        raise InvalidInput(f"too many tags: {len(tags)} (at most {MAX_TAGS})")
    out: list[str] = []
    for tag in tags:
        if not isinstance(tag, str) or not tag.strip():
            raise InvalidInput(f"invalid tag {tag!r}: tags are non-empty strings")
        tag = tag.strip()
        if len(tag) > MAX_TAG_CHARS or _CONTROL.search(tag):
            raise InvalidInput(
                f"invalid tag {tag[:40]!r}: at most {MAX_TAG_CHARS} characters, no control characters"
            )
        require_unicode(tag, "a tag")
        if tag not in out:
            out.append(tag)
    return out


def validate_content(content: str) -> str:
    if not isinstance(content, str) or not content.strip():
        raise InvalidInput("content is empty: a memory needs some text")
    if len(content) > MAX_CONTENT_CHARS:
        raise InvalidInput(
            f"content is {len(content)} characters: the limit is {MAX_CONTENT_CHARS}; "
            "split it into focused entries"
        )
    if "\x00" in content:
        raise InvalidInput("content contains a NUL character")
    require_unicode(content, "content")
    return content


def require_unicode(text: str, what: str) -> None:
    """Text the store can write as UTF-8 (argv and JSON escapes can carry lone
    surrogates, which no file or payload can hold)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"{what} is not valid Unicode (character {exc.start})") from None


def validate_flag(value: object, name: str) -> bool:
    """A yes/no option: True or False, not a truthy string ("false" is not False)."""
    if not isinstance(value, bool):
        raise InvalidInput(f"invalid {name} {value!r}: expected true or false")
    return value


def validate_importance(importance: float) -> float:
    try:
        value = float(importance)
    except (TypeError, ValueError):
        raise InvalidInput(f"invalid importance {importance!r}: expected a number") from None
    if not 0.0 <= value <= 1.0 or value != value:
        raise InvalidInput(f"invalid importance {importance!r}: expected 0.0 to 1.0")
    return value


# How far ahead a fact may say it becomes true ("the rent goes up next month"): beyond
# it, a date is more likely a typo or a misread year than a plan.
VALID_FROM_MAX_AHEAD = timedelta(days=366)
# How far ahead of the store's clock a saved time may be: clocks of two hosts differ.
CREATED_AT_MAX_AHEAD = timedelta(minutes=5)
EARLIEST_MOMENT = datetime(1900, 1, 1, tzinfo=UTC)


def parse_moment(value: datetime | str | None, name: str) -> datetime | None:
    """An ISO 8601 date or date and time (or a datetime), in UTC: a date alone is its
    midnight UTC, a naive time is UTC. None or blank text is None."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            raise InvalidInput(
                f"invalid {name} {value[:64]!r}: expected an ISO 8601 date or time, such as "
                "2026-03-01 or 2026-03-01T09:30:00Z"
            ) from None
    else:
        raise InvalidInput(f"invalid {name}: expected an ISO 8601 date or time as text")
    try:
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except OverflowError:
        raise InvalidInput(f"invalid {name} {value!s}: out of range in UTC") from None


def check_moment(
    moment: datetime | None, name: str, *, now: datetime, ahead: timedelta
) -> datetime | None:
    """`moment` if it is no later than `ahead` past `now` and not before 1900."""
    if moment is None:
        return None
    if moment > now + ahead:
        raise InvalidInput(
            f"{name} {moment.isoformat()} is in the future (the latest accepted is "
            f"{(now + ahead).isoformat(timespec='seconds')})"
        )
    if moment < EARLIEST_MOMENT:
        raise InvalidInput(f"{name} {moment.isoformat()} is before {EARLIEST_MOMENT.year}")
    return moment


def validate_metadata(metadata: dict[str, str] | None) -> dict[str, str]:
    if not metadata:
        return {}
    if not isinstance(metadata, Mapping):
        raise InvalidInput("metadata must be a mapping of strings to strings")
    if len(metadata) > MAX_METADATA_KEYS:
        raise InvalidInput(f"too many metadata keys: {len(metadata)} (at most {MAX_METADATA_KEYS})")
    out: dict[str, str] = {}
    for key, value in metadata.items():
        if not isinstance(key, str) or not _METADATA_KEY.fullmatch(key):
            raise InvalidInput(f"invalid metadata key {key!r}")
        if not isinstance(value, str) or len(value) > MAX_METADATA_VALUE_CHARS:
            raise InvalidInput(
                f"invalid metadata value for {key!r}: a string of at most "
                f"{MAX_METADATA_VALUE_CHARS} characters"
            )
        require_unicode(value, f"metadata value {key!r}")
        out[key] = value
    return out


def cap_tags(tags: Iterable[str]) -> list[str]:
    """Tags combined from several entries as the store accepts them: the valid ones, in
    order, without repeats, at most `MAX_TAGS` (the first ones win)."""
    kept: list[str] = []
    for tag in tags:
        try:
            (tag,) = validate_tags([tag])
        except (InvalidInput, ValueError):
            continue
        if tag not in kept:
            kept.append(tag)
            if len(kept) == MAX_TAGS:
                break
    return kept


def cap_metadata(metadata: Mapping[str, str], *, first: Iterable[str] = ()) -> dict[str, str]:
    """Metadata combined from several entries as the store accepts it: at most
    `MAX_METADATA_KEYS` keys — those named in `first` (when present), then the others in
    order; invalid keys and values are left out."""
    order = [k for k in first if k in metadata]
    order += [k for k in metadata if k not in order]
    out: dict[str, str] = {}
    for key in order:
        if len(out) == MAX_METADATA_KEYS:
            break
        try:
            out.update(validate_metadata({key: metadata[key]}))
        except InvalidInput:
            continue
    return {k: out[k] for k in metadata if k in out}


# Working memory's layout, shared by its store and the agent side's tools and sessions:
# tool results parked out of the context window live under this root...
STASH_ROOT = "stash"
# ...and a working-memory search shows this much of each value.
PREVIEW_CHARS = 120

# A session id's segment names a conversation file and the second segment of a working
# memory namespace: checked here, so a session can be named without opening a store.
_SESSION_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")
_SESSION_FILE_SUFFIXES = (".json", ".jsonl")  # a directory so named would shadow a file


def validate_session_segment(segment: str) -> str:
    """One path segment: 1-128 of letters, digits, `_ - .`, starting with a letter or
    digit (so never `.`, `..` or hidden), no `..` inside, not ending in .json/.jsonl."""
    if (
        not isinstance(segment, str)
        or not _SESSION_SEGMENT.fullmatch(segment)
        or ".." in segment
        or segment.lower().endswith(_SESSION_FILE_SUFFIXES)
    ):
        raise InvalidInput(
            f"invalid session id segment {segment!r}: 1-128 letters, digits, '_', '-' or '.', "
            "starting with a letter or digit, no '..', not ending in .json or .jsonl"
        )
    return segment
