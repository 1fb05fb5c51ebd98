"""Hypothesis strategies for malformed and hostile custom resources (tests/operator/test_fuzz_crs.py):
Collection, FlushRequest and Segment objects built from a valid one with fields dropped, given
the wrong type, out-of-range numbers, unknown enum values, hostile strings, duplicated or
conflicting fields. Everything is JSON (what the API server stores): no NaN, no infinity."""

from __future__ import annotations

from hypothesis import strategies as st

from tests.unit.test_crds import schema

HOSTILE = [
    "",
    " ",
    "a" * 10_000,
    "x" * 256,
    "名字",
    "\x00\x01\x02",
    "tab\there",
    "line\nbreak",
    "../../etc/passwd",
    "root-coord/collection/1",
    "coll'; DROP TABLE x; --",
    "{{7*7}}",
    "%s%s%n",
    "9starts_with_digit",
    "has-dash",
    "has.dot",
    "Ünïcödé_name",
    "\u202eevil",
    "default",
    "_default",
    "null",
    "true",
    "1e309",
]
HUGE = [0, -1, -(2**31), 2**31, 2**63, -(2**63) - 1, 10**30, 32769, 65536, 65536 * 4, 4097, 17, 1.5, -0.0, 1e300]
ENUMS = [
    "int64",
    "INT64",
    "String",
    "Varchar",
    "FloatVector ",
    "Float32",
    "Vector",
    "Unknown",
    "None",
    "L2",
    "COSINE",
    "Strong ",
    "strong",
    "Customized",
    "Session",
    "retain",
    "Orphan",
]
# Every data type the Collection CRD admits (its own enum, so the two cannot drift).
TYPES = schema("Collection")["properties"]["spec"]["properties"]["fields"]["items"]["properties"]["dataType"]["enum"]

# Any JSON value, small.
scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**64), 2**64),
    st.sampled_from(HUGE),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(HOSTILE),
    st.text(max_size=12),
)
junk = st.recursive(
    scalar,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6,
)
name_like = st.one_of(
    st.sampled_from(HOSTILE), st.text(max_size=20), st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,20}\Z"), junk
)
number_like = st.one_of(st.sampled_from(HUGE), st.integers(-(2**40), 2**40), junk)
enum_like = st.one_of(st.sampled_from(TYPES), st.sampled_from(ENUMS), junk)


def _mutate(base: dict, alternatives: dict) -> st.SearchStrategy:
    """`base` with each key kept, dropped, or replaced by one of its alternatives; extra keys too."""

    @st.composite
    def build(draw):
        out = {}
        for key in sorted(set(base) | set(alternatives)):
            choice = draw(st.sampled_from(["keep", "keep", "drop", "alt"]))
            if choice == "keep" and key in base:
                out[key] = base[key]
            elif choice == "alt":
                out[key] = draw(alternatives.get(key, junk))
        if draw(st.booleans()):
            out[draw(st.text(max_size=8))] = draw(junk)  # an unknown key (the API server prunes it)
        return out

    return build()


FIELD_ALTS = {
    "name": name_like,
    "dataType": enum_like,
    "description": st.one_of(st.text(max_size=20), junk),
    "isPrimaryKey": st.one_of(st.booleans(), junk),
    "autoID": st.one_of(st.booleans(), junk),
    "elementType": enum_like,
    "maxCapacity": number_like,
    "nullable": st.one_of(st.booleans(), junk),
    "defaultValue": junk,
    "dim": number_like,
    "maxLength": number_like,
}
VALID_FIELDS = [
    {"name": "id", "dataType": "Int64", "isPrimaryKey": True},
    {"name": "vec", "dataType": "FloatVector", "dim": 8},
    {"name": "tag", "dataType": "VarChar", "maxLength": 32},
    {"name": "n", "dataType": "Int32", "nullable": True, "defaultValue": 3},
    {"name": "arr", "dataType": "Array", "elementType": "VarChar", "maxCapacity": 4, "maxLength": 8},
]


@st.composite
def fields(draw) -> list:
    out = []
    for base in draw(st.lists(st.sampled_from(VALID_FIELDS), min_size=0, max_size=5)):
        out.append(draw(_mutate(base, FIELD_ALTS)) if draw(st.booleans()) else dict(base))
    if draw(st.booleans()) and out:
        out.append(dict(draw(st.sampled_from(out))))  # a duplicated field (and maybe a second primary key)
    if draw(st.integers(0, 9)) == 0:
        out = [draw(junk) for _ in range(draw(st.integers(0, 3)))]  # not objects at all
    return out


INDEX_ALTS = {
    "name": name_like,
    "fieldName": st.one_of(st.sampled_from(["vec", "id", "tag", "missing"]), name_like),
    "indexType": st.one_of(st.sampled_from(["FLAT", "IVF_FLAT", "IVF_SQ8", "HNSW", "AUTOINDEX", "DISKANN"]), junk),
    "metricType": st.one_of(st.sampled_from(["L2", "IP", "COSINE", "HAMMING", "l2"]), junk),
    "params": st.one_of(
        st.dictionaries(st.sampled_from(["nlist", "M", "efConstruction", "x"]), number_like, max_size=3), junk
    ),
}
indexes = st.lists(_mutate({"fieldName": "vec", "indexType": "HNSW", "metricType": "L2"}, INDEX_ALTS), max_size=3)

SPEC_ALTS = {
    "indexes": st.one_of(indexes, junk),
    "name": name_like,
    "database": name_like,
    "description": st.one_of(st.text(max_size=20), junk),
    "partitions": st.one_of(st.lists(name_like, max_size=3), junk),
    "shardsNum": number_like,
    "consistencyLevel": enum_like,
    "deletionPolicy": enum_like,
    "load": st.one_of(st.booleans(), junk),
    "fields": st.one_of(fields(), junk),
}


@st.composite
def collection_spec(draw):
    base = {"fields": [dict(f) for f in VALID_FIELDS[:3]], "shardsNum": 1, "deletionPolicy": "Delete"}
    if draw(st.integers(0, 14)) == 0:
        return draw(junk)  # spec itself a string, a list, null...
    spec = draw(_mutate(base, SPEC_ALTS))
    if draw(st.integers(0, 3)) == 0 and isinstance(spec.get("fields"), list):
        spec["fields"] = draw(fields())
    return spec


@st.composite
def flush_spec(draw, known: list[str] = ()):
    base = {"collectionNames": list(known[:1]) or ["missing"]}
    alts = {
        "database": name_like,
        "collectionNames": st.one_of(
            st.lists(st.one_of(name_like, st.sampled_from(list(known) or ["x"])), max_size=3), junk
        ),
        "ttlSecondsAfterFinished": number_like,
    }
    if draw(st.integers(0, 14)) == 0:
        return draw(junk)
    return draw(_mutate(base, alts))


@st.composite
def segment_spec(draw):
    base = {"segmentID": 1, "collectionID": 1, "channel": "ch", "collection": "c", "partitionID": 1, "partition": "p"}
    alts = {k: number_like if k.endswith("ID") else st.one_of(name_like, junk) for k in base}
    if draw(st.integers(0, 14)) == 0:
        return draw(junk)
    return draw(_mutate(base, alts))
