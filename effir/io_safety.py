"""Writing over the user's files without ever destroying one by surprise.

Two commands write where the user points them, and each has its contract
(docs/architecture.md, "Commands that touch user files"):

- ``effir fmt -i FILE`` rewrites a program in place. ``read_for_rewrite``
  and ``rewrite`` together: a symlink's target is formatted (the link stays
  a link); only a regular file is rewritten (a FIFO or a device is refused
  before it is read); the file's mode, owner and hard links are kept (a
  file with several links is rewritten in place, through its own inode,
  after the new text is complete; any other file is replaced by a complete
  new file renamed over it, so readers see the old or the new text, never
  half of it); a read-only file is refused, not rewritten; and just before
  writing, the file must still be what was read (same inode, size, mtime
  and bytes), else nothing is written.
- ``effir compile FILE -o DIR`` (``CompiledModule.export``) writes an
  artifact directory. ``staging_directory`` and ``install_directory``
  together: the artifact is built in a new temporary directory beside
  ``DIR`` and renamed into place when complete; what ``DIR`` held is
  replaced only when it is an effir artifact (it holds the artifact's
  manifest) or an empty directory. A file, a non-empty directory of other
  things, ``.``, ``..`` or a directory above the current one are refused.

- ``effir import MODEL -o FILE`` writes a program. ``write_program``: a
  new file, or one that already holds an effir program (it starts with
  the text format's ``#[version`` header), is replaced by a complete new
  file renamed over it; anything else (another file, a directory, the
  model being imported) is refused before anything is written.

Every refusal and every operating-system failure (a read-only directory, a
file deleted meanwhile) is an ``OutputError``: one message, exit status 1.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .ir.diagnostics import Error


class OutputError(Error):
    """A file or directory effir was asked to write and did not, and why."""

    kind = "error"


def _reason(err: OSError) -> str:
    return err.strerror or str(err) or type(err).__name__


# ------------------------------------------------------------- fmt -i
@dataclass(frozen=True)
class ReadFile:
    """A file read to be rewritten: what was asked, where it really is, its
    bytes and its status when read (to see whether it changed since)."""

    path: str
    real: str
    data: bytes
    status: os.stat_result


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def read_for_rewrite(path: str) -> ReadFile:
    """The bytes of ``path`` (a symlink's target), refusing what cannot be
    rewritten in place before reading it (a FIFO would block the read)."""
    real = os.path.realpath(path)
    try:
        status = os.stat(real)
        if not stat.S_ISREG(status.st_mode):
            raise OutputError(f"{path}: {_kind(status.st_mode)}: only regular files are rewritten")
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        target = f" (a symlink to {real}, which does not exist)" if os.path.islink(path) else ""
        raise OutputError(f"{path}: no such file{target}") from None
    except OSError as err:
        raise OutputError(f"{path}: cannot read: {_reason(err)}") from None
    with os.fdopen(fd, "rb") as handle:
        status = os.fstat(handle.fileno())  # the file read, whatever the name became
        if not stat.S_ISREG(status.st_mode):
            raise OutputError(f"{path}: {_kind(status.st_mode)}: only regular files are rewritten")
        data = handle.read()
    return ReadFile(path, real, data, status)


def _same(status: os.stat_result, now: os.stat_result) -> bool:
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns) == (
        now.st_dev,
        now.st_ino,
        now.st_size,
        now.st_mtime_ns,
    )


def _check_unchanged(file: ReadFile) -> os.stat_result:
    """The file's status now, if it is still what was read; else OutputError."""
    try:
        now = os.stat(file.real)
        with open(file.real, "rb") as handle:
            unchanged = _same(file.status, now) and handle.read() == file.data
    except FileNotFoundError:
        raise OutputError(
            f"{file.path}: deleted while it was being formatted; not written"
        ) from None
    except OSError as err:
        raise OutputError(f"{file.path}: cannot read it again: {_reason(err)}") from None
    if not unchanged:
        raise OutputError(
            f"{file.path}: changed while it was being formatted; not rewritten (run again)"
        )
    return now


def rewrite(file: ReadFile, text: str) -> None:
    """Replace ``file``'s contents with ``text``, keeping the file (its
    mode, owner, links); refuse a read-only file or one that changed."""
    data = text.encode("utf-8")
    now = _check_unchanged(file)
    mode = stat.S_IMODE(now.st_mode)
    if not mode & 0o222 or not os.access(file.real, os.W_OK):
        raise OutputError(
            f"{file.path}: read-only (mode {mode:04o}); not rewritten: make it writable to "
            "format it in place, or print the canonical text without -i"
        )
    if now.st_nlink > 1:
        _rewrite_through_inode(file, data)
    else:
        _replace_by_rename(file, data, mode)


def _rewrite_through_inode(file: ReadFile, data: bytes) -> None:
    """Write ``data`` into the file's own inode, so that every hard link
    sees it (a rename would detach this name from the others)."""
    try:
        fd = os.open(file.real, os.O_WRONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "wb") as handle:
            if not _same(file.status, os.fstat(handle.fileno())):
                raise OutputError(
                    f"{file.path}: changed while it was being formatted; not rewritten"
                )
            handle.write(data)
            handle.truncate(len(data))
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as err:
        raise OutputError(f"{file.path}: cannot write: {_reason(err)}") from None


def _replace_by_rename(file: ReadFile, data: bytes, mode: int) -> None:
    """A complete new file, renamed over the old one (atomic for readers)."""
    directory = os.path.dirname(file.real)
    try:
        fd, temp = tempfile.mkstemp(prefix=".effir-fmt-", dir=directory)
    except OSError as err:
        raise OutputError(
            f"{file.path}: cannot write a new file in {directory}: {_reason(err)}"
        ) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, mode)
        if os.geteuid() == 0:  # only root may give the file its owner back
            os.chown(temp, file.status.st_uid, file.status.st_gid)
        _check_unchanged(file)  # the last moment before the rename
        os.replace(temp, file.real)
    except OSError as err:
        _remove(temp)
        raise OutputError(f"{file.path}: cannot write: {_reason(err)}") from None
    except BaseException:
        _remove(temp)
        raise


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


