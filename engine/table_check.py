"""``verify_tables``: every key of every database checked as reads use it (issue 15.2)."""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
from typing import TYPE_CHECKING, Final, TypeVar

import lmdb
from deltalog.engine import keys
from deltalog.engine.codec import decode_dictionary
from deltalog.engine.envelope import (
    split_write_value,
)
from deltalog.engine.errors import (
    CorruptRecordError,
    DamagedKeyError,
    DeltaLogError,
)
from deltalog.engine.names import (
    decode_name_id,
    decode_name_rev,
)
from deltalog.engine.read_txn import ReadTxn
from deltalog.engine.txn_base import (
    NAME_KINDS,
    PACK_DB_NAMES,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

if TYPE_CHECKING:
    from deltalog.engine.env_open import EnvironmentBase

    pass

# verify_tables resumes a database walk after LMDB damage at most this often.
_VERIFY_RESTARTS: Final = 10_000

# Walks every database of a store with a cursor and a point lookup of every
# key, in a child process: on a damaged B-tree page LMDB reports MDB_CORRUPTED
# to a search but *asserts* (aborting the process) when a cursor steps onto
# it, and a verify must survive to report it. Prints "D db" per database,
# "K db key" every 256 keys (the last place reached if it dies) and "E db key
# error" for an LMDB error, which ends that database's walk.
_PAGE_WALK: Final = r"""
import sys, lmdb
# argv[2] is "1" when the parent holds LMDB's lock file, "0" when it reads
# lock-free (a backup without lock.mdb, a read-only user): the child then
# reads lock-free too, so it creates no lock.mdb (R12).
lock = sys.argv[2] == "1"
try:
    env = lmdb.open(sys.argv[1], max_dbs=16, readonly=True, lock=lock, readahead=False)
except lmdb.Error:  # no write access to lock.mdb: read as a lock-free reader does
    try:
        env = lmdb.open(sys.argv[1], max_dbs=16, readonly=True, lock=False, readahead=False)
    except lmdb.Error as exc:
        sys.exit("cannot open: " + str(exc))
for name in sys.argv[3:]:
    optional = name.startswith("?")  # absent from a store older than it
    name = name.lstrip("?")
    print("D", name, flush=True)
    key = b""
    try:
        try:
            db = env.open_db(name.encode(), create=False)
        except lmdb.NotFoundError:
            if optional:
                continue
            raise
        with env.begin() as txn:
            cur = txn.cursor(db=db)
            for n, (key, value) in enumerate(cur.iternext()):
                if n % 256 == 0:
                    print("K", name, bytes(key).hex(), flush=True)
                if txn.get(key, db=db) != value:
                    raise lmdb.CorruptedError("a point lookup of this key does not find it")
    except lmdb.Error as exc:
        print("E", name, bytes(key).hex(), type(exc).__name__ + ": " + str(exc), flush=True)
print("OK", flush=True)
"""
# Seconds the page walk may take before verify gives up on it.
_PAGE_WALK_TIMEOUT: Final = 600


def why(exc: BaseException) -> str:
    """An exception as one line for a verify finding."""
    return f"{type(exc).__name__}: {exc}" if isinstance(exc, lmdb.Error) else str(exc)


class TableCheck:
    """State of :meth:`Environment.verify_tables` across its read transactions.

    Findings are ``(kind, thread_id or None, detail)``; every one is an error.
    """

    #: Walk order: the name tables first, so the other keys' ids can be checked.
    ORDER: Final = (
        "names_rev",
        "names",
        "checkpoints",
        "writes",
        "blobs",
        "runs",
        "meta",
        "pack_index",
    )

    def __init__(self, r: ReadTxn) -> None:
        self.out: list[tuple[str, str | None, str]] = []
        self.crc = r._names_crc()
        self.legacy_dictionaries = r.env.format_version < keys.KEYED_FORMAT
        self.legacy_writes = r.legacy_writes
        self.legacy_blobs = r.legacy_blobs
        try:
            seq = r.meta("name_seq") or 0
        except ValueError as exc:  # not msgpack
            seq = exc
        if type(seq) is not int:
            self.out.append(("undecodable", None, f"meta/name_seq holds {seq!r}, not an id"))
            seq = 2**64
        self.seq: int = seq
        self.reverse: dict[tuple[bytes, int], str] = {}
        self.forward: set[tuple[bytes, int]] = set()
        self.known: dict[tuple[bytes, int], str] = {}

    def thread_of(self, key: bytes) -> str | None:
        """The thread a checkpoint/write/blob key belongs to, when its name is known."""
        with contextlib.suppress(Exception):
            t = (keys.KIND_THREAD, keys.decode_uid(key, 0)[0])
            return self.known.get(t) or self.reverse.get(t)
        return None

    def walk(self, r: ReadTxn, db_name: str, start: bytes) -> bytes | None:
        """Check the keys of ``db_name`` from ``start`` on; returns where to resume in a
        new transaction after LMDB reported damage (which ends this one), else None."""
        db = getattr(r.dbs, db_name)
        if db is None:  # the packs of a read-only older store
            return None
        check = getattr(self, f"check_{db_name}")
        cur = r.txn.cursor(db=db)
        # The child's page walk (page_walk) found LMDB's view sound.
        ok = cur.set_range(start)
        while ok:
            key, raw = bytes(cur.key()), bytes(cur.value())
            try:
                check(key, raw)
            except lmdb.Error as exc:
                self.out.append(
                    ("unreadable", self.thread_of(key), f"{db_name}/{key.hex()[:120]}: {why(exc)}")
                )
                return key + b"\x00"
            except (DeltaLogError, ValueError) as exc:
                self.out.append(
                    ("undecodable", self.thread_of(key), f"{db_name}/{key.hex()[:120]}: {exc}")
                )
            ok = cur.next()
        return None

    def need(self, kind: bytes, name_id: int) -> None:
        if (kind, name_id) not in self.known:
            raise CorruptRecordError(f"holds unknown name id {kind.decode()}:{name_id}")

    def check_names_rev(self, key: bytes, raw: bytes) -> None:
        if len(key) != 9 or key[:1] not in NAME_KINDS:
            raise DamagedKeyError(f"names_rev key of {len(key)} bytes")
        name_id = int.from_bytes(key[1:], "big")
        self.reverse[(key[:1], name_id)] = decode_name_rev(key, raw, crc=self.crc)
        if not 0 < name_id <= self.seq:
            raise CorruptRecordError(f"id {name_id} is beyond meta name_seq {self.seq}")

    def check_names(self, key: bytes, raw: bytes) -> None:
        kind = key[:1]
        if kind not in NAME_KINDS or key[1:2] not in (b"\x00", b"\x01"):
            raise DamagedKeyError("names key with an unknown kind or form")
        name_id, stored = decode_name_id(key, raw, crc=self.crc)
        name = stored if stored is not None else key[2:].decode("utf-8")
        if keys.name_key(kind, name) != key:
            raise CorruptRecordError(f"key does not match the name {name[:40]!r} it holds")
        if (kind, name_id) in self.forward:
            raise CorruptRecordError(f"id {name_id} is given to a second name {name[:40]!r}")
        self.forward.add((kind, name_id))
        if self.reverse.get((kind, name_id)) != name:
            raise CorruptRecordError(
                f"names_rev {kind.decode()}:{name_id} does not hold {name[:40]!r}"
            )
        self.known[(kind, name_id)] = name

    def finish_names(self) -> None:
        """Report reverse entries that no ``names`` entry points back at."""
        for (kind, name_id), name in sorted(self.reverse.items()):
            if (kind, name_id) not in self.forward:
                self.out.append(
                    (
                        "undecodable",
                        name if kind == keys.KIND_THREAD else None,
                        f"names_rev/{keys.name_rev_key(kind, name_id).hex()}: {name[:40]!r} has "
                        "no matching names entry",
                    )
                )

    def check_checkpoints(self, key: bytes, raw: bytes) -> None:
        t, n, _ = keys.decode_checkpoint_key(key)
        self.need(keys.KIND_THREAD, t)
        self.need(keys.KIND_NS, n)

    def check_writes(self, key: bytes, raw: bytes) -> None:
        decode = keys.decode_legacy_write_key if self.legacy_writes else keys.decode_write_key
        t, n, *_ = decode(key)
        self.need(keys.KIND_THREAD, t)
        self.need(keys.KIND_NS, n)
        self.need(keys.KIND_CHANNEL, split_write_value(raw)[1])

    def check_pack_index(self, key: bytes, raw: bytes) -> None:
        """A pack's index key is its greatest entry's: a checkpoint or a write key."""
        try:
            t, n, *_ = keys.decode_write_key(key)
        except CorruptRecordError:
            t, n, _ = keys.decode_checkpoint_key(key)
        self.need(keys.KIND_THREAD, t)
        self.need(keys.KIND_NS, n)
        if len(raw) != 8:
            raise CorruptRecordError(f"holds {len(raw)} bytes, not a pack's number")

    def check_blobs(self, key: bytes, raw: bytes) -> None:
        t, n, c, _ = keys.decode_blob_key(key, legacy=self.legacy_blobs)
        self.need(keys.KIND_THREAD, t)
        self.need(keys.KIND_NS, n)
        self.need(keys.KIND_CHANNEL, c)

    def check_runs(self, key: bytes, raw: bytes) -> None:
        t, n, _ = keys.decode_run_key(key)
        self.need(keys.KIND_THREAD, t)
        self.need(keys.KIND_NS, n)

    def check_meta(self, key: bytes, raw: bytes) -> None:
        if key.startswith(b"dict:"):
            decode_dictionary(key, raw, legacy=self.legacy_dictionaries)
        if key.startswith(keys.FWD):
            self._need_mark_ids(key, keys.FWD, "forward-link", (keys.KIND_THREAD, keys.KIND_NS))
        if key.startswith(keys.WDEP):
            kinds = (keys.KIND_THREAD, keys.KIND_NS, keys.KIND_CHANNEL)
            self._need_mark_ids(key, keys.WDEP, "write-range", kinds)

    def _need_mark_ids(
        self, key: bytes, prefix: bytes, what: str, kinds: tuple[bytes, ...]
    ) -> None:
        """A meta mark key is ``prefix`` then one interned id per kind, nothing after."""
        ids, end = keys.split_ids(key[len(prefix) :], len(kinds))
        if end != len(key) - len(prefix):
            raise DamagedKeyError(f"{what} mark key has trailing bytes")
        for kind, n in zip(kinds, ids, strict=True):
            self.need(kind, n)


def verify_tables(env: EnvironmentBase) -> list[tuple[str, str | None, str]]:
    """Check every key of every database the way reads use it; never raises for damage.

    First a child process walks each database with a cursor and looks every
    key up again by a point search (the path ``get``/``set_range`` reads
    take: a damaged B-tree page can fail one and not the other, and LMDB
    aborts a process whose cursor steps onto one). If LMDB finds damage,
    that is the report. Otherwise every key is decoded strictly, ``names``
    and ``names_rev`` are cross-checked both ways (each entry has its
    reverse, ids unique and within ``name_seq``) and every id a key holds
    must be a known name. Cost: O(entries · log entries).

    Returns:
        (kind, thread_id or None, detail) per finding; every one is an error.
        A finding of kind ``unreadable`` means LMDB found a damaged page.
    """
    env._check_pid()
    damaged = page_walk(env.path, locked=env.locked)
    if damaged:
        return damaged
    with env.read() as r:
        check = TableCheck(r)
    for db_name in TableCheck.ORDER:
        start: bytes | None = b""
        for _ in range(_VERIFY_RESTARTS):
            if start is None:
                break
            try:
                with env.read() as r:
                    start = check.walk(r, db_name, start)
            except DeltaLogError as exc:  # the cursor itself cannot move on
                check.out.append(("unreadable", None, f"{db_name}: walk stopped: {exc}"))
                break
        if db_name == "names":
            check.finish_names()
    return check.out


def page_walk(path: str, *, locked: bool) -> list[tuple[str, str | None, str]]:
    """LMDB's own view of every page of the store at ``path``, from a child process (see
    ``_PAGE_WALK``): an ``unreadable`` finding per database where LMDB reports or aborts
    on damage. ``locked``: whether this process holds LMDB's lock file (the child then
    reads with it; else lock-free)."""
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                _PAGE_WALK,
                path,
                "1" if locked else "0",
                *(f"?{n}" if n in PACK_DB_NAMES else n for n in TableCheck.ORDER),
                "?packs",
            ],
            capture_output=True,
            text=True,
            timeout=_PAGE_WALK_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        return [("unreadable", None, f"the page walk took over {_PAGE_WALK_TIMEOUT} s")]
    except OSError as exc:  # this user may not run sys.executable (a read-only user)
        logger.warning("verify: page walk of %s could not run (%s)", path, exc)
        return []
    if not done.stdout.startswith("D "):  # the child never ran (no usable sys.executable?)
        logger.warning("verify: page walk of %s could not run (%s)", path, done.stderr[-300:])
        return []
    out: list[tuple[str, str | None, str]] = []
    where = "the start"
    for line in done.stdout.splitlines():
        tag, _, rest = line.partition(" ")
        if tag == "D":
            where = f"{rest}: its start"
        elif tag == "K":
            db_name, _, key = rest.partition(" ")
            where = f"{db_name}: key {key[:120]}"
        elif tag == "E":
            db_name, key, why = rest.split(" ", 2)
            out.append(("unreadable", None, f"{db_name}/{key[:120]}: LMDB reports {why}"))
    if done.returncode != 0 or not done.stdout.endswith("OK\n"):
        err = done.stderr.strip().splitlines()
        out.append(
            (
                "unreadable",
                None,
                f"LMDB stopped the page walk within 256 keys after {where} "
                f"(exit {done.returncode}: {err[-1] if err else 'no message'}): a damaged page",
            )
        )
    return out
