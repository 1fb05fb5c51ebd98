"""What a client's operations imply: per primary key, what a reader must find at the end.

A client writes a journal (`Journal`): one line when an operation starts and one when it ends,
with its outcome — `ack` (acknowledged), `fail` (refused before anything was published: a
rate-limit answer) or `unknown` (an error, a timeout, a Proxy that died; an operation whose end
line is missing is unknown too). Replaying the journal (`replay`) gives, per lineage (one
collection name, dropped and re-created any number of times), the state of every key the
lineage ever used. Each lineage owns a contiguous key range, and each client works on its keys
alone, one operation at a time, so the order of the journal is the order of the effects — except
for operations of unknown outcome, which may still take effect later (a Proxy that answered
with an error may publish afterwards).

Key states: NEVER (never written), LIVE (one row, value known), DELETED (an acknowledged delete
or expression delete), DROPPED (its partition or collection was dropped), FAILED (an insert
refused before publishing), MAYBE (an operation of unknown outcome touched it: the set of
outcomes allowed, `None` for "absent"). What an unknown outcome permits, per key:

- insert, import: absent, or the row once — never twice; an import is also all-or-nothing
  (its segments are registered in one transaction), checked per job;
- delete (by id or by expression): the state before, or absent;
- upsert: the old row or the new one (its delete and insert share one timestamp and one
  publishing window); absent, or old and new both live, is a torn upsert and is reported;
- drop of a partition or collection: clients retry a drop until it is acknowledged, so an
  unknown drop only happens when it never was: its keys may be there or not.

An acknowledged operation after an unknown one on the same keys keeps the unknown one's outcomes
(it may land later): a MAYBE key stays MAYBE. Clients therefore never pick MAYBE keys for
upserts or deletes by ID; only expression deletes and drops cover them.

Row values: every row an operation writes has `val = row_values(op, key)` (the op's sequence
number and the key), so a value says which operation wrote it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

NEVER, LIVE, DELETED, DROPPED, MAYBE, FAILED = range(6)
STATE_NAMES = ("never written", "live", "deleted", "dropped", "maybe", "failed insert")
ACK, FAIL, UNKNOWN = "ack", "fail", "unknown"
WRITES = ("insert", "upsert", "delete_ids", "delete_expr", "import")
LINEAGE_KEYS = 10**10  # keys per lineage


def row_values(op: int, keys: np.ndarray) -> np.ndarray:
    """The `val` column of the rows operation `op` writes for `keys`."""
    return (np.int64(op) << np.int64(24)) | (np.asarray(keys, dtype=np.int64) & np.int64(0xFFFFFF))


def lineage_base(client: int, lineage: int) -> int:
    """First key of a client's lineage: ranges never overlap, across clients and lineages."""
    return (client + 1) * 10**13 + lineage * LINEAGE_KEYS


class Journal:
    """Append-only JSON lines, each written through at once (a killed client loses nothing)."""

    def __init__(self, path: Path):
        self.path = path
        self._f = open(path, "a", buffering=1)  # noqa: SIM115 - open for the client's lifetime
        self._n = 0

    def begin(self, op: str, lineage: str, **data) -> int:
        self._n += 1
        self._write({"n": self._n, "op": op, "lineage": lineage, "t": round(time.time(), 3), **data})
        return self._n

    def end(self, n: int, outcome: str, **data) -> None:
        self._write({"n": n, "end": outcome, "t": round(time.time(), 3), **data})

    def note(self, **data) -> None:
        self._write({"note": True, "t": round(time.time(), 3), **data})

    def _write(self, rec: dict) -> None:
        self._f.write(json.dumps(rec, separators=(",", ":")) + "\n")

    def close(self) -> None:
        self._f.close()


