"""The LMDB environment facade: the only place transactions begin (R8).

One :class:`Environment` per path and process: reads are snapshots
(:meth:`Environment.read`), writes go through group commit
(:mod:`deltalog.engine.group_commit`) into one write transaction per batch.
Opening, the format check and fork handling live in :mod:`deltalog.engine.env_open`,
files and error translation in :mod:`deltalog.engine.env_files`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any, Final, TypeVar

import lmdb
from deltalog.engine import keys
from deltalog.engine.codec import EARLY_DICT, FINAL_DICT, encode_dictionary
from deltalog.engine.env_files import (
    PARTIAL_SUFFIX,
    fsync_dir,
    refuse_network_fs,
    store_folder,
    translate_error,
)
from deltalog.engine.env_open import IN_WRITE_OP, LIVE_ENVIRONMENTS, EnvironmentBase
from deltalog.engine.errors import (
    CorruptRecordError,
    DeltaLogError,
    InvalidInputError,
    StoreFullError,
)
from deltalog.engine.group_commit import WAKE_AFTER, Request
from deltalog.engine.memo import CLOG_KEEP, Report, pack_report, unpack_report
from deltalog.engine.read_txn import ReadTxn
from deltalog.engine.table_check import verify_tables
from deltalog.engine.txn_base import (
    DB_NAMES,
    MEMORY_DB_NAMES,
    PACK_DB_NAMES,
)
from deltalog.engine.write_txn import WriteTxn

logger = logging.getLogger(__name__)

T = TypeVar("T")

# A read finding every LMDB reader slot taken waits this long for one to be freed
# (by a read of this process ending, or polled every _SLOT_POLL s for other
# processes) before it fails.
READER_WAIT: Final = 30.0
_SLOT_POLL: Final = 0.05
# Adopting a map another process grew is retried this often (it may keep growing).
_RESIZE_RETRIES: Final = 8
# A compacting copy (Environment._repack) commits after this many bytes of records.
_REPACK_COMMIT_BYTES: Final = 64 * 1024**2


class Environment(EnvironmentBase):
    """One LMDB environment per path; the transaction boundary of deltalog.

    Args:
        path: Folder of the store (created 0700 if missing; files are 0600).
        map_size: Initial map size in bytes; the map doubles on demand.
        max_map_size: Cap for automatic growth; reaching it raises StoreFullError.
        durable: fsync on every commit (default). ``"normal"`` syncs a commit's
            data pages but not its meta page (one sync instead of two): a
            crash of the machine may undo the last commit, and corrupts
            nothing; :meth:`close` syncs. False relaxes to OS write-back: a
            crash of the machine (not of the process) may lose the last
            commits, and corrupts nothing only on filesystems that keep write
            order (docs/operations.md).
        codec: The record codec.
        group_commit: Concurrent writers share one transaction and one fsync.
        readonly: Open without write access (inspection). Creates and changes
            nothing: a path that holds no deltalog store raises
            :class:`NotAStoreError`; without write access to ``lock.mdb``
            (or with none), a store no process has open is read without it.
        max_readers: LMDB reader slots (concurrent read transactions, all
            processes); a read that finds none free waits for one (``READER_WAIT``).
        delta_blobs: Store large channel values as deltas of their previous
            version (see :meth:`WriteTxn.put_blob`).
        memo_entries: Delta histories remembered per process (see
            :mod:`deltalog.engine.memo`); 0 turns the history memo off.
            Overrides ``caches.memo_entries``.
        caches: The cache budgets (:class:`~deltalog.engine.cache.CachePolicy`;
            its defaults when None).
        pack_turns: Pack a namespace's older checkpoint and write records into
            records of up to 15 checkpoints, sized to fill LMDB pages (format
            14, docs/design.md "Turn packs"); False writes none and reads the
            packs there are.
    """

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._closed

    def close(self) -> None:
        """Close the environment. Idempotent."""
        if self._closed:
            return
        self._closed = True
        LIVE_ENVIRONMENTS.discard(self)
        if os.getpid() == self._pid:
            with self.commits.write_lock, self._rw.exclusive():
                if not self.readonly:
                    # Leave no gap for the next read-only open (see _fill_gap).
                    with contextlib.suppress(OSError, lmdb.Error):
                        self._fill_gap(logging.DEBUG)
                    if self.durable == "normal":
                        self._sync_meta()
                self.env.close()
            self.commits.close()
        self.memo.reset(0)

    def _sync_meta(self) -> None:
        """Sync the last commit's meta page (``durable="normal"`` leaves it to the
        next commit): a store closed cleanly keeps every commit through a machine
        crash. A failure is logged, not raised: the commits themselves are whole."""
        try:
            self.env.sync(True)
        except (OSError, lmdb.Error) as exc:
            logger.warning(
                "could not sync %s on close (%s); the last commit may be lost "
                "if the machine crashes before the OS writes it",
                self.path,
                exc,
            )

    def _page_end(self) -> int:
        """Bytes the pages in use reach, by the current meta page."""
        return int((self.env.info()["last_pgno"] + 1) * self.env.stat()["psize"])

    def _fill_gap(self, level: int) -> None:
        """Zero-fill the data file up to the pages in use (see _open_env)."""
        data = os.path.join(self.path, "data.mdb")
        used = self._page_end()
        size = os.path.getsize(data)
        if size < used:
            with open(data, "r+b") as handle:
                os.posix_fallocate(handle.fileno(), 0, used)
            logger.log(
                level, "zero-filled %s from %d to %d bytes (pages past its end)", data, size, used
            )

    # -- transactions ---------------------------------------------------------------

    def _begin(self, write: bool) -> Any:
        try:
            return self.env.begin(write=write)
        except lmdb.MapResizedError:
            # Another process grew the map: adopt its size, then retry (it may
            # grow again meanwhile). set_mapsize needs no transaction open in this
            # process, so a reader also waits for the writer (a writer holds it).
            attempts = 0
            while True:
                if not write:
                    self._rw.release_read()
                try:
                    with self.commits.write_lock, self._rw.exclusive():
                        self.env.set_mapsize(0)
                finally:
                    if not write:
                        self._rw.acquire_read()
                try:
                    return self.env.begin(write=write)
                except lmdb.MapResizedError:
                    attempts += 1
                    if attempts >= _RESIZE_RETRIES:
                        raise
        except lmdb.ReadersFullError as exc:
            # Slots of killed processes stay taken until someone checks; a
            # long-lived process would otherwise be locked out until restart.
            if self.env.reader_check():
                with contextlib.suppress(lmdb.ReadersFullError):
                    return self.env.begin(write=write)
            if write:
                raise translate_error(exc, self.path) from exc
            return self._wait_for_slot(exc)

    def _wait_for_slot(self, exc: lmdb.ReadersFullError) -> Any:
        """Begin a read once a reader slot is free, waiting up to ``READER_WAIT`` seconds.

        Every read transaction holds one of the environment's ``max_readers``
        slots (shared by all processes). More threads than slots reading at
        once wait here instead of failing (issue 15.12): a read of this
        process that ends wakes one waiter; slots freed by other processes
        are polled. Called with the read side of ``_rw`` held, which is let go
        while waiting, so map growth is never held up by a waiting reader.
        """
        deadline = time.monotonic() + READER_WAIT
        while True:
            self._rw.release_read()
            try:
                with self._slot_freed:
                    self._slot_waiters += 1
                    try:
                        self._slot_freed.wait(_SLOT_POLL)
                    finally:
                        self._slot_waiters -= 1
            finally:
                self._rw.acquire_read()
            try:
                return self.env.begin(write=False)
            except lmdb.ReadersFullError:
                if time.monotonic() >= deadline:
                    raise DeltaLogError(
                        f"all {self.max_readers} LMDB reader slots of {self.path!r} stayed in "
                        f"use for {READER_WAIT:g} s; raise max_readers "
                        "(DeltaLogSaver.from_path(max_readers=...), set by the first process "
                        "that opens the store) or close idle processes"
                    ) from exc

    def read(self) -> _Read:
        """One consistent read transaction (a snapshot), as a context manager. Keep it short."""
        return _Read(self)

    def last_txnid(self) -> int:
        """The id of the newest transaction committed to the file, by any process,
        read without a transaction (``mdb_env_info``). Equal to a read
        transaction's ``id()`` iff nothing was committed since it began."""
        self._check_pid()
        self._rw.acquire_read()  # map growth remaps the meta pages it reads
        try:
            return int(self.env.info()["last_txnid"])
        except lmdb.Error as exc:
            raise translate_error(exc, self.path) from exc
        finally:
            self._rw.release_read()

    def write(self, op: Callable[[WriteTxn], T], *, history_safe: bool = False) -> T:
        """Run ``op`` in a write transaction and commit it durably (R8).

        Concurrent callers share transactions and fsyncs through group commit
        (:meth:`GroupCommit.write <deltalog.engine.group_commit.GroupCommit.write>`
        says how); a returned write is as durable as with one commit each.
        ``op`` may run more than once (map growth retries it, and a failing op
        of the same batch makes the others run again) and must only touch the
        transaction.

        ``history_safe`` declares that ``op`` is short and changes records only
        through :meth:`WriteTxn.put_checkpoint`, :meth:`WriteTxn.put_writes` and
        :meth:`WriteTxn.put_blob`, which report what they may change to the
        history memo. It is a hint, never what the memo's exactness rests on:
        every other mutation of the transaction (deletion, maintenance, raw
        puts) marks the commit as changing every remembered history, declared
        or not; an op not declared history-safe counts so too.
        """
        self._check_writable()
        return self.commits.write(op, history_safe=history_safe)

    def submit(
        self,
        op: Callable[[WriteTxn], T],
        notify: Callable[[BaseException | None, T | None], None],
        *,
        history_safe: bool = False,
    ) -> None:
        """Queue ``op`` for the next group commit without waiting for it (async callers):
        :meth:`GroupCommit.submit <deltalog.engine.group_commit.GroupCommit.submit>`
        (``notify(error, value)`` once the commit is durable or failed), with
        ``history_safe`` as for :meth:`write`."""
        self._check_writable()
        self.commits.submit(op, notify, history_safe=history_safe)

    def _run_batch(
        self, batch: list[Request[Any]], before_commit: Callable[[], None] | None = None
    ) -> None:
        try:
            self._run_ops(batch, before_commit)
        finally:
            # No write of this process is open any more: a commit with the id it
            # had is another process's (HistoryMemo.own_open).
            self.memo.own_open = 0

    def _run_ops(self, batch: list[Request[Any]], before_commit: Callable[[], None] | None) -> None:
        pending = batch
        while True:
            names: dict[tuple[bytes, str], int] = {}
            txn = self._begin(write=True)
            txn_id: int = txn.id()
            self.learn_commits(txn, txn_id - 1, writing=True)
            wtxns: list[WriteTxn] = []
            try:
                self._hand_dictionaries(txn)
                failed = None
                started = time.perf_counter() if before_commit is not None else 0.0
                running = IN_WRITE_OP.__dict__.setdefault("stores", set())
                running.add(self)
                try:
                    for req in pending:
                        if before_commit is not None and (
                            not req.history_safe or time.perf_counter() - started > WAKE_AFTER
                        ):
                            # Ops that may run long (maintenance, or many of them):
                            # the last batch is durable and waits no longer.
                            before_commit()
                            before_commit = None
                        wtxn = WriteTxn(self, txn, names)
                        wtxns.append(wtxn)
                        try:
                            req.value = req.op(wtxn)
                        except lmdb.MapFullError:
                            raise
                        except BaseException as exc:
                            req.error = (
                                translate_error(exc, self.path)
                                if isinstance(exc, lmdb.Error)
                                else exc
                            )
                            req.done, failed = True, req
                            break
                finally:
                    running.discard(self)
                if failed is not None:
                    # The ops share one transaction: drop it with what the failed op
                    # wrote, and run the others again without it (a nested
                    # transaction per op was ~5 % slower: docs/benchmarks.md).
                    txn.abort()
                    pending = [req for req in pending if req is not failed]
                    if not pending:
                        return
                    continue
                # Before the commit is visible: a reader that sees it must also
                # see what it invalidates.
                everything = False
                groups: list[tuple[int, int]] = []
                new_blobs: list[tuple[int, int, bytes]] = []
                for w, req in zip(wtxns, pending, strict=True):
                    if w.memo_everything or not req.history_safe:
                        everything = True
                    if w.memo_groups:
                        groups.extend(w.memo_groups)
                    if w.memo_blobs:
                        new_blobs.extend(w.memo_blobs)
                if everything or groups or new_blobs:  # a memory op reports nothing
                    self.memo.before_commit(
                        txn_id, groups=groups, everything=everything, new_blobs=new_blobs
                    )
                if self.memo.clog:
                    self._report(txn, txn_id, pack_report(everything, groups, new_blobs))
                if before_commit is not None:
                    before_commit()
                    before_commit = None
                txn.commit()
                self.memo.committed(txn_id)
            except lmdb.MapFullError:
                txn.abort()
                if not self._grow():
                    full: BaseException = StoreFullError(
                        f"store {self.path!r} reached its map size cap of {self.max_map_size} "
                        "bytes; nothing of this write was stored. Raise max_map_size, prune "
                        "or compact"
                    )
                    for req in pending:
                        req.error, req.done = full, True
                    return
                for req in pending:
                    req.error = None
                continue
            except BaseException as exc:
                with contextlib.suppress(Exception):
                    txn.abort()
                err = translate_error(exc, self.path) if isinstance(exc, lmdb.Error) else exc
                for req in pending:
                    req.error, req.done = err, True
                return
            for (kind, name), name_id in names.items():
                self._name_ids.put((kind, name), name_id)
                self._names.put((kind, name_id), name)
            for req in pending:
                req.done = True
            if self.codec.wants_training:
                self._train_dictionary()
            return

    def _hand_dictionaries(self, txn: Any) -> None:
        """Hand the codec the store's record dictionaries once they are stored.

        A store has at most two, each immutable once written: the early one
        (``dict:0``, format 9) and the final one (``dict:1``); another process
        may have trained either after this one opened the store. Until this
        process knows the final one, each new snapshot is looked at (a get or
        two), so the codec is given every dictionary a record of this snapshot
        can name. A damaged dictionary is not handed over: the records that
        need it fail to decode (CorruptRecordError) and ``verify`` reports it;
        others read.
        """
        known = self.codec.dictionaries
        if FINAL_DICT in known:
            return
        snapshot = txn.id()
        if snapshot == self._no_dictionary_at:  # this snapshot was looked at: nothing new
            return
        meta = self._dbs.meta
        if txn.get(b"dict:1", db=meta) is None and (
            EARLY_DICT in known or txn.get(b"dict:0", db=meta) is None
        ):
            self._no_dictionary_at = snapshot
            return
        try:
            found = ReadTxn(self, txn).dictionaries()
        except CorruptRecordError as exc:
            logger.warning("the record dictionary of %s is damaged: %s", self.path, exc)
            return
        for dict_id, dictionary in found:
            self.codec.install(dict_id, dictionary, activate=dict_id == found[-1][0])

    def learn_commits(self, txn: Any, through: int, *, writing: bool = False) -> None:
        """Make every commit up to ``through`` known to the history memo, reading
        ``txn`` (a snapshot that holds them; see :mod:`deltalog.engine.memo`).

        ``writing``: ``txn`` is this process's write transaction, whose id is
        ``through + 1``. Each commit another process made is learnt from its report (``meta``
        ``clog:`` · txn id) when the store keeps reports, else counted as a
        change of everything. Once this process found such a commit (by a read
        or a write), its next write marks the store (``clog_on``) and from then
        on reports its own commits; a reader only looks whether the mark is set.
        """
        memo = self.memo
        if writing:
            memo.own_open = through + 1
        first = memo.known + 1
        if first == through == memo.own_open:
            # Only this process's write, committed a moment ago: it will be
            # known when its writer records it; until then this read bypasses.
            return
        meta = self._dbs.meta
        if memo.clog is not True:
            if first <= through:
                memo.foreign = True
            if memo.clog is None or memo.foreign:
                # Not looked yet, or another process writes here (maybe found by a
                # read): look for the mark, or set it with this process's next write.
                if txn.get(keys.CLOG_ON, db=meta) is not None:
                    memo.found_clog(True)
                elif writing and memo.foreign:
                    txn.put(keys.CLOG_ON, b"", db=meta)
                    memo.found_clog(True)
                else:
                    memo.found_clog(False)
        if first > through:
            return
        if not memo.clog:  # no reports to read: every commit counts as everything
            memo.learn_unknown(through)
            return
        # Reports older than the kept ones are gone: those commits count as
        # changes of everything without reading for them.
        start = max(first, through - CLOG_KEEP + 1)
        reports: list[Report | None] = [None] * (through - start + 1)
        cur = txn.cursor(db=meta)
        ok = cur.set_range(keys.clog_key(start))
        while ok:
            key = cur.key()
            if not key.startswith(keys.CLOG):
                break
            txn_id = keys.clog_txn(key)
            if txn_id > through:
                break
            reports[txn_id - start] = unpack_report(cur.value())
            ok = cur.next()
        if start > first:
            memo.learn_unknown(start - 1)
        memo.learn(start, reports)

    def _report(self, txn: Any, txn_id: int, report: bytes) -> None:
        """Store commit ``txn_id``'s history report for other processes, and drop
        reports older than the :data:`~deltalog.engine.memo.CLOG_KEEP` newest."""
        meta = self._dbs.meta
        txn.put(keys.clog_key(txn_id), report, db=meta)
        cur = txn.cursor(db=meta)
        ok = cur.set_range(keys.CLOG)
        while (
            ok
            and cur.key().startswith(keys.CLOG)
            and keys.clog_txn(cur.key()) <= (txn_id - CLOG_KEEP)
        ):
            ok = cur.delete()

    def _train_dictionary(self) -> None:
        """Train a record dictionary from this process's samples and store it.

        Runs under the writer lock right after a commit. If another process
        stored that dictionary (or the final one) first, it is adopted
        instead: each is immutable once written, so every record names a
        dictionary that is on disk before the record is.
        """
        try:
            stage, trained = self.codec.train()
        except Exception as exc:  # too few distinct samples; sampling starts over
            logger.info("record dictionary training skipped: %s", exc)
            return
        try:
            for _ in range(2):
                txn = self._begin(write=True)
                txn_id: int = txn.id()
                self.learn_commits(txn, txn_id - 1, writing=True)
                try:
                    existing = dict(ReadTxn(self, txn).dictionaries())
                    adopt = FINAL_DICT if FINAL_DICT in existing else stage
                    if adopt in existing:
                        dict_id, dictionary = adopt, existing[adopt]
                    else:
                        dict_id, dictionary = stage, trained
                        key = f"dict:{stage}".encode("ascii")
                        txn.put(key, encode_dictionary(key, trained), db=self._dbs.meta)
                    if self.memo.clog:  # a dictionary changes no history
                        self._report(txn, txn_id, pack_report(False, (), ()))
                    txn.commit()
                    self.memo.committed(txn_id)
                except lmdb.MapFullError:
                    txn.abort()
                    if not self._grow():
                        return
                    continue
                except lmdb.Error as exc:
                    txn.abort()
                    logger.warning("could not store the record dictionary: %s", exc)
                    return
                # Every dictionary a record of this snapshot can name: records of the
                # early one stay readable once the final one is known.
                for other, stored in existing.items():
                    self.codec.install(other, stored)
                self.codec.install(dict_id, dictionary, activate=True)
                return
        finally:
            self.memo.own_open = 0  # see _run_batch

    def _grow(self) -> bool:
        current = self.env.info()["map_size"]
        if current >= self.max_map_size:
            return False
        new = min(current * 2, self.max_map_size)
        with self._rw.exclusive():
            self.env.set_mapsize(new)
        logger.info("grew LMDB map of %s from %d to %d bytes", self.path, current, new)
        return True

    # -- whole-store operations ------------------------------------------------------

    def used_bytes(self) -> int:
        """Bytes of pages in use (what the data would occupy after compaction + free pages)."""
        self._check_pid()
        info = self.env.info()
        return int((info["last_pgno"] + 1) * self.env.stat()["psize"])

    def file_bytes(self) -> int:
        """Size of the data file on disk."""
        return os.path.getsize(os.path.join(self.path, "data.mdb"))

    def copy_to(self, dest: str | os.PathLike[str], *, compact: bool = True) -> None:
        """Consistent hot copy of the whole store (compacting by default) into a new folder.

        The one write path of backups and compactions. The copy goes to a
        temporary file in ``dest``, owner-only (0600) from its creation, is
        fsync'd, and only when complete is linked into place as ``data.mdb``
        (then the folder is fsync'd): an interrupted copy leaves no
        ``data.mdb``, so it never opens as a store (issue 15.4, 15.10).

        A compacting copy is rebuilt (:meth:`_repack`), not LMDB's compacting
        copy, which leaves every page as full as it was: half full where a
        store's keys went into the middle of a database (each thread's range
        in a store of many threads). A plain copy is LMDB's (``mdb_env_copy``).

        Raises:
            InvalidInputError: ``dest`` is a file, or a folder already holding a store.
        """
        self._check_pid()
        dest = store_folder(dest, what="backup destination")
        final = os.path.join(dest, "data.mdb")
        if os.path.exists(dest) and not os.path.isdir(dest):
            raise InvalidInputError(
                f"backup destination {dest!r} is a file; pass a new (or empty) folder path"
            )
        if os.path.lexists(final):
            raise InvalidInputError(f"{dest!r} already holds a store; pick an empty folder")
        os.makedirs(dest, mode=0o700, exist_ok=True)
        refuse_network_fs(dest)
        fd, partial = tempfile.mkstemp(prefix=".data.mdb.", suffix=PARTIAL_SUFFIX, dir=dest)
        try:
            try:
                os.fchmod(fd, 0o600)
                if compact:
                    self._repack(partial)
                else:
                    self.env.copyfd(fd)
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(partial, final)  # unlike rename, never replaces a data.mdb
            except FileExistsError:
                raise InvalidInputError(
                    f"{dest!r} received a store from someone else during the copy; pick an "
                    "empty folder"
                ) from None
        except lmdb.Error as exc:
            raise translate_error(exc, dest) from exc
        except OSError as exc:
            raise translate_error(exc, dest) from exc
        finally:
            with contextlib.suppress(OSError):
                os.unlink(partial)
        fsync_dir(dest)

    def _repack(self, path: str) -> None:
        """Write every database of one read snapshot into a new LMDB file at ``path``.

        Each database's entries go in key order with ``MDB_APPEND``, so LMDB
        fills every page before it starts the next one instead of splitting
        pages in the middle: the same keys and record bytes in fewer pages
        (stores of three chat threads: 0.65x their used bytes, where LMDB's
        compacting copy gave 0.93x; one thread 0.87x and 0.92x; see
        docs/operations.md). Commits every :data:`_REPACK_COMMIT_BYTES` of
        records, so the copy's dirty pages stay bounded; the few pages those
        commits free stay in the file.
        """
        self._check_pid()
        info = self.env.info()
        dst = lmdb.open(
            os.fsencode(path),
            subdir=False,
            lock=False,
            map_size=max(int(info["map_size"]), self.used_bytes() * 2),
            max_dbs=len(DB_NAMES) + len(PACK_DB_NAMES) + len(MEMORY_DB_NAMES) + 1,
            mode=0o600,
        )
        try:
            with self.read() as r:
                src = r.txn
                names = [bytes(k) for k, _ in src.cursor()]
                for name in names:
                    db = self.env.open_db(name, txn=src, create=False)
                    txn = dst.begin(write=True)
                    try:
                        out = dst.open_db(name, txn=txn)
                        pending = 0
                        for key, value in src.cursor(db=db):
                            txn.put(key, value, db=out, append=True)
                            pending += len(key) + len(value)
                            if pending >= _REPACK_COMMIT_BYTES:
                                txn.commit()
                                txn = dst.begin(write=True)
                                pending = 0
                        txn.commit()
                    except BaseException:
                        txn.abort()
                        raise
            dst.sync(True)
        finally:
            dst.close()

    def readers(self) -> dict[str, Any]:
        """LMDB's reader table (``mdb_reader_list``) and the newest transaction id.

        Returns:
            ``{"last_txnid": n, "readers": [(pid, thread, txnid), ...]}``; a
            slot's ``txnid`` is the snapshot it pins, ``"-"`` when idle.
        """
        self._check_pid()
        rows: list[tuple[int, str, str]] = []
        for line in self.env.readers().splitlines()[1:]:
            parts = line.split()
            if len(parts) == 3 and parts[0].isdigit():
                rows.append((int(parts[0]), parts[1], parts[2]))
        return {"last_txnid": int(self.env.info()["last_txnid"]), "readers": rows}

    def clear_stale_readers(self) -> int:
        """Free the reader slots of processes that died (``mdb_reader_check``); how many."""
        self._check_pid()
        return int(self.env.reader_check())

    def copy_to_fd(self, fd: int, *, compact: bool = False) -> None:
        """Consistent hot copy of the data file (``data.mdb``) written to file descriptor ``fd``."""
        self._check_pid()
        try:
            self.env.copyfd(fd, compact=compact)
        except lmdb.Error as exc:
            raise translate_error(exc, f"file descriptor {fd}") from exc

    def stats(self) -> dict[str, Any]:
        """Entry and page counts per named database, map figures, and ``free_bytes``:
        the file's used pages no database holds, LMDB's free list (pages earlier
        transactions freed, with the list's own; later writes reuse them, ``deltalog
        compact`` gives them back). Read while another process writes, the free
        figure may be off by that process's last commit."""
        self._check_pid()
        info = self.env.info()
        out: dict[str, Any] = {"map_size": info["map_size"]}
        held = 2  # the two meta pages
        with self.read() as r:
            main = r.txn.stat(self.env.open_db(None, txn=r.txn))
            held += _tree_pages(main)
            for name in DB_NAMES + PACK_DB_NAMES + MEMORY_DB_NAMES:
                if getattr(self._dbs, name) is None:  # not created in this store
                    continue
                st = r.txn.stat(getattr(self._dbs, name))
                pages = _tree_pages(st)
                out[name] = {"entries": st["entries"], "pages": pages}
                held += pages
            psize = main["psize"]
        used = info["last_pgno"] + 1
        out["used_bytes"] = used * psize
        out["free_bytes"] = max(0, used - held) * psize
        return out

    def iter_db(
        self, name: str, prefix: bytes = b"", chunk: int = 512
    ) -> Iterator[tuple[bytes, bytes]]:
        """Every (key, value) of one database under ``prefix``, read in short chunks."""
        db = getattr(self._dbs, name)
        start: bytes | None = None
        while True:
            rows: list[tuple[bytes, bytes]] = []
            with self.read() as r:
                cur = r.txn.cursor(db=db)
                ok = cur.set_range(start if start is not None else prefix)
                if ok and start is not None and cur.key() == start:
                    ok = cur.next()
                while ok and len(rows) < chunk:
                    key = cur.key()
                    if not key.startswith(prefix):
                        ok = False
                        break
                    rows.append((key, cur.value()))
                    ok = cur.next()
            yield from rows
            if not ok or not rows:
                return
            start = rows[-1][0]

    def verify_tables(self) -> list[tuple[str, str | None, str]]:
        """Every key of every database checked as reads use it (see
        :func:`deltalog.engine.table_check.verify_tables`); never raises for damage."""
        return verify_tables(self)


