"""Test helpers that look at (or rewrite) the ``items`` records under the store's API."""

from __future__ import annotations

from typing import Any

from deltalog.engine import DeltaLogStore, keys
from deltalog.engine.memory_chunks import is_chunk, record_items
from deltalog.engine.write_txn import WriteTxn


def ikey_of(store: DeltaLogStore, ns: tuple[str, ...], key: str) -> bytes:
    """The ``items`` key of (ns, key) in ``store``."""
    with store.env.read() as r:
        ns_raw = r.txn.get(keys.item_ns_key(ns), db=store.env.db("item_ns"))
    return keys.item_key(int.from_bytes(ns_raw[:8], "big"), key)


def entry_of(store: DeltaLogStore, ns: tuple[str, ...], key: str) -> list[Any]:
    """The stored fields of the item at (ns, key), read from the record that holds it."""
    ikey = ikey_of(store, ns, key)
    for rkey, raw in store.env.iter_db("items"):
        rec = store.env.codec.decode(raw, "items", key=rkey)
        for found, fields in record_items(rkey, rec):
            if found == ikey:
                return list(fields)
    raise KeyError((ns, key))


def unpack_chunks(store: DeltaLogStore) -> int:
    """Rewrite every chunk as one record per item (the format 5 layout); the count made."""
    rows = list(store.env.iter_db("items"))
    made = 0

    def op(w: WriteTxn) -> None:
        nonlocal made
        db = w.env.db("items")
        for rkey, raw in rows:
            rec = w.env.codec.decode(raw, "items", key=rkey)
            if not is_chunk(rec):
                continue
            w.txn.delete(rkey, db=db)
            for ikey, fields in record_items(rkey, rec):
                w.txn.put(ikey, w.env.codec.encode(list(fields), key=ikey), db=db)
                made += 1

    store.env.write(op)
    return made
