"""An agent's documents as files (`stores.contract.documents.AgentDocuments`): each
document is the file of that name under the agent's directory, the files Dreamkeeper
always wrote, so an existing data directory reads the same."""

from __future__ import annotations

import contextlib
import os
import stat
from datetime import UTC, datetime

from dreamkeeper.stores.contract.documents import check_name, check_prefix
from dreamkeeper.stores.files.agent_files import AgentFiles


class FileDocuments:
    """Documents as files under the agent's directory (`AgentFiles`: no link below the
    agent's directory is ever followed, writes are atomic)."""

    def __init__(self, files: AgentFiles) -> None:
        self.files = files

    def read(self, name: str, *, max_bytes: int | None = None) -> bytes | None:
        try:
            return self.files.read(check_name(name), max_bytes)
        except FileNotFoundError:
            return None

    def write(self, name: str, data: bytes) -> None:
        self.files.write(check_name(name), data)

    def append(self, name: str, data: bytes) -> None:
        self.files.append(check_name(name), data, ensure_newline_before=True)

    def names(self, prefix: str) -> list[str]:
        folder, start = check_prefix(prefix)
        with self.files.directory(folder, create=False) as dfd:
            if dfd is None:
                return []
            found = []
            for name in os.listdir(dfd):
                if name.startswith(".") or not name.startswith(start):
                    continue
                with contextlib.suppress(OSError):
                    if stat.S_ISREG(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode):
                        found.append("/".join((*folder, name)))
        return sorted(found)

    def delete(self, name: str) -> bool:
        return self.files.unlink(check_name(name))

    def rename(self, name: str, to: str) -> bool:
        try:
            self.files.rename(check_name(name), check_name(to))
        except FileNotFoundError:
            return False
        return True

    def written(self, name: str) -> datetime | None:
        *folder, last = check_name(name)
        with self.files.directory(folder, create=False) as dfd:
            if dfd is None:
                return None
            try:
                st = os.stat(last, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                return None
        return datetime.fromtimestamp(st.st_mtime, UTC)

    def location(self, name: str) -> str:
        return str(self.files.path(*check_name(name)))