def read_journal(path: Path) -> list[tuple[dict, dict]]:
    """(begin, end) per operation in journal order; a missing end is {"end": "unknown"}."""
    begins: dict[int, dict] = {}
    ends: dict[int, dict] = {}
    order: list[int] = []
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a line cut by a kill
        if rec.get("note"):
            continue
        if "op" in rec:
            begins[rec["n"]] = rec
            order.append(rec["n"])
        elif "end" in rec:
            ends[rec["n"]] = rec
    return [(begins[n], ends.get(n, {"n": n, "end": UNKNOWN, "missing": True})) for n in order]


@dataclass
class ImportGroup:
    """An import of unknown outcome: all of its rows or none."""

    op: int
    start: int  # offset in the lineage
    count: int
    resolved: str = ""  # how it ended, learnt after the client had moved on (ack or fail)


@dataclass
class LineageModel:
    """Every key a lineage used, its state, value, partition slot and last operation."""

    name: str
    base: int
    state: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))
    val: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    part: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))
    last_op: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    maybe: dict[int, set] = field(default_factory=dict)  # offset → allowed values (None: absent)
    groups: list[ImportGroup] = field(default_factory=list)
    size: int = 0  # offsets in use: the next key is base + size
    collection_ids: list[int] = field(default_factory=list)  # every incarnation, oldest first
    dropped_ids: list[int] = field(default_factory=list)
    uncertain: list[str] = field(default_factory=list)  # DDL never acknowledged

    # ---------------------------------------------------------------- keys
    def reserve(self, count: int) -> int:
        """`count` fresh keys; returns the first offset."""
        start = self.size
        need = start + count
        if need > len(self.state):
            cap = max(need, 2 * len(self.state), 1024)
            for name in ("state", "val", "part", "last_op"):
                old = getattr(self, name)
                new = np.zeros(cap, old.dtype)
                new[: len(old)] = old
                setattr(self, name, new)
        self.size = need
        return start

    def offsets(self, keys) -> np.ndarray:
        return np.asarray(keys, dtype=np.int64) - self.base

    def allowed(self, off: int) -> set:
        s = int(self.state[off])
        if s == MAYBE:
            return set(self.maybe[off])
        return {int(self.val[off])} if s == LIVE else {None}

    def keys_in(self, states: Iterable[int], part: int | None = None) -> np.ndarray:
        mask = np.isin(self.state[: self.size], list(states))
        if part is not None:
            mask &= self.part[: self.size] == part
        return np.flatnonzero(mask) + self.base

    @property
    def current_id(self) -> int | None:
        live = [c for c in self.collection_ids if c not in self.dropped_ids]
        return live[-1] if live else None

    # ---------------------------------------------------------------- effects
    def _set(self, offs: np.ndarray, state: int, op: int, vals: np.ndarray | None = None) -> None:
        for o in offs[self.state[offs] == MAYBE]:
            self.maybe.pop(int(o), None)
        self.state[offs] = state
        self.last_op[offs] = op
        if vals is not None:
            self.val[offs] = vals

    def _widen(self, offs: np.ndarray, op: int, new: np.ndarray | None) -> None:
        """Unknown outcome: each key keeps what it allowed and may also take `new` (None: absent)."""
        for i, o in enumerate(offs.tolist()):
            allowed = self.allowed(o)
            allowed.add(None if new is None else int(new[i]))
            self.maybe[o] = allowed
        self.state[offs] = MAYBE
        self.last_op[offs] = op

    def write_new(self, offs: np.ndarray, vals: np.ndarray, outcome: str, op: int) -> None:
        """Insert or import of fresh keys."""
        if outcome == ACK:
            self._set(offs, LIVE, op, vals)
        elif outcome == FAIL:
            self._set(offs, FAILED, op)
        else:
            self.state[offs] = NEVER  # allowed() → {None}
            self._widen(offs, op, vals)

    def upsert(self, offs: np.ndarray, vals: np.ndarray, outcome: str, op: int) -> None:
        if outcome == ACK:
            self._set(offs, LIVE, op, vals)
        elif outcome == UNKNOWN:
            self._widen(offs, op, vals)

    def delete(self, offs: np.ndarray, outcome: str, op: int, gone: int = DELETED) -> None:
        """A delete (or a drop) of these keys."""
        if outcome == FAIL:
            return
        maybe = offs[self.state[offs] == MAYBE]
        live = offs[self.state[offs] == LIVE]
        if outcome == ACK:
            self._set(live, gone, op)
        else:
            self._widen(live, op, None)
        self._widen(maybe, op, None)

    def matching(self, lo: int, hi: int, mod: int, rem: int) -> np.ndarray:
        """Offsets an expression `id >= lo and id < hi and val % mod == rem` may match."""
        a, b = max(0, lo - self.base), min(self.size, hi - self.base)
        if a >= b:
            return np.zeros(0, np.int64)
        offs = np.arange(a, b)
        st = self.state[a:b]
        hit = (st == LIVE) & (self.val[a:b] % mod == rem)
        maybe = offs[st == MAYBE]
        maybe_hit = [o for o in maybe.tolist() if any(v is not None and v % mod == rem for v in self.maybe[o])]
        return np.concatenate([offs[hit], np.asarray(maybe_hit, dtype=np.int64)])

    def drop_all(self, outcome: str, op: int, part: int | None = None) -> None:
        n = self.size
        mask = np.isin(self.state[:n], (LIVE, MAYBE))
        if part is not None:
            mask &= self.part[:n] == part
        self.delete(np.flatnonzero(mask), outcome, op, gone=DROPPED)

    # ---------------------------------------------------------------- replay
    def apply(self, b: dict, e: dict) -> None:
        """One journal operation (begin and end records)."""
        op, kind, outcome = b["n"], b["op"], e["end"]
        if kind in ("insert", "import"):
            offs = np.arange(b["start"], b["start"] + b["count"], dtype=np.int64)
            self.reserve(max(0, b["start"] + b["count"] - self.size))
            self.part[offs] = b["part"]
            # An import resolved later (`resolved`) was unknown while the client went on: its
            # outcome counts only if no later operation touched its keys (`settle`).
            resolved = outcome if e.get("resolved") else ""
            self.write_new(offs, row_values(op, offs + self.base), UNKNOWN if resolved else outcome, op)
            if kind == "import" and (outcome == UNKNOWN or resolved):
                self.groups.append(ImportGroup(op, b["start"], b["count"], resolved))
        elif kind == "upsert":
            offs = self.offsets(b["keys"])
            self.upsert(offs, row_values(op, offs + self.base), outcome, op)
        elif kind == "delete_ids":
            self.delete(self.offsets(b["keys"]), outcome, op)
        elif kind == "delete_expr":
            self.delete(self.matching(b["lo"], b["hi"], b["mod"], b["rem"]), outcome, op)
        elif kind == "drop_partition":
            self.drop_all(outcome, op, part=b["part"])
            if outcome != ACK:
                self.uncertain.append(f"op {op}: drop_partition {b['part']} {outcome}")
        elif kind == "drop_collection":
            self.drop_all(outcome, op)
            if outcome == ACK and e.get("collection_id"):
                self.dropped_ids.append(int(e["collection_id"]))
            elif outcome != ACK:
                self.uncertain.append(f"op {op}: drop_collection {outcome}")
        elif kind == "create_collection":
            if outcome == ACK:
                self.collection_ids.append(int(e["collection_id"]))
            else:
                self.uncertain.append(f"op {op}: create_collection {outcome}")

    def settle(self) -> None:
        """Imports whose outcome was learnt late: theirs, where no later operation touched them."""
        for g in self.groups:
            offs = np.arange(g.start, g.start + g.count)
            if g.resolved and (self.last_op[offs] == g.op).all():
                vals = row_values(g.op, offs + self.base)
                self._set(offs, LIVE if g.resolved == ACK else FAILED, g.op, vals)
        self.groups = [g for g in self.groups if not g.resolved]


