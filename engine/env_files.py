"""The files of a store: paths, modes, locks, the data-file check, LMDB error translation."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import struct
import sys
from typing import Any, Final, Literal, TypeAlias

import lmdb
from deltalog.engine.errors import (
    CorruptRecordError,
    DeltaLogError,
    InvalidInputError,
    NotAStoreError,
    StoreFullError,
    StoreOpenError,
)

_UNSUPPORTED_FS: Final = frozenset(
    {"nfs", "nfs4", "cifs", "smb", "smb2", "smbfs", "9p", "fuse.sshfs", "afs"}
)
# Free bytes under which a failed write is blamed on a full disk (see _out_of_space).
_LOW_SPACE: Final = 1024**2


def translate_error(exc: BaseException, path: str) -> BaseException:
    if isinstance(exc, DeltaLogError):
        return exc
    if isinstance(exc, lmdb.MapFullError):
        return StoreFullError(f"store {path!r} is full; raise max_map_size, prune or compact")
    if isinstance(exc, (lmdb.Error, OSError)) and _out_of_space(exc, path):
        return StoreFullError(
            f"the disk under {path!r} is full (or the data file hit the process's file size "
            "limit); nothing of this write was stored. Free space, then retry"
        )
    if isinstance(exc, (lmdb.CorruptedError, lmdb.PageNotFoundError, lmdb.InvalidError)):
        return CorruptRecordError(
            f"LMDB reports a damaged store at {path!r} ({type(exc).__name__}: {exc}); restore "
            "from a backup"
        )
    if isinstance(exc, lmdb.Error):
        return DeltaLogError(f"LMDB error on {path!r}: {type(exc).__name__}: {exc}")
    return exc


def _out_of_space(exc: BaseException, path: str) -> bool:
    """True when a failed write means the disk (or the file size limit) is full.

    LMDB reports a short write -- what a full disk or ``ulimit -f`` gives it in
    the middle of a commit -- as EIO, not ENOSPC, so an I/O error counts as
    "full" when the disk has under ``_LOW_SPACE`` bytes left or the data file
    sits at the RLIMIT_FSIZE limit.
    """
    code = getattr(exc, "errno", None)
    if code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) or "No space left" in str(exc):
        return True
    if code != errno.EIO and "Input/output error" not in str(exc):
        return False
    try:
        if shutil.disk_usage(path).free < _LOW_SPACE:
            return True
        size = os.path.getsize(os.path.join(path, "data.mdb"))
    except OSError:
        return False
    try:
        import resource
    except ImportError:  # not on this platform
        return False
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return limit != resource.RLIM_INFINITY and size + _LOW_SPACE > limit


def refuse_network_fs(path: str) -> None:
    """LMDB's locking and mmap are unsafe on network filesystems: refuse them."""
    try:
        real = os.path.realpath(path)
        best, fstype = "", ""
        with open("/proc/mounts", encoding="utf-8") as mounts:
            for line in mounts:
                parts = line.split()
                if len(parts) < 3:
                    continue
                mnt = parts[1].replace("\\040", " ")
                if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best):
                    best, fstype = mnt, parts[2]
    except OSError:
        return
    if fstype in _UNSUPPORTED_FS:
        raise StoreOpenError(
            f"{path!r} is on a {fstype} filesystem; LMDB needs a local disk (locks and "
            "mmap are not coherent over NFS/SMB). Put the store on a local path"
        )


# LMDB's meta page starts after the 16-byte page header with this magic number
# (native byte order); a data file without it is no LMDB environment.
LMDB_MAGIC: Final = 0xBEEFC0DE
PARTIAL_SUFFIX: Final = ".partial"


def check_data_file(path: str, *, required: bool) -> None:
    """Refuse a folder whose ``data.mdb`` is not an LMDB file, before LMDB touches it.

    A 0-byte or garbage ``data.mdb`` (an interrupted copy by another tool) is
    never initialised as a new store. With ``required`` (read-only opens) a
    missing folder or ``data.mdb`` is refused too: a read never creates one.
    """
    if not os.path.isdir(path):
        if os.path.exists(path) or required:
            raise NotAStoreError(
                f"{path!r} is not a deltalog store: "
                + ("not a folder" if os.path.exists(path) else "no such folder")
                + "; a store is a folder holding data.mdb: check the path"
            )
        return
    data = os.path.join(path, "data.mdb")
    try:
        with open(data, "rb") as handle:
            head = handle.read(24)
    except FileNotFoundError:
        if not required:
            return
        partial = sorted(n for n in os.listdir(path) if n.endswith(PARTIAL_SUFFIX))
        raise NotAStoreError(
            f"{path!r} is not a deltalog store: it has no data.mdb"
            + (
                f" (only {partial[0]!r}, left by an interrupted backup or compact: delete "
                "it and copy again)"
                if partial
                else "; check the path"
            )
        ) from None
    except OSError as exc:
        raise StoreOpenError(
            f"cannot read {data!r} ({exc}); reading a store needs read access to its folder "
            "and data.mdb"
        ) from exc
    if len(head) < 24 or int.from_bytes(head[16:20], sys.byteorder) != LMDB_MAGIC:
        raise NotAStoreError(
            f"{path!r} is not a deltalog store: its data.mdb "
            + (f"is {len(head)} bytes" if len(head) < 24 else "is not an LMDB file")
            + " (an interrupted copy?). Nothing was changed; restore it from a backup, or "
            "delete data.mdb to start a new store there"
        )


