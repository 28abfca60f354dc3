"""Crash-safe, symlink-proof file primitives under one agent's directory.

`AgentFiles` is the only way the stores touch the disk. Paths are given as tuples of
components, each checked against one strict rule (`fullmatch`, no `.` or `..`), and
resolved by walking directory file descriptors from the data directory down with
`O_NOFOLLOW`: a symlinked directory, entry file, journal or lock below
`{data}/agents/{agent}` is refused (`SymlinkRefused`), never followed — so nothing is
ever read from or written to outside the agent's directory, whatever is planted there.
The data directory itself may be a symlink: that is the operator's choice.

Writes are atomic: a temp file in the same directory, fsync, rename over the target,
fsync the directory. A crash leaves the old file or the new one, never a torn one; a
leftover temp file starts with `.` and is ignored by every reader.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import mmap
import os
import stat
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from dreamkeeper.stores.contract.names import UnsafePath, check_component
from dreamkeeper.stores.safe_json import NotRegularFile

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

Parts = Sequence[str]


def _find_syncfs() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        syncfs: Callable[[int], int] = libc.syncfs
        return syncfs
    except (OSError, AttributeError):
        return None


_SYNCFS = _find_syncfs()


class SymlinkRefused(OSError):
    """A symlink where Dreamkeeper expects a plain file or directory."""


def _refuse_links(exc: OSError, where: str) -> OSError:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        return SymlinkRefused(exc.errno, f"{where} is a symlink or not a directory: refused")
    return exc


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _replace_at(dfd: int, name: str, data: bytes, *, durable: bool) -> None:
    tmp = f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
    fd = os.open(
        tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dfd
    )
    try:
        _write_all(fd, data)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    try:
        # rename() replaces a symlink named `name` itself; it never follows it.
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dfd)
        raise
    if durable:
        os.fsync(dfd)


class AgentFiles:
    def __init__(self, data_dir: Path | str, agent_id: str) -> None:
        self.data_dir = Path(data_dir)
        self.base = ("agents", check_component(agent_id))
        self.root = self.data_dir.joinpath(*self.base)

    def path(self, *parts: str) -> Path:
        """For display and for readers that only list; never opened for writing."""
        return self.root.joinpath(*parts)

    @contextlib.contextmanager
    def directory(self, parts: Parts, *, create: bool) -> Iterator[int | None]:
        """A descriptor of `root/parts...`, or None when it does not exist (create=False)."""
        if create:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.data_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            yield None
            return
        try:
            for part in (*self.base, *parts):
                check_component(part)
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        os.close(fd)
                        fd = -1
                        break
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o755, dir_fd=fd)
                    try:
                        child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                    except OSError as exc:
                        raise _refuse_links(exc, part) from None
                except OSError as exc:
                    raise _refuse_links(exc, part) from None
                os.close(fd)
                fd = child
            yield None if fd < 0 else fd
        finally:
            if fd >= 0:
                os.close(fd)

    def write(self, parts: Parts, data: bytes, *, durable: bool = True) -> None:
        """Atomically replace `parts` with `data`. `durable=False` skips the fsyncs, for a
        bulk writer that syncs the whole batch at once (`sync_filesystem`)."""
        self.write_many([(parts, data)], durable=durable)

    def write_many(self, files: Sequence[tuple[Parts, bytes]], *, durable: bool = True) -> None:
        """`write` for many files, opening each directory once (in the order given)."""
        by_directory: dict[tuple[str, ...], list[tuple[str, bytes]]] = {}
        for parts, data in files:
            *folders, name = parts
            by_directory.setdefault(tuple(folders), []).append((check_component(name), data))
        for directory, named in by_directory.items():
            with self.directory(directory, create=True) as dfd:
                assert dfd is not None
                for name, data in named:
                    _replace_at(dfd, name, data, durable=durable)

    def sync_filesystem(self) -> None:
        """Make every write under the agent's directory durable at once (a bulk writer's
        one sync instead of two fsyncs per file): syncfs(2) where there is one."""
        with self.directory((), create=True) as dfd:
            assert dfd is not None
            if _SYNCFS is not None and _SYNCFS(dfd) == 0:
                return
            os.sync()

    def append(self, parts: Parts, data: bytes, *, ensure_newline_before: bool = False) -> int:
        """Append with one write and fsync; returns the file's new size. With
        `ensure_newline_before`, a torn last line (a crash mid-append: no newline) is
        terminated first, so the new line never glues onto it."""
        *dirs, name = parts
        check_component(name)
        with self.directory(dirs, create=True) as dfd:
            assert dfd is not None
            try:
                fd = os.open(
                    name,
                    os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC,
                    0o644,
                    dir_fd=dfd,
                )
            except OSError as exc:
                raise _refuse_links(exc, name) from None
            try:
                if ensure_newline_before:
                    size = os.fstat(fd).st_size
                    if size and os.pread(fd, 1, size - 1) != b"\n":
                        data = b"\n" + data
                _write_all(fd, data)
                os.fsync(fd)
                return os.fstat(fd).st_size
            finally:
                os.close(fd)

    def read(self, parts: Parts, max_bytes: int | None = None) -> bytes:
        """The file's bytes — with `max_bytes`, at most that many plus one, so the caller
        sees it is larger. FileNotFoundError when absent; SymlinkRefused for a link;
        NotRegularFile for a FIFO, device or directory (never opened to block on)."""
        *dirs, name = parts
        check_component(name)
        with self.directory(dirs, create=False) as dfd:
            if dfd is None:
                raise FileNotFoundError(self.path(*parts))
            with os.fdopen(self._open_regular(dfd, name), "rb") as handle:
                return handle.read() if max_bytes is None else handle.read(max_bytes + 1)

    def read_from(self, parts: Parts, offset: int, limit: int | None = None) -> bytes:
        *dirs, name = parts
        with self.directory(dirs, create=False) as dfd:
            if dfd is None:
                return b""
            try:
                fd = self._open_regular(dfd, name)
            except FileNotFoundError:
                return b""
            with os.fdopen(fd, "rb") as handle:
                handle.seek(offset)
                return handle.read() if limit is None else handle.read(limit)

    def open_read(self, parts: Parts) -> int:
        """A read-only descriptor of the file (the caller closes it), with the same
        refusals as `read`: FileNotFoundError when absent."""
        *dirs, name = parts
        check_component(name)
        with self.directory(dirs, create=False) as dfd:
            if dfd is None:
                raise FileNotFoundError(self.path(*parts))
            return self._open_regular(dfd, name)

    def map(self, parts: Parts, *, private: bool = False) -> mmap.mmap:
        """The file mapped read-only — or `private`: copy-on-write, writes never reach
        the file — with the same refusals as `read`."""
        *dirs, name = parts
        check_component(name)
        with self.directory(dirs, create=False) as dfd:
            if dfd is None:
                raise FileNotFoundError(self.path(*parts))
            fd = self._open_regular(dfd, name)
            try:
                access = mmap.ACCESS_COPY if private else mmap.ACCESS_READ
                return mmap.mmap(fd, 0, access=access)
            except ValueError as exc:
                raise OSError(f"cannot map {name}: {exc}") from None
            finally:
                os.close(fd)

    @staticmethod
    def _open_regular(dfd: int, name: str) -> int:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(name, flags, dir_fd=dfd)
        except OSError as exc:
            raise _refuse_links(exc, name) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise NotRegularFile(f"{name} is not a plain file: refused")
        return fd

    def size(self, parts: Parts) -> int:
        try:
            st = os.lstat(self.path(*parts))
        except FileNotFoundError:
            return 0
        return st.st_size

    def unlink(self, parts: Parts) -> bool:
        """Remove a file (a symlink is removed itself, not its target); False if absent."""
        *dirs, name = parts
        check_component(name)
        with self.directory(dirs, create=False) as dfd:
            if dfd is None:
                return False
            try:
                os.unlink(name, dir_fd=dfd)
            except FileNotFoundError:
                return False
            return True

    def rename(self, src: Parts, dst: Parts) -> None:
        """Move a file between directories of the agent (both resolved without links)."""
        with (
            self.directory(src[:-1], create=False) as sfd,
            self.directory(dst[:-1], create=True) as dfd,
        ):
            if sfd is None:
                raise FileNotFoundError(self.path(*src))
            assert dfd is not None  # created
            os.replace(
                check_component(src[-1]), check_component(dst[-1]), src_dir_fd=sfd, dst_dir_fd=dfd
            )
            os.fsync(dfd)

    def lock(self, parts: Parts) -> InterProcessLock:
        *dirs, name = parts
        check_component(name)

        def opener(flags: int) -> int:
            with self.directory(dirs, create=bool(flags & os.O_CREAT)) as dfd:
                if dfd is None:
                    raise FileNotFoundError(self.path(*parts))
                try:
                    return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dfd)
                except OSError as exc:
                    raise _refuse_links(exc, name) from None

        return InterProcessLock(opener, self.path(*parts))


class InterProcessLock:
    """One holder at a time across processes (flock) and threads (RLock), re-entrant.

    flock locks belong to an open file description, so two instances in one process
    exclude each other just as two processes do. Readers never take it; they may ask
    `is_free()` (a non-blocking shared attempt) to learn that no write is in flight.
    """

    def __init__(self, opener: Callable[[int], int], where: Path) -> None:
        self._opener = opener  # flags -> an fd of the lock file (O_NOFOLLOW)
        self.where = where
        self._thread_lock = threading.RLock()
        self._depth = 0
        self._owner: int | None = None
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Held by the calling thread (another thread's hold is another writer)."""
        return self._depth > 0 and self._owner == threading.get_ident()

    @contextlib.contextmanager
    def hold(self) -> Iterator[bool]:
        """Yields True for the outermost hold (the moment to reconcile), False inside."""
        with self._thread_lock:
            outermost = self._depth == 0
            if outermost:
                fd = self._opener(os.O_RDWR | os.O_CREAT)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                except BaseException:
                    os.close(fd)
                    raise
                self._fd = fd
                self._owner = threading.get_ident()
            self._depth += 1
            try:
                yield outermost
            finally:
                self._depth -= 1
                if self._depth == 0 and self._fd is not None:
                    self._owner = None
                    fcntl.flock(self._fd, fcntl.LOCK_UN)
                    os.close(self._fd)
                    self._fd = None

    @contextlib.contextmanager
    def hold_if_free(self) -> Iterator[bool]:
        """The lock without waiting for it: yields True when it was free and is now held
        (an outermost hold), False when another thread or process holds it. OSError when
        the lock file cannot be opened for writing (a read-only store)."""
        if not self._thread_lock.acquire(blocking=False):
            yield False
            return
        try:
            if self._depth > 0:  # this thread's own hold: not a free lock
                yield False
                return
            fd = self._opener(os.O_RDWR | os.O_CREAT)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                yield False
                return
            except BaseException:
                os.close(fd)
                raise
            self._fd, self._owner, self._depth = fd, threading.get_ident(), 1
            try:
                yield True
            finally:
                self._depth, self._owner, self._fd = 0, None, None
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
        finally:
            self._thread_lock.release()

    def is_free(self) -> bool:
        """True when no process holds the lock at this instant (or it never existed)."""
        if self._depth > 0:
            return False
        try:
            fd = self._opener(os.O_RDONLY)
        except FileNotFoundError:
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        finally:
            os.close(fd)  # closing releases the shared lock, if it was taken
        return True


