"""The end of a chaos or load run: every lineage checked, operations counted, the report printed.

Shared by bench/chaos.py and bench/load.py: both run `ops_client` processes, and both end here.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ops_check import Leftovers, leftovers, queried_rows, stored_rows
from ops_model import (
    ACK,
    FAIL,
    LIVE,
    STATE_NAMES,
    UNKNOWN,
    WRITES,
    LineageModel,
    Verdict,
    compare,
    read_journal,
    replay,
)

ADMIN_TIMEOUT = 300.0  # an admin call (flush, query) that has not answered by then is reported as hung
KINDS = ("lost", "duplicated", "resurrected", "wrong_value", "stray", "torn_imports")


@dataclass
class Where:
    """Where a deployment's state lives, for the checks."""

    uri: str  # a Proxy
    etcd: str
    cluster: str
    storage_uri: str
    nats_url: str


@dataclass
class LineageResult:
    name: str
    collection_id: int | None
    dropped_ids: list[int]
    expected_live: int = 0
    maybe: int = 0
    binlogs: Verdict | None = None
    query: Verdict | None = None
    agree: bool = False  # binlogs and query hold the same rows
    num_entities: int = -1
    binlog_rows: int = -1  # rows in live segments' binlogs, deleted ones included
    segments: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    uncertain: list[str] = field(default_factory=list)
    samples: dict[str, list[str]] = field(default_factory=dict)  # violation → traced keys

    @property
    def ok(self) -> bool:
        return (
            not self.errors
            and self.binlogs is not None
            and self.binlogs.ok
            and self.query is not None
            and self.query.ok
            and self.agree
            and self.num_entities == self.binlog_rows
        )


@dataclass
class Outcome:
    minutes: float = 0.0
    rounds: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    exited: list[str] = field(default_factory=list)
    hung: list[str] = field(default_factory=list)
    ops: dict[str, dict[str, int]] = field(default_factory=dict)  # op → outcome → count
    read_violations: list[dict] = field(default_factory=list)
    unavailable: dict[str, tuple[float, str]] = field(default_factory=lambda: {"write": (0.0, ""), "read": (0.0, "")})
    slowest: dict[str, float] = field(default_factory=dict)  # op → its slowest call, seconds
    lineages: list[LineageResult] = field(default_factory=list)
    leftovers: Leftovers | None = None
    busy_loops: int = 0

    @property
    def ok(self) -> bool:
        return (
            not self.exited
            and not self.hung
            and not self.read_violations
            and all(r.ok for r in self.lineages)
            and (self.leftovers is None or self.leftovers.empty)
        )

    def to_json(self) -> dict:
        return asdict(self)


def bounded(fn, what: str):
    """`fn()` on a thread, waited for at most ADMIN_TIMEOUT: a call that never answers (pymilvus
    sets no deadline on most calls) is a finding, not a run that hangs."""
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        return pool.submit(fn).result(timeout=ADMIN_TIMEOUT)
    except FutureTimeout:
        raise TimeoutError(f"{what}: no answer in {ADMIN_TIMEOUT:.0f} s (hung)") from None
    finally:
        pool.shutdown(wait=False)


# -------------------------------------------------------------------- journals
def journals(paths: list[Path]) -> list[list[tuple[dict, dict]]]:
    return [read_journal(p) for p in paths]


def op_counts(paths: list[Path], outcome: Outcome) -> None:
    """Operations by kind and outcome, read violations, the slowest call of each kind, and the
    longest unavailability: from the last success before a failed attempt to the next success,
    for writes and for reads, over every client."""
    for path in paths:
        outages: dict[str, Outage] = {"write": Outage(), "read": Outage()}
        for b, e in read_journal(path):
            by = outcome.ops.setdefault(b["op"], {ACK: 0, FAIL: 0, UNKNOWN: 0})
            by[e["end"]] += 1
            if e.get("violation"):
                outcome.read_violations.append({"client": path.name, "op": b["n"], "kind": b["op"], **e["violation"]})
            if "t" in e:
                outcome.slowest[b["op"]] = max(outcome.slowest.get(b["op"], 0.0), round(e["t"] - b["t"], 1))
            kind = "write" if b["op"] in WRITES else "read" if b["op"] in ("query", "count") else None
            if kind is not None:
                outages[kind].see(e["end"] == ACK, b["t"], e.get("t", b["t"]))
        for kind, o in outages.items():
            if o.longest > outcome.unavailable[kind][0]:
                outcome.unavailable[kind] = (o.longest, f"{path.name}, {o.window}")


@dataclass
class Outage:
    """Successive failed attempts of one client: how long from the last success to the next."""

    last_ok: float | None = None
    failing: bool = False
    longest: float = 0.0
    window: str = ""

    def see(self, ok: bool, begin: float, end: float) -> None:
        if not ok:
            self.failing = True
            return
        if self.failing and self.last_ok is not None and end - self.last_ok > self.longest:
            self.longest = end - self.last_ok
            a, b = (time.strftime("%H:%M:%S", time.localtime(t)) for t in (self.last_ok, end))
            self.window = f"{a}–{b}"
        self.last_ok, self.failing = end, False


