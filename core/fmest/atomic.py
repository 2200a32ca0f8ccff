"""Writes a kill cannot leave half done: a file or a directory is either the old one or the new
one, never a mixture.

* :func:`write_atomic` / :func:`write_text_atomic`: the new content goes to a temporary file in
  the same directory (same file system, so the rename is atomic), is flushed and fsynced, then
  ``os.replace`` puts it in place.
* :func:`replace_dir_atomic`: the new directory is built beside the target, then swapped in
  (old renamed aside, new renamed in, old removed).
* :func:`check_writable_dir`: fail at the door, before minutes of work, when an output place
  cannot be written.

With ``field=`` (the flag or field the path came from) an ``OSError`` becomes an
:class:`fmest.errors.InputError` naming that field, the path and the OS's reason
(``strerror``), which the CLI prints as one line with exit code 2. Without ``field`` the
``OSError`` propagates unchanged (a cache, for instance, treats a failed write as no write).
Temporary names start with ``.`` and the target's name (``.bundle.new-x1y2``), so a leftover of a
process killed outright (SIGKILL, power loss) is recognisable and safe to delete.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator, Optional, TypeVar

from fmest.errors import InputError

T = TypeVar("T")


def os_reason(exc: OSError) -> str:
    """The OS's words for ``exc`` (``Permission denied``), without Python's decoration."""
    return exc.strerror or str(exc) or type(exc).__name__


@contextlib.contextmanager
def _as_input_error(field: Optional[str], path: os.PathLike | str,
                    value: object = None) -> Iterator[None]:
    """OSError -> :class:`InputError` naming ``field`` (unchanged when ``field`` is None)."""
    try:
        yield
    except OSError as exc:
        if field is None:
            raise
        raise InputError(field, f"cannot write {os.fspath(path)}: {os_reason(exc)}",
                         value=value) from None


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


#: the process's umask, read once (reading it means setting it, which is not thread-safe)
_UMASK = _umask()


def _mode_of(target: Path, default: int) -> int:
    """The permission bits a replacement of ``target`` gets: the old one's, else ``default``
    less the umask (temporary files are created 0600, directories 0700)."""
    try:
        return target.stat().st_mode & 0o7777
    except OSError:
        return default & ~_UMASK


def _not_a_directory(path: Path) -> NotADirectoryError:
    return NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))


def _make_dirs(path: Path) -> None:
    """``mkdir -p path``, with ENOTDIR (not EEXIST) when a file stands in the way."""
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                raise _not_a_directory(p)
            break
    path.mkdir(parents=True, exist_ok=True)


def _fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path: os.PathLike | str, write: Callable[[str], None], *,
                 field: Optional[str] = None) -> None:
    """Replace the file ``path`` with what ``write(temp_path)`` writes to ``temp_path``.

    ``write`` gets the name of a fresh temporary file beside ``path`` (for writers that take a
    file name, e.g. ``pyarrow.parquet.write_table``); the file is fsynced and renamed onto
    ``path`` with ``os.replace``. If ``write`` raises (or the process is interrupted), ``path``
    is untouched and the temporary file is removed. The parent directory is created when
    missing. ``field``: see the module doc.
    """
    target = Path(os.path.realpath(path))  # through a symlink: the file it names is replaced
    tmp: Optional[str] = None
    with _as_input_error(field, target, value=os.fspath(path)):
        _make_dirs(target.parent)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        os.close(fd)
        os.chmod(tmp, _mode_of(target, 0o666))
        try:
            write(tmp)
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, target)
            tmp = None
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
        _fsync_dir(target.parent)


def write_text_atomic(path: os.PathLike | str, text: str, *, field: Optional[str] = None,
                      encoding: str = "utf-8") -> None:
    """Replace the file ``path`` with ``text``: temporary file in the same directory, fsync,
    ``os.replace`` (:func:`write_atomic`). Readers see the old content or the new, whole."""

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding=encoding, newline="") as fh:
            fh.write(text)

    write_atomic(path, write, field=field)


def _fsync_tree(root: Path) -> None:
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(dirpath))


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


def replace_dir_atomic(target: os.PathLike | str, build: Callable[[Path], T], *,
                       field: Optional[str] = None) -> T:
    """Build a new directory with ``build(new_dir)`` and swap it in for ``target``; returns
    what ``build`` returns.

    ``new_dir`` is an empty temporary directory beside ``target`` (``.NAME.new-*``, same file
    system). When ``build`` returns, its files are fsynced, the old ``target`` (if any) is
    renamed aside (``.NAME.old-*``), ``new_dir`` is renamed to ``target`` and the old one is
    removed. If ``build`` raises, or a rename fails, ``target`` is left as it was and no
    temporary directory remains. A kill during ``build`` leaves ``target`` intact (and a
    ``.NAME.new-*`` directory to delete); only a kill between the two renames, a window of
    two system calls, leaves the old directory under its ``.NAME.old-*`` name.

    ``target`` must be a directory or absent: an existing file is refused. The parent is
    created when missing. ``field``: see the module doc (an ``OSError`` from ``build``, such
    as a full disk, is reported under ``field`` too).
    """
    target = Path(os.path.realpath(target))  # through a symlink: the directory it names
    parent = target.parent
    with _as_input_error(field, target, value=os.fspath(target)):
        if target.exists() and not target.is_dir():
            raise _not_a_directory(target)
        _make_dirs(parent)
        new = Path(tempfile.mkdtemp(prefix=f".{target.name}.new-", dir=parent))
        os.chmod(new, _mode_of(target, 0o777))
    try:
        with _as_input_error(field, target, value=os.fspath(target)):
            result = build(new)
            _fsync_tree(new)
            _swap(new, target)
    except BaseException:
        _remove(new)
        raise
    return result


def _swap(new: Path, target: Path) -> None:
    """Rename ``new`` onto ``target``, the old ``target`` aside first and removed last."""
    parent = target.parent
    if not target.exists():
        os.rename(new, target)
        _fsync_dir(parent)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=parent))
    os.rmdir(old)  # a unique name for the rename below
    os.rename(target, old)
    try:
        os.rename(new, target)
    except BaseException:
        os.rename(old, target)
        raise
    _fsync_dir(parent)
    _remove(old)


def check_writable_dir(directory: os.PathLike | str, *, field: str,
                       value: object = None) -> Path:
    """Prove that a file can be created in ``directory`` (or, when it is missing, that it and
    its missing parents can be made) without leaving anything behind; an :class:`InputError`
    naming ``field`` with the OS's reason if not. Commands call this before their work, so that
    a bad output flag fails in a second, not after training. Creating a file tells the truth
    where ``os.access`` does not (root, read-only mounts, ACLs)."""
    path = Path(os.path.abspath(os.fspath(directory)))
    made: list[Path] = []
    with _as_input_error(field, path, value=os.fspath(directory) if value is None else value):
        if path.exists() and not path.is_dir():
            raise _not_a_directory(path)
        missing = [p for p in (path, *path.parents) if not p.exists()]
        try:
            for p in reversed(missing):
                p.mkdir()
                made.append(p)
            fd, probe = tempfile.mkstemp(prefix=".fmest-write-test-", dir=path)
            os.close(fd)
            os.unlink(probe)
        finally:
            for p in reversed(made):  # the writer makes them again; a check leaves no trace
                with contextlib.suppress(OSError):
                    p.rmdir()
    return path
