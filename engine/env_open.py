"""Opening an environment: folder and files, LMDB flags, format check, migrations, fork."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Final, TypeVar

import lmdb
import ormsgpack
from deltalog.engine import keys
from deltalog.engine.cache import CachePolicy, EnvelopeCache, NameCache, PayloadCache
from deltalog.engine.codec import RecordCodec
from deltalog.engine.env_files import (
    Durable,
    check_data_file,
    check_durable,
    check_pack_turns,
    check_sizes,
    lock_held,
    readonly_lock,
    refuse_network_fs,
    store_folder,
)
from deltalog.engine.envelope import (
    read_format_version,
)
from deltalog.engine.errors import (
    ForkedStoreError,
    NotAStoreError,
    ReadOnlyStoreError,
    ReentrantWriteError,
    StoreClosedError,
    StoreFullError,
    StoreOpenError,
)
from deltalog.engine.group_commit import GroupCommit, Request
from deltalog.engine.memo import HistoryMemo
from deltalog.engine.migrations import pending
from deltalog.engine.names import (
    NAMES_CRC_FORMAT,
)
from deltalog.engine.packs import PACK_CHECKPOINT_RATIO, PACK_DENSE_RATIO, PACK_RATIO, Pack
from deltalog.engine.txn_base import (
    DB_NAMES,
    MEMORY_DB_NAMES,
    PACK_DB_NAMES,
    Dbs,
)

if TYPE_CHECKING:
    from deltalog.engine.read_txn import ReadTxn

logger = logging.getLogger(__name__)

T = TypeVar("T")


#: The stores whose write op this thread is running (a write asked for from
#: inside one would wait for itself: Environment._check_writable refuses it).
IN_WRITE_OP: Final = threading.local()
# How long fork() waits for this process's open transactions before giving up on
# closing the environment for the child (see Environment._close_for_fork).
_FORK_WAIT: Final = 5.0
# Opening retries adopting a map another process grew this often (it may keep growing).
_OPEN_RESIZE_RETRIES: Final = 8


class RWLock:
    """Many readers or one exclusive holder (map growth remaps the file under readers)."""

    def __init__(self) -> None:
        # Readers take the plain lock (a Condition's ``with`` is a Python call
        # more, on every read); waiting and notifying go through the condition
        # over the same lock.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._readers = 0
        self._exclusive = False
        # The exclusive holder may read, and take the exclusive side again (reopening
        # after fork reads the format, and a read may have to adopt a grown map).
        self._owner: int | None = None
        self._depth = 0

    def acquire_read(self) -> None:
        with self._lock:
            while self._exclusive and self._owner != threading.get_ident():
                self._cond.wait()
            self._readers += 1

    def release_read(self) -> None:
        with self._lock:
            self._readers -= 1
            # Only an exclusive holder waits for the readers to drain (readers wait
            # for release_exclusive): notify_all costs more than the rest here.
            if not self._readers and self._exclusive:
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            if self._owner == threading.get_ident():
                self._depth += 1
            else:
                while self._exclusive:
                    self._cond.wait()
                self._exclusive = True
                while self._readers:
                    self._cond.wait()
                self._owner, self._depth = threading.get_ident(), 1
        try:
            yield
        finally:
            self.release_exclusive()

    def try_exclusive(self, timeout: float) -> bool:
        """Take the exclusive side within ``timeout`` seconds; False (and nothing held) if not."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._exclusive:
                if not self._cond.wait(deadline - time.monotonic()):
                    return False
            self._exclusive = True
            while self._readers:
                if not self._cond.wait(deadline - time.monotonic()):
                    self._exclusive = False
                    self._cond.notify_all()
                    return False
            self._owner, self._depth = threading.get_ident(), 1
            return True

    def release_exclusive(self) -> None:
        """Give up (one level of) the exclusive side."""
        with self._cond:
            self._depth -= 1
            if not self._depth:
                self._exclusive = False
                self._owner = None
                self._cond.notify_all()