def replay(records: list[tuple[dict, dict]], bases: dict[str, int]) -> dict[str, LineageModel]:
    models = {name: LineageModel(name, base) for name, base in bases.items()}
    for b, e in records:
        m = models.get(b["lineage"])
        if m is not None:
            m.apply(b, e)
    for m in models.values():
        m.settle()
    return models


# -------------------------------------------------------------------- comparison
@dataclass
class Verdict:
    """One source of truth (the committed binlogs, or a Strong query) against the model."""

    source: str
    rows: int = 0  # live rows found
    lost: list[int] = field(default_factory=list)  # expected (and not allowed absent), missing
    duplicated: list[int] = field(default_factory=list)  # more than one live row
    resurrected: list[int] = field(default_factory=list)  # deleted or dropped, found
    wrong_value: list[int] = field(default_factory=list)  # found once, with a value not allowed
    stray: list[int] = field(default_factory=list)  # never written (or refused), found
    torn_imports: list[int] = field(default_factory=list)  # ops of imports found in part
    maybe_found: int = 0
    maybe_total: int = 0
    checksum: int = 0  # of the (pk, val) pairs found, order-independent

    @property
    def ok(self) -> bool:
        return not (
            self.lost or self.duplicated or self.resurrected or self.wrong_value or self.stray or self.torn_imports
        )