def journal_bases(path: Path) -> dict[str, int]:
    """The lineages a client journal covers and their first keys (its first note says)."""
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("note") and "bases" in rec:
                return {k: int(v) for k, v in rec["bases"].items()}
    return {}


def models_of(paths: list[Path]) -> tuple[dict[str, LineageModel], dict[str, dict[int, tuple[dict, dict]]]]:
    """Every lineage's model, and its journal records by operation number."""
    models: dict[str, LineageModel] = {}
    records: dict[str, dict[int, tuple[dict, dict]]] = {}
    for path in paths:
        recs = read_journal(path)
        models.update(replay(recs, journal_bases(path)))
        for b, e in recs:
            records.setdefault(b["lineage"], {})[b["n"]] = (b, e)
    return models, records


# -------------------------------------------------------------------- checks
def trace(m: LineageModel, keys: list[int], records: dict[int, tuple[dict, dict]], k: int = 5) -> list[str]:
    """A few keys with what the model knows of them: state, value, the last operation."""
    out = []
    for key in keys[:k]:
        off = key - m.base
        if not 0 <= off < m.size:
            out.append(f"{key}: outside the lineage's keys")
            continue
        op = int(m.last_op[off])
        b, e = records.get(op, ({"op": "?"}, {"end": "?"}))
        allowed = sorted(m.maybe[off], key=str) if off in m.maybe else None
        out.append(
            f"{key}: {STATE_NAMES[m.state[off]]}, val {int(m.val[off])}"
            + (f", allowed {allowed}" if allowed is not None else "")
            + f", last op {op} {b['op']} ({e['end']}{', ' + e['error'][:80] if e.get('error') else ''})"
        )
    return out


def check_lineage(where: Where, m: LineageModel, records: dict) -> LineageResult:
    """Flush, then the committed binlogs and a Strong query against the model."""
    from pymilvus import Collection, connections

    r = new_result(m)
    if m.current_id is None:
        r.errors.append("no live incarnation")
        return r
    alias = f"check-{m.name}"
    connections.connect(alias, uri=where.uri, timeout=60)
    try:
        coll = Collection(m.name, using=alias)
        cid = coll.describe()["collection_id"]
        if cid != m.current_id:
            r.errors.append(f"collection {m.name} is {cid}, the journal's last incarnation {m.current_id}")
            return r
        try:
            bounded(lambda: coll.flush(timeout=240), "final flush")
        except Exception as exc:  # noqa: BLE001 - reported; the stored rows are still compared
            r.errors.append(f"final flush: {exc!r}"[:300])
        check_binlogs(where, m, r)
        check_index(coll, m.name, alias, r)
        try:
            bounded(lambda: coll.load(timeout=240), "load")
            q_pks, q_vals = bounded(lambda: queried_rows(coll, m.base, m.base + m.size), "Strong query")
            r.query = compare(m, q_pks, q_vals, "Strong query")
            r.agree = r.query.checksum == r.binlogs.checksum and r.query.rows == r.binlogs.rows
        except Exception as exc:  # noqa: BLE001 - reported
            r.errors.append(f"Strong query: {exc!r}"[:300])
        r.num_entities = bounded(lambda: coll.num_entities, "num_entities")
    finally:
        connections.disconnect(alias)
    add_samples(r, m, records)
    return r


def new_result(m: LineageModel) -> LineageResult:
    r = LineageResult(m.name, m.current_id, list(m.dropped_ids), uncertain=list(m.uncertain))
    r.expected_live = int((m.state[: m.size] == LIVE).sum())
    r.maybe = len(m.maybe)
    return r


def check_index(coll, name: str, alias: str, r: LineageResult) -> None:
    """Every flushed segment's index build ends Finished: none Failed by a fault (storage away,
    an IndexNode killed), none left pending."""
    from pymilvus import utility

    try:
        if bounded(coll.has_index, "has_index"):
            bounded(lambda: utility.wait_for_index_building_complete(name, timeout=240, using=alias), "index builds")
    except Exception as exc:  # noqa: BLE001 - reported
        r.errors.append(f"index builds: {exc!r}"[:300])


def check_binlogs(where: Where, m: LineageModel, r: LineageResult) -> None:
    stored = stored_rows(where.etcd, where.cluster, where.storage_uri, m.current_id)
    r.binlog_rows, r.segments = stored.binlog_rows, stored.segments
    r.binlogs = compare(m, stored.pks, stored.vals, "binlogs")