# --------------------------------------------------------- compile -o
def output_directory(path: str | os.PathLike[str], manifest: str) -> Path:
    """The directory an artifact may be written to as ``path``, or
    OutputError: see the module's docstring for what is refused."""
    given = os.fspath(path)
    target = Path(given)
    if target.is_symlink():
        target = Path(os.path.realpath(target))
    name = Path(os.path.normpath(given)).name
    absolute = Path(os.path.abspath(target))
    here = Path.cwd()
    if name in ("", ".", "..") or absolute == here or absolute in here.parents:
        raise OutputError(
            f"-o {given}: an artifact is a directory of its own, written beside and renamed "
            "into place; name a new directory (such as model.effir-artifact) or an existing "
            "artifact"
        )
    _check_replaceable(target, given, manifest)
    return target


def _check_replaceable(target: Path, given: str, manifest: str) -> None:
    try:
        status = os.lstat(target)
    except FileNotFoundError:
        return
    except OSError as err:
        raise OutputError(f"{given}: {_reason(err)}") from None
    if not stat.S_ISDIR(status.st_mode):
        kind = "a file" if stat.S_ISREG(status.st_mode) else _kind(status.st_mode)
        raise OutputError(
            f"{given}: exists and is {kind}; an artifact is a directory: remove it or "
            "choose another name"
        )
    try:
        with os.scandir(target) as entries:  # closed at once, not when collected
            empty = not any(entries)
    except OSError as err:
        raise OutputError(f"{given}: cannot read the directory: {_reason(err)}") from None
    if not empty and not (target / manifest).is_file():
        raise OutputError(
            f"{given}: a directory that is not an effir artifact (it has no {manifest}); "
            "refusing to replace it: remove it or choose another name"
        )


def staging_directory(target: Path, manifest: str) -> Path:
    """A new, private directory beside ``target`` to build the artifact in."""
    target = output_directory(target, manifest)
    parent = Path(os.path.abspath(target)).parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".effir-export-", dir=parent))
        staging.chmod(0o755)
    except OSError as err:
        raise OutputError(
            f"{target}: cannot create the artifact in {parent}: {_reason(err)}"
        ) from None
    return staging


def install_directory(staging: Path, target: Path, manifest: str) -> Path:
    """Rename the complete ``staging`` to ``target``, replacing an artifact
    (or an empty directory) that is there; ``staging`` is removed on failure."""
    try:
        target = output_directory(target, manifest)  # again: it may have changed meanwhile
        try:
            os.rename(staging, target)  # nothing there, or an empty directory
            return target
        except OSError as err:
            if err.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        # An artifact is there: move it aside under a fresh name, put the
        # new one in its place, then delete the old one.
        aside = Path(tempfile.mkdtemp(prefix=".effir-old-", dir=staging.parent))
        try:
            os.rename(target, aside)
        except BaseException:
            os.rmdir(aside)
            raise
        try:
            os.rename(staging, target)
        except BaseException:
            os.rename(aside, target)
            raise
        shutil.rmtree(aside, ignore_errors=True)
        return target
    except OSError as err:
        shutil.rmtree(staging, ignore_errors=True)
        raise OutputError(f"{target}: cannot write the artifact: {_reason(err)}") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


# -------------------------------------------------------------- import -o
PROGRAM_HEADER = b"#[version"


def write_program(path: str, text: str, source: str | None = None) -> None:
    """Write ``text`` (an effir program) to ``path``: a new file, or over
    an effir program (renamed into place when complete); anything else,
    and the file ``source`` the program was made from, is refused."""
    target = os.path.realpath(path)
    if source is not None and os.path.exists(source) and os.path.realpath(source) == target:
        raise OutputError(f"-o {path}: that is the model being imported; choose another name")
    try:
        status = os.stat(target)
    except FileNotFoundError:
        status = None
    except OSError as err:
        raise OutputError(f"{path}: {_reason(err)}") from None
    if status is not None:
        if not stat.S_ISREG(status.st_mode):
            raise OutputError(f"{path}: {_kind(status.st_mode)}: refusing to replace it")
        try:
            with open(target, "rb") as handle:
                head = handle.read(len(PROGRAM_HEADER))
        except OSError as err:
            raise OutputError(f"{path}: cannot read it: {_reason(err)}") from None
        if head != PROGRAM_HEADER:
            raise OutputError(
                f"{path}: exists and is not an effir program; refusing to replace it: remove "
                "it or choose another name"
            )
    directory = os.path.dirname(target) or "."
    try:
        fd, temp = tempfile.mkstemp(prefix=".effir-import-", dir=directory)
    except OSError as err:
        raise OutputError(f"{path}: cannot write in {directory}: {_reason(err)}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(text.encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, stat.S_IMODE(status.st_mode) if status is not None else 0o644)
        os.replace(temp, target)
    except OSError as err:
        _remove(temp)
        raise OutputError(f"{path}: cannot write: {_reason(err)}") from None
    except BaseException:
        _remove(temp)
        raise