def lock_held(path: str) -> bool:
    """True when some process has the environment at ``path`` open (or it cannot be told).

    Every process with an LMDB environment open holds an ``fcntl`` lock on the
    first byte of ``lock.mdb``; ``F_GETLK`` asks about it through a read-only
    descriptor. Linux only (the ``struct flock`` layout is the platform's).
    """
    if not sys.platform.startswith("linux"):
        return True
    try:
        fd = os.open(os.path.join(path, "lock.mdb"), os.O_RDONLY)
    except OSError:
        return True
    try:
        query = struct.pack("hhqqixxxx", fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0)
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, query)
    except OSError:
        return True
    finally:
        os.close(fd)
    return bool(struct.unpack("hhqqixxxx", answer)[0] != fcntl.F_UNLCK)


def readonly_lock(path: str) -> tuple[bool, bool]:
    """How a read-only open uses ``lock.mdb``: ``(lock, probe first without it)``.

    * No ``lock.mdb`` (a backup, never opened since): no process has the store
      open, and LMDB would create the file: read without it.
    * ``lock.mdb`` writable by this user: use it (a writer starting later sees
      this reader), after a lock-free probe when no process holds it.
    * Not writable (a user with read access only): read without it if no
      process has the store open; otherwise refuse with what access is needed.
    """
    lock_file = os.path.join(path, "lock.mdb")
    if not os.path.exists(lock_file):
        return False, False
    held = lock_held(path)
    if os.access(lock_file, os.W_OK):
        return True, not held
    if not held:
        return False, False
    raise StoreOpenError(
        f"{path!r} is open by another process and {lock_file!r} is not writable for this "
        "user: reading a store while it is in use needs write access to lock.mdb (LMDB "
        "registers each reader there). Ask its owner for that access, or read it when no "
        "process has it open"
    )


def fsync_dir(path: str) -> None:
    """Make a rename or link in ``path`` durable (where the platform allows it)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def store_folder(path: Any, *, what: str = "store path") -> str:
    """``path`` as a folder path string LMDB can open, or :class:`InvalidInputError` (R9).

    Accepts ``str`` and ``os.PathLike[str]``; refuses other types, bytes
    paths, NUL characters and names that cannot be encoded for the file system.
    """
    if isinstance(path, (bytes, bytearray)) or not isinstance(path, (str, os.PathLike)):
        raise InvalidInputError(
            f"{what} {path!r} is a {type(path).__name__}; pass a str or pathlib.Path"
        )
    text = os.fspath(path)
    if not isinstance(text, str):
        raise InvalidInputError(f"{what} {path!r} is a bytes path; pass a str or pathlib.Path")
    if not text:
        raise InvalidInputError(f"{what} is empty; pass a folder path")
    if "\x00" in text:
        raise InvalidInputError(f"{what} {text!r} contains a NUL character; remove it")
    try:
        os.fsencode(text)
    except UnicodeEncodeError:
        raise InvalidInputError(
            f"{what} {text!r} cannot be encoded for the file system; pass the name as "
            "os.listdir() returns it"
        ) from None
    return text


#: What a commit waits for before it returns (the ``durable`` option of
#: :meth:`~deltalog.engine.DeltaLogSaver.from_path`): ``True``, the data pages and
#: then the meta page on disk (two syncs); ``"normal"``, the data pages on disk
#: and the meta page written but not synced (LMDB's ``MDB_NOMETASYNC``: the next
#: commit's sync, a clean close or the OS's write-back makes it durable, and a
#: machine crash may undo the last commit, never corrupt one); ``False``, no
#: sync at all (docs/operations.md, "Durability").
Durable: TypeAlias = bool | Literal["normal"]


def check_durable(durable: Any) -> None:
    """The ``durable`` option, or :class:`InvalidInputError` naming it."""
    if durable is True or durable is False or (type(durable) is str and durable == "normal"):
        return
    raise InvalidInputError(
        f'durable={durable!r}: need True (sync every commit, the default), "normal" (sync '
        "the data, not the meta page: a machine crash may undo the last commit) or False "
        "(no sync)"
    )


def check_pack_turns(pack_turns: Any) -> None:
    """The ``pack_turns`` option, or :class:`InvalidInputError` naming it."""
    if pack_turns is not True and pack_turns is not False:
        raise InvalidInputError(
            f"pack_turns={pack_turns!r}: need True (pack a thread's older records, the "
            "default) or False (write none)"
        )


def check_sizes(map_size: Any, max_map_size: Any, max_readers: Any) -> None:
    """The environment's size options, or :class:`InvalidInputError` naming the bad one."""
    for name, value, low in (
        ("map_size", map_size, 1),
        ("max_map_size", max_map_size, 1),
        ("max_readers", max_readers, 1),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise InvalidInputError(
                f"{name}={value!r}: need a positive int"
                + (" (bytes, e.g. 64 * 1024**2)" if "map" in name else " (e.g. 126)")
            )
    if max_map_size < map_size:
        raise InvalidInputError(
            f"max_map_size={max_map_size!r} is below map_size={map_size!r}; the cap of map "
            "growth must be at least the initial map size: raise max_map_size or lower map_size"
        )


def open_owner_only(path: str) -> int:
    """Open ``path`` for writing (truncated), creating it 0600 whatever the umask (issue 15.10).

    Returns the descriptor. A file that exists keeps its mode (it is the
    user's, maybe not a regular file at all, e.g. ``/dev/null``).
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return os.open(path, os.O_WRONLY | os.O_TRUNC)
    os.fchmod(fd, 0o600)
    return fd