class EnvironmentBase:
    """Opening, checking and reopening an environment; the base of
    :class:`~deltalog.engine.env.Environment` (see there for the arguments)."""

    if TYPE_CHECKING:  # provided by Environment

        def read(self) -> contextlib.AbstractContextManager[ReadTxn]: ...

        def _run_batch(
            self, batch: list[Request[Any]], before_commit: Callable[[], None] | None = None
        ) -> None: ...

        def _page_end(self) -> int: ...

        def learn_commits(self, txn: Any, through: int, *, writing: bool = False) -> None: ...

        def _fill_gap(self, level: int) -> None: ...

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        map_size: int = 64 * 1024**2,
        max_map_size: int = 1024**4,
        durable: Durable = True,
        codec: RecordCodec | None = None,
        group_commit: bool = True,
        readonly: bool = False,
        max_readers: int = 126,
        delta_blobs: bool = True,
        memo_entries: int | None = None,
        caches: CachePolicy | None = None,
        pack_turns: bool = True,
    ) -> None:
        check_sizes(map_size, max_map_size, max_readers)
        check_durable(durable)
        check_pack_turns(pack_turns)
        self.path = store_folder(path)
        self.map_size = map_size
        self.max_map_size = max_map_size
        self.durable = durable
        self.codec = codec or RecordCodec()
        self.group_commit = group_commit
        self.readonly = readonly
        self.max_readers = max_readers
        self.delta_blobs = delta_blobs
        # Whether puts pack the records behind a namespace's head (docs/design.md,
        # "Turn packs"); off, a store reads its packs and writes none.
        self.pack_turns = pack_turns
        caches = caches if caches is not None else CachePolicy()
        if memo_entries is not None:
            caches = dataclasses.replace(caches, memo_entries=memo_entries)
        self.caches = caches
        self.payloads = PayloadCache(caches.payload_bytes)
        self.envelopes = EnvelopeCache(caches.envelope_entries)
        # Decoded turn packs by (index key, stored bytes): TxnBase.pack.
        self.pack_cache: dict[tuple[bytes, bytes], Pack] = {}
        # The last pack's size over its records' stored sizes (all, and its
        # checkpoints'), and the free bytes this process left on the packs log's
        # last leaf page (packs.pack_due, pack_cut; 0, unknown, until it appends
        # a pack).
        self.pack_ratio = PACK_RATIO
        self.pack_checkpoint_ratio = PACK_CHECKPOINT_RATIO
        # The last pack's size at the dense level over its size at level 3.
        self.pack_dense_ratio = PACK_DENSE_RATIO
        self.pack_tail_free = 0
        # Per namespace prefix: the newest plain checkpoint key this process saw
        # behind the namespace's last pack, and the packable stored sizes of the
        # plain checkpoints up to it (WriteBase.pack_behind; a guess, checked).
        self.pack_tails: dict[bytes, tuple[bytes, list[int]]] = {}
        # Whether a snapshot this process read held a pack (TxnBase.packs_on).
        self.packs_seen = False
        self.memo = HistoryMemo(caches.memo_entries, caches.memo_bytes)
        self._name_ids: NameCache[tuple[bytes, str], int] = NameCache(caches.name_entries)
        self._names: NameCache[tuple[bytes, int], str] = NameCache(caches.name_entries)
        self._names_crc = False
        # The snapshot (read transaction id) last seen to hold no record
        # dictionary (see Environment._hand_dictionaries).
        self._no_dictionary_at = -1
        # The format this process reads the store as (set by _init_dbs; 0 until
        # then: the first read accepts a dictionary of any format).
        self.format_version: int = 0
        self._closed = False
        self._open()

    # -- life cycle ---------------------------------------------------------------

    def db(self, name: str) -> Any:
        """The handle of one named database (for ops given to :meth:`write`)."""
        return getattr(self._dbs, name)

    def _open(self) -> None:
        self._pid = os.getpid()
        self._closed_for_fork = False
        self._rw = RWLock()
        # Reads waiting for a free LMDB reader slot (see _wait_for_slot).
        self._slot_freed = threading.Condition(threading.Lock())
        self._slot_waiters = 0
        self.commits = GroupCommit(self._run_batch, enabled=self.group_commit)
        self._open_env()
        LIVE_ENVIRONMENTS.add(self)

    def _open_env(self) -> None:
        if not self.readonly:
            try:
                os.makedirs(self.path, mode=0o700, exist_ok=True)
            except OSError as exc:  # e.g. the path is a file, or not writable
                raise StoreOpenError(
                    f"cannot use {self.path!r} as a store folder ({exc}); a store is a folder "
                    "holding data.mdb and lock.mdb: pass a new or existing folder path"
                ) from exc
            check_data_file(self.path, required=False)
            lock = True
            probe = os.path.exists(os.path.join(self.path, "data.mdb")) and not lock_held(self.path)
        else:
            # One read-only open path (R12): nothing is created or written
            # before the folder is known to hold a deltalog store.
            check_data_file(self.path, required=True)
            lock, probe = readonly_lock(self.path)
        refuse_network_fs(self.path)
        data = os.path.join(self.path, "data.mdb")
        size = max(self.map_size, os.path.getsize(data) if os.path.exists(data) else 0)
        if probe:
            # Probe without a lock first: no process has the environment open,
            # so nothing changes under the probe, and a foreign environment is
            # refused without a reader slot (or a writer) touching its lock file.
            self.env = self._lmdb_open(size, lock=False, readonly=True)
            try:
                self._check_opened(probe=True)
            finally:
                self.env.close()
        self.env = self._lmdb_open(size, lock=lock, readonly=self.readonly)
        #: False when read-only without LMDB's lock file (see readonly_lock).
        self.locked = lock
        self.codec.page_size = int(self.env.stat()["psize"])
        try:
            self._check_opened()
        except BaseException:
            self.env.close()
            raise
        stale = self.env.reader_check()
        self.stale_readers_cleared = stale  # for `deltalog readers`
        if stale:
            logger.info("cleared %d stale LMDB reader slots in %s", stale, self.path)
        try:
            self._init_dbs()
        except BaseException:
            self.env.close()
            raise
        # Whatever was committed before this open (also by this process before
        # a fork) counts as another process's work.
        self.memo.reset(self.env.info()["last_txnid"])

    def _lmdb_open(self, size: int, *, lock: bool, readonly: bool) -> Any:
        try:
            return lmdb.open(
                os.fsencode(self.path),  # not str: LMDB would take it as UTF-8
                map_size=size,
                max_dbs=len(DB_NAMES) + len(PACK_DB_NAMES) + len(MEMORY_DB_NAMES) + 1,
                max_readers=self.max_readers,
                sync=self.durable is not False,
                metasync=self.durable is True,
                readonly=readonly,
                readahead=False,
                mode=0o600,
                lock=lock,
            )
        except lmdb.Error as exc:
            raise StoreOpenError(
                f"cannot open LMDB store at {self.path!r} ({type(exc).__name__}: {exc}); "
                "is it a deltalog store on a local disk?"
            ) from exc

    def _check_opened(self, *, probe: bool = False) -> None:
        """A just opened environment: its data file is whole, and it is deltalog's.

        ``probe``: a lock-free read-only look before a writable open, which
        leaves a truncated file to the writable open (it fills the gap).
        """
        # A data file shorter than the pages its meta page claims would raise
        # SIGBUS on a read past its end, killing the interpreter. That happens to
        # a store truncated by a bad copy, but also to a healthy one: LMDB may
        # allocate a page, free it in the same transaction and never write it.
        # So a writable open zero-fills the gap, and so does closing a writable
        # store (posix_fallocate never shrinks a file another process is
        # extending): free pages stay free, and pages a
        # truncation really lost read as damaged (CorruptRecordError, reported
        # by verify) instead of crashing. Size is read after the meta, so a
        # concurrent writer can only make the file look longer, never shorter.
        data = os.path.join(self.path, "data.mdb")
        if self.readonly or probe:
            used, size = self._page_end(), os.path.getsize(data)
            if size < used:
                if probe and not self.readonly:
                    return
                raise StoreOpenError(
                    f"{data!r} is {size} bytes but its pages reach {used} bytes (truncated, or "
                    "last written by a transaction that freed pages it never wrote). Open it "
                    "writable once, which zero-fills the gap safely, or restore a backup"
                )
        else:
            if os.path.getsize(data) < self._page_end():
                self._refuse_lost_pages(data)
            self._fill_gap(logging.WARNING)
        self._check_identity()

    def _refuse_lost_pages(self, data: str) -> None:
        """Refuse a data file that lost pages its trees use, before filling the gap.

        A gap of free pages is harmless (see :meth:`_check_opened`), but when a
        truncation took pages in use, LMDB reads their zero-filled copies as
        tree pages and *asserts*, aborting the interpreter. So the trees are
        walked first, in a child process (the page walk of ``verify``): a walk
        that stops at a page past the end (SIGBUS, or LMDB reporting damage)
        refuses the open and leaves the file as it is. Cost: one walk of the
        store, only on an open that finds a gap (a truncated copy, or a writer
        killed after allocating pages it never wrote).

        Raises:
            StoreOpenError: A page in use lies past the end of the file.
        """
        from deltalog.engine.table_check import page_walk

        found = page_walk(self.path, locked=self.locked)
        if found:
            raise StoreOpenError(
                f"{data!r} is {os.path.getsize(data)} bytes but its pages reach "
                f"{self._page_end()} bytes, and pages the store uses are among the missing "
                f"({found[0][2]}): the file was truncated. Nothing was changed; restore it "
                "from a backup"
            )

    def _check_identity(self) -> None:
        """Refuse an LMDB environment that deltalog did not create, before touching it.

        A deltalog store has a ``meta`` database (holding ``format_version``).
        A writable open may start a new store in an empty environment, never
        add deltalog's databases to another application's (issue 15.5); a
        read-only open needs the format record.
        """
        try:
            with self.env.begin() as txn:
                has_meta = txn.get(b"meta") is not None
                # A few names for the message (a foreign main database may be huge).
                listed = txn.cursor().iternext(values=False)
                named = [bytes(k) for k in itertools.islice(listed, 8)]
            if not has_meta:
                if not named and not self.readonly:
                    return
                why = (
                    "an empty LMDB environment"
                    if not named
                    else "another application's LMDB environment (databases: "
                    + ", ".join(repr(k.decode("utf-8", "replace")) for k in named)
                    + ")"
                )
                raise NotAStoreError(
                    f"{self.path!r} is not a deltalog store: it holds {why}. Nothing was "
                    "changed; point deltalog at a store folder, or at a new folder to start one"
                )
            if self.readonly:
                meta = self.env.open_db(b"meta", create=False)
                with self.env.begin() as txn:
                    found = txn.get(b"format_version", db=meta) is not None
                if not found:
                    raise NotAStoreError(
                        f"{self.path!r} is not a deltalog store: its meta database has no "
                        "format_version. Nothing was changed; point deltalog at a store folder"
                    )
        except (lmdb.CorruptedError, lmdb.PageNotFoundError, lmdb.InvalidError) as exc:
            raise StoreOpenError(
                f"{self.path!r} is damaged: its list of databases cannot be read "
                f"({type(exc).__name__}: {exc}); restore it from a backup"
            ) from exc
        except lmdb.Error as exc:
            raise NotAStoreError(
                f"{self.path!r} is not a deltalog store ({type(exc).__name__}: {exc}). "
                "Nothing was changed; point deltalog at a store folder"
            ) from exc

    def _open_handles(self) -> dict[str, Any]:
        """The named databases (created, with ``format_version``, by a writable open)."""
        handles: dict[str, Any]
        if self.readonly:
            # Without txn=: py-lmdb opens (and commits) its own transaction, so
            # the handles outlive it; a read transaction would discard them.
            handles = {name: self.env.open_db(name.encode(), create=False) for name in DB_NAMES}
            for name in PACK_DB_NAMES + MEMORY_DB_NAMES:
                with contextlib.suppress(lmdb.NotFoundError):
                    handles[name] = self.env.open_db(name.encode(), create=False)
        else:
            with self.env.begin(write=True) as txn:
                meta = self.env.open_db(b"meta", txn=txn)
                raw = txn.get(b"format_version", db=meta)
                # A newer or malformed format is refused before this transaction
                # creates anything (it aborts): the file stays as it was. The packs'
                # databases come with format 14: an older store gets them once its
                # upgrade committed (_init_dbs), so a failed upgrade changes nothing.
                current = raw is None or read_format_version(raw, self.path) >= keys.PACKS_FORMAT
                names = DB_NAMES + (PACK_DB_NAMES if current else ()) + MEMORY_DB_NAMES
                handles = {name: self.env.open_db(name.encode(), txn=txn) for name in names}
                if raw is None:
                    txn.put(
                        b"format_version",
                        ormsgpack.packb(keys.FORMAT_VERSION),
                        db=handles["meta"],
                    )
        return handles

    def _init_dbs(self) -> None:
        for attempt in range(_OPEN_RESIZE_RETRIES + 1):
            try:
                handles = self._open_handles()
                break
            except lmdb.MapResizedError as exc:
                # Another process grew the map since this one opened the file: adopt
                # its size (no transaction of this environment is open yet) and retry.
                if attempt == _OPEN_RESIZE_RETRIES:
                    raise StoreOpenError(
                        f"{self.path!r}: the map kept growing while it was opened ({exc})"
                    ) from exc
                self.env.set_mapsize(0)
            except lmdb.Error as exc:
                raise StoreOpenError(
                    f"{self.path!r} is not a readable deltalog store ({type(exc).__name__}: {exc})"
                ) from exc
        self._dbs = Dbs(**handles)
        with self.read() as r:
            version = read_format_version(
                r.txn.get(b"format_version", db=self._dbs.meta), self.path
            )
        self.format_version = version
        if version != keys.FORMAT_VERSION and not self.readonly:
            version = self._migrate()
            with self.env.begin(write=True) as txn:
                for name in PACK_DB_NAMES:
                    setattr(self._dbs, name, self.env.open_db(name.encode(), txn=txn))
        self.format_version = version
        self._names_crc = version >= NAMES_CRC_FORMAT

    def _migrate(self) -> int:
        """Bring an older store to the current format in one write transaction (R10).

        The version is read again inside the transaction: another process may
        have upgraded the store since this one looked. Returns the format now stored.
        """
        attempt = 0
        while True:
            try:
                txn = self.env.begin(write=True)
            except lmdb.MapResizedError:  # another process grew the map: adopt it
                if attempt == _OPEN_RESIZE_RETRIES:
                    raise
                attempt += 1
                self.env.set_mapsize(0)
                continue
            try:
                with txn:
                    version = read_format_version(
                        txn.get(b"format_version", db=self._dbs.meta), self.path
                    )
                    for old, new, step in pending(version):
                        logger.info("upgrading store %s from format %d to %d", self.path, old, new)
                        step(txn, self._dbs, self.codec)
                    txn.put(
                        b"format_version", ormsgpack.packb(keys.FORMAT_VERSION), db=self._dbs.meta
                    )
            except lmdb.MapFullError as exc:
                # A step that rewrites records (format 7's writes, format 10's blobs)
                # needs room for both copies until the commit frees the old pages: a
                # store whose file is nearly full needs a larger map. Nothing was
                # written; grow and run the steps again.
                current = self.env.info()["map_size"]
                if current >= self.max_map_size:
                    raise StoreFullError(
                        f"upgrading store {self.path!r} to format {keys.FORMAT_VERSION} needs "
                        f"more than max_map_size={self.max_map_size} bytes (the records it "
                        "rewrites take room twice until it commits); nothing was changed. "
                        "Open it with a larger max_map_size"
                    ) from exc
                grown = min(current * 2, self.max_map_size)
                logger.info("upgrade of %s needs a larger map: %d -> %d", self.path, current, grown)
                self.env.set_mapsize(grown)
                continue
            return keys.FORMAT_VERSION

    def _check_writable(self) -> None:
        self._check_pid()
        if self.readonly:
            raise ReadOnlyStoreError(f"store {self.path!r} was opened read-only")
        if self in getattr(IN_WRITE_OP, "stores", ()):
            # LMDB has one write transaction at a time: waiting here for the next
            # one, inside the current one, would wait forever.
            raise ReentrantWriteError(
                f"a write to store {self.path!r} was asked for from inside one of its own "
                "write transactions (e.g. a reducer passed to prune, or an embedder, that "
                "writes to the same saver or store); write after the operation returns"
            )

    def _check_pid(self) -> None:
        if self._closed:
            raise StoreClosedError(
                f"store {self.path!r} is closed; open it again (DeltaLogSaver.from_path or "
                "DeltaLogStore.from_path)"
            )
        if os.getpid() != self._pid:
            if not self._closed_for_fork:
                raise ForkedStoreError(
                    f"store {self.path!r} was inherited over fork() while a transaction "
                    f"stayed open for over {_FORK_WAIT}s, so this child cannot reopen it; "
                    "fork when no read or write is in progress, or open the store after fork()"
                )
            self._open()

    def _close_for_fork(self) -> None:
        """Before fork(): wait for this process's transactions, then close the environment.

        A child must neither use nor close an environment it inherits: closing
        frees reader slots the parent still holds (so a writer may reuse pages
        the parent is reading), and py-lmdb refuses to open the same files
        twice in one process. Closed here, with no transaction open, nothing is
        inherited: the parent reopens at once (:meth:`_reopen_after_fork`), the
        child on first use (:meth:`_check_pid`). Gives up after ``_FORK_WAIT``.
        """
        if self._closed or os.getpid() != self._pid:
            return
        if not self.commits.write_lock.acquire(timeout=_FORK_WAIT):
            return
        if not self._rw.try_exclusive(_FORK_WAIT):
            self.commits.write_lock.release()
            return
        self.env.close()
        self._closed_for_fork = True

    def _reopen_after_fork(self) -> None:
        """In the parent after fork(): reopen what :meth:`_close_for_fork` closed."""
        if not self._closed_for_fork:
            return
        try:
            self._open_env()
        finally:
            self._closed_for_fork = False
            self._rw.release_exclusive()
            self.commits.write_lock.release()


LIVE_ENVIRONMENTS: weakref.WeakSet[EnvironmentBase] = weakref.WeakSet()


def _before_fork() -> None:
    for store in list(LIVE_ENVIRONMENTS):
        store._close_for_fork()


def _after_fork_in_parent() -> None:
    for store in list(LIVE_ENVIRONMENTS):
        store._reopen_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent)