def _tree_pages(stat: dict[str, int]) -> int:
    """Pages of one B-tree, from ``mdb_stat``: branch, leaf and overflow."""
    return stat["branch_pages"] + stat["leaf_pages"] + stat["overflow_pages"]


class _Read:
    """The context manager of :meth:`Environment.read` (a class: a generator-based one
    cost about as much again as the LMDB begin and abort it wraps)."""

    __slots__ = ("env", "txn")

    def __init__(self, env: Environment) -> None:
        self.env = env
        self.txn: Any = None

    def __enter__(self) -> ReadTxn:
        env = self.env
        env._check_pid()
        env._rw.acquire_read()
        try:
            self.txn = env._begin(write=False)
            env._hand_dictionaries(self.txn)
            return ReadTxn(env, self.txn)
        except BaseException as exc:
            self._end()
            if isinstance(exc, lmdb.Error):
                raise translate_error(exc, env.path) from exc
            raise

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        self._end()
        if isinstance(exc, lmdb.Error):
            raise translate_error(exc, self.env.path) from exc

    def _end(self) -> None:
        env = self.env
        try:
            if self.txn is not None:
                self.txn.abort()
                self.txn = None
                if env._slot_waiters:  # a read waits for a slot (see _wait_for_slot)
                    with env._slot_freed:
                        env._slot_freed.notify()
        finally:
            env._rw.release_read()