def add_samples(r: LineageResult, m: LineageModel, records: dict) -> None:
    for v in (r.binlogs, r.query):
        if v is None:
            continue
        for kind in KINDS:
            found = getattr(v, kind)
            if found and kind != "torn_imports":
                r.samples[f"{v.source}: {kind} ({len(found)})"] = trace(m, found, records)
            elif found:
                r.samples[f"{v.source}: torn imports"] = [f"op {op}" for op in found]


def check_lineages(where: Where, paths: list[Path], outcome: Outcome) -> None:
    models, records = models_of(paths)
    for name, m in models.items():
        outcome.lineages.append(check_lineage(where, m, records.get(name, {})))


def wait_for_leftovers(where: Where, outcome: Outcome, within: float) -> Leftovers:
    """Drops finish in the background: what is still there after `within` seconds is left."""
    live = {r.collection_id for r in outcome.lineages if r.collection_id is not None}
    dropped = {c for r in outcome.lineages for c in r.dropped_ids}
    deadline = time.monotonic() + within
    while True:
        left = leftovers(where.etcd, where.cluster, where.storage_uri, where.nats_url, live, dropped)
        if left.empty or time.monotonic() > deadline:
            return left
        time.sleep(2)


# -------------------------------------------------------------------- report
def print_report(o: Outcome) -> None:
    print()
    rounds = f", {o.rounds} fault rounds" if o.rounds else ", no faults"
    print(f"Duration {o.minutes:.1f} min{rounds}, busy loops {o.busy_loops}.")
    print()
    print("| operation | acknowledged | failed (refused) | outcome unknown | slowest call |")
    print("|---|---|---|---|---|")
    for op in sorted(o.ops):
        c = o.ops[op]
        print(f"| {op} | {c[ACK]:,} | {c[FAIL]:,} | {c[UNKNOWN]:,} | {o.slowest.get(op, 0):.1f} s |")
    if o.faults:
        print()
        print("| fault | injected |")
        print("|---|---|")
        for f in sorted(o.faults):
            print(f"| {f} | {o.faults[f]} |")
    print()
    print("| invariant | " + " | ".join(r.name for r in o.lineages) + " |")
    print("|---|" + "---|" * len(o.lineages))

    def row(label: str, fn) -> None:
        print(f"| {label} | " + " | ".join(str(fn(r)) for r in o.lineages) + " |")

    row("collection ID (dropped before)", lambda r: f"{r.collection_id} ({len(r.dropped_ids)})")
    row("rows expected live / of unknown outcome", lambda r: f"{r.expected_live:,} / {r.maybe:,}")
    for src in ("binlogs", "query"):
        row(f"{src}: live rows found", lambda r, s=src: f"{getattr(r, s).rows:,}" if getattr(r, s) else "n/a")
        for kind in KINDS:
            row(
                f"{src}: {kind.replace('_', ' ')}",
                lambda r, s=src, k=kind: f"{len(getattr(getattr(r, s), k)):,}" if getattr(r, s) else "n/a",
            )
    row("binlogs and Strong query agree", lambda r: "yes" if r.agree else "NO")
    row("num_entities / rows in live binlogs", lambda r: f"{r.num_entities:,} / {r.binlog_rows:,}")
    row("segments", lambda r: ", ".join(f"{k} {v}" for k, v in sorted(r.segments.items())))
    row("errors", lambda r: "; ".join(r.errors) or "none")
    print()
    kinds: dict[str, int] = {}
    for v in o.read_violations:
        for k in v:
            if k not in ("client", "op", "kind"):
                kinds[f"{v['kind']} {k}"] = kinds.get(f"{v['kind']} {k}", 0) + 1
    detail = ", ".join(f"{k} ×{n}" for k, n in sorted(kinds.items()))
    print(f"| reads contradicting an acknowledged operation during the run | {len(o.read_violations)} ({detail}) |")
    for kind in ("write", "read"):
        secs, where = o.unavailable[kind]
        print(f"| longest unavailability ({kind}s: last success, failures, next success) | {secs:.1f} s ({where}) |")
    print(f"| processes that exited by themselves | {', '.join(o.exited) or 'none'} |")
    print(f"| clients stuck in a call at the end | {', '.join(o.hung) or 'none'} |")
    left = o.leftovers
    if left is not None:
        print(
            f"| left behind by drops: etcd keys / files / consumers | {len(left.keys)} / {len(left.files)} / "
            f"{len(left.consumers)} (stream messages on dropped channels: {sum(left.stream_messages.values())}) |"
        )
    print(f"| invariants | {'hold' if o.ok else 'VIOLATED'} |")
    for r in o.lineages:
        for label, lines in r.samples.items():
            print(f"  {r.name} {label}:")
            for line in lines:
                print(f"    {line}")
        for u in r.uncertain:
            print(f"  {r.name} uncertain DDL: {u}")
    for v in o.read_violations[:10]:
        print(f"  read violation: {v}"[:400])
    if left is not None and not left.empty:
        for what in ("keys", "files", "consumers"):
            for x in getattr(left, what)[:10]:
                print(f"  left behind ({what}): {x}")
