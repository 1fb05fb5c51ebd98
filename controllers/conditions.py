"""Status conditions per the Kubernetes API conventions (metav1.Condition):
type, status (True/False/Unknown), reason (CamelCase), message, lastTransitionTime (changes only
when status flips), observedGeneration."""

from __future__ import annotations

import copy
import datetime


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def get(conditions: list[dict] | None, ctype: str) -> dict | None:
    for c in conditions or []:
        if c.get("type") == ctype:
            return c
    return None


def is_true(conditions: list[dict] | None, ctype: str) -> bool:
    c = get(conditions, ctype)
    return bool(c and c.get("status") == "True")


def set_condition(
    conditions: list[dict] | None,
    ctype: str,
    status: bool | str,
    reason: str,
    message: str = "",
    generation: int | None = None,
) -> tuple[list[dict], bool]:
    """A new list with `ctype` set; returns (conditions, transitioned). Merge patches replace
    lists whole, so callers write the returned list as is."""
    st = status if isinstance(status, str) else ("True" if status else "False")
    out = copy.deepcopy(list(conditions or []))
    cur = get(out, ctype)
    new: dict[str, object] = {"type": ctype, "status": st, "reason": reason, "message": message[:32768]}
    if generation is not None:
        new["observedGeneration"] = generation
    transitioned = cur is None or cur.get("status") != st
    new["lastTransitionTime"] = now_iso() if cur is None or transitioned else cur.get("lastTransitionTime") or now_iso()
    if cur is None:
        out.append(new)
    else:
        out[out.index(cur)] = new
    return out, transitioned


def changed(old: list[dict] | None, new: list[dict] | None) -> bool:
    return (old or []) != (new or [])


def with_kstatus(conds: list[dict] | None, generation: int | None) -> list[dict]:
    """Add kstatus' abnormal-true conditions (what Flux and Argo CD read) derived from `Ready`,
    `SchemaSynced` and `IndexesSynced`: `Stalled` True when the spec cannot be reached (a failed
    Ready, a refused spec change, an index that cannot be built or dropped as declared),
    `Reconciling` True while Ready is not settled yet, both False when current."""
    ready, synced, indexes = get(conds, "Ready"), get(conds, "SchemaSynced"), get(conds, "IndexesSynced")
    failed = next((c for c in (synced, indexes, ready) if c and c.get("status") == "False"), None)
    out = list(conds or [])
    if failed is not None:
        out, _ = set_condition(out, "Stalled", True, failed["reason"], failed.get("message", ""), generation)
        out, _ = set_condition(out, "Reconciling", False, "Stalled", "", generation)
    elif ready is not None and ready.get("status") == "True":
        out, _ = set_condition(out, "Stalled", False, "Ready", "", generation)
        out, _ = set_condition(out, "Reconciling", False, "Ready", "", generation)
    else:
        out, _ = set_condition(
            out, "Reconciling", True, "Progressing", "the collection is being reconciled", generation
        )
        out, _ = set_condition(out, "Stalled", False, "Progressing", "", generation)
    return out