# -- plain paths under an agent's directory --------------------------------------------
#
# The working, conversation and consolidation stores address files by path. With
# `within` (the agent's directory) every directory from it down to the file is checked
# to be a real directory — missing ones are created one at a time — so a symlink planted
# where one of them should be is refused (`SymlinkRefused`), never followed out of the
# agent's directory; the file itself is never followed either.


def real_directory(within: Path, directory: Path, *, create: bool = True) -> bool:
    """True when `directory` (at or under `within`) is real directories all the way
    from `within`; False when part of it is missing and `create` is False."""
    try:
        parts = Path(directory).relative_to(within).parts
    except ValueError:
        raise UnsafePath(f"{directory} is not under {within}") from None
    holder = Path(within).parent  # {data}/agents: the data directory above may be a link
    if not holder.exists() and create:
        holder.mkdir(parents=True, exist_ok=True)
    if holder.is_symlink():
        raise SymlinkRefused(errno.ELOOP, f"{holder} is a symlink: refused")
    current = Path(within)
    for part in ("", *parts):
        if part:
            check_component(part)
            current = current / part
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            if not create:
                return False
            with contextlib.suppress(FileExistsError):
                os.mkdir(current, 0o755)
            mode = os.lstat(current).st_mode
        if stat.S_ISLNK(mode):
            raise SymlinkRefused(errno.ELOOP, f"{current} is a symlink: refused")
        if not stat.S_ISDIR(mode):
            raise SymlinkRefused(errno.ENOTDIR, f"{current} is not a directory: refused")
    return True