def checksum(pks: np.ndarray, vals: np.ndarray) -> int:
    """Sum of a mix of (pk, val) pairs, mod 2**64: equal sets of rows give equal checksums."""
    with np.errstate(over="ignore"):
        h = pks.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) ^ vals.astype(np.uint64)
        h ^= h >> np.uint64(29)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        return int(h.sum(dtype=np.uint64))


def compare(m: LineageModel, pks: np.ndarray, vals: np.ndarray, source: str) -> Verdict:
    """Every live row found (`pks`, `vals`, one entry per row) against the lineage's model."""
    v = Verdict(source, rows=len(pks), checksum=checksum(pks, vals))
    pks = np.asarray(pks, dtype=np.int64)
    vals = np.asarray(vals, dtype=np.int64)
    order = np.argsort(pks, kind="stable")
    pks, vals = pks[order], vals[order]
    uniq, first, counts = np.unique(pks, return_index=True, return_counts=True)
    v.duplicated = uniq[counts > 1].tolist()
    offs = uniq - m.base
    inside = (offs >= 0) & (offs < m.size)
    v.stray = uniq[~inside].tolist()
    offs_in, first_in, uniq_in = offs[inside], first[inside], uniq[inside]
    st = m.state[offs_in]
    found_val = vals[first_in]
    v.stray += uniq_in[np.isin(st, (NEVER, FAILED))].tolist()
    v.resurrected = uniq_in[np.isin(st, (DELETED, DROPPED))].tolist()
    live = st == LIVE
    v.wrong_value = uniq_in[live & (found_val != m.val[offs_in])].tolist()
    # Expected live and not found.
    present = np.zeros(m.size, dtype=bool)
    present[offs_in] = True
    n = m.size
    v.lost = (np.flatnonzero((m.state[:n] == LIVE) & ~present) + m.base).tolist()
    # MAYBE keys: found once with an allowed value, or absent if absence is allowed.
    found_at = dict(zip(offs_in.tolist(), found_val.tolist(), strict=True))
    v.maybe_total = len(m.maybe)
    for o, allowed in m.maybe.items():
        if o in found_at:
            v.maybe_found += 1
            if found_at[o] not in allowed:
                v.wrong_value.append(o + m.base)
        elif None not in allowed:
            v.lost.append(o + m.base)
    for g in m.groups:
        # Only while no later operation touched its keys (an expression delete may take some).
        if (m.last_op[g.start : g.start + g.count] != g.op).any():
            continue
        found = int(present[g.start : g.start + g.count].sum())
        if 0 < found < g.count:
            v.torn_imports.append(g.op)
    return v