def _parent(path: Path, within: Path | None) -> None:
    if within is None:
        path.parent.mkdir(parents=True, exist_ok=True)
    else:
        real_directory(within, path.parent)


def unlink_within(path: Path, within: Path) -> bool:
    """Remove a file (a link is removed itself) if its directories are real; False when
    it is absent."""
    if not real_directory(within, path.parent, create=False):
        return False
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def replace_within(src: Path, dst: Path, within: Path) -> None:
    """os.replace between directories under `within`, neither reached through a link."""
    real_directory(within, src.parent, create=False)
    real_directory(within, dst.parent)
    os.replace(src, dst)


def path_lock(path: Path, *, within: Path | None = None) -> InterProcessLock:
    """A lock file at a plain path (its final component is never followed)."""

    def opener(flags: int) -> int:
        if flags & os.O_CREAT:
            _parent(path, within)
        elif within is not None and not real_directory(within, path.parent, create=False):
            raise FileNotFoundError(path)
        try:
            return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise _refuse_links(exc, str(path)) from None

    return InterProcessLock(opener, path)


def append_line(path: Path, line: str, *, within: Path | None = None) -> int:
    """Append one newline-terminated line with a single write (terminating a torn last
    line first); returns the new file size."""
    data = (line.rstrip("\n") + "\n").encode("utf-8")
    _parent(path, within)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data
        _write_all(fd, data)
        os.fsync(fd)
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def atomic_write_text(path: Path, text: str, *, within: Path | None = None) -> None:
    """Atomic replace of a file at a plain path (the temp file is never a followed link)."""
    atomic_write_bytes(path, text.encode("utf-8"), within=within)


def atomic_write_bytes(path: Path, data: bytes, *, within: Path | None = None) -> None:
    _parent(path, within)
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _replace_at(dfd, path.name, data, durable=True)
    finally:
        os.close(dfd)
