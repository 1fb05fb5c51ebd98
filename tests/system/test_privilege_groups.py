"""Privilege groups (Milvus' RBAC v2): CreatePrivilegeGroup / DropPrivilegeGroup /
ListPrivilegeGroups / OperatePrivilegeGroup and OperatePrivilegeV2 through pymilvus, with auth on —
what they store, what they let a user do, and pymilvus' own rbac.py example, unchanged but for
its address, doing what its text says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from pymilvus import MilvusClient
from pymilvus.exceptions import MilvusException

from kmilvus.util.privileges import BUILTIN_PRIVILEGE_GROUPS

# shared/ lies beside the repository's checkout (CI, the main checkout) or beside its parent (a worktree).
EXAMPLES = next(
    (p / "shared" / "pymilvus-examples" for p in Path(__file__).resolve().parents if (p / "shared").is_dir()),
    Path("shared/pymilvus-examples"),
)
ROOT_PW = "Milvus"  # the password pymilvus' rbac.py logs in with


@pytest.fixture
def authed(node_factory):
    return node_factory(auth=True, root_password=ROOT_PW)


def _client(node, user: str = "root", password: str = ROOT_PW, **kw) -> MilvusClient:
    return MilvusClient(uri=node.uri, user=user, password=password, **kw)


def _groups(c: MilvusClient) -> dict[str, list[str]]:
    return {g["privilege_group"]: list(g["privileges"]) for g in c.list_privilege_groups()}


def test_custom_group_lifecycle(authed):
    c = _client(authed)
    groups = _groups(c)
    assert set(groups) == set(BUILTIN_PRIVILEGE_GROUPS)  # the nine built-in ones, nothing else yet
    assert list(groups["CollectionReadOnly"][:2]) == ["Query", "Search"]
    c.create_privilege_group("g1")
    with pytest.raises(MilvusException, match="already exists"):
        c.create_privilege_group("g1")
    for bad in ("", "%$", "a" * 300, "ClusterAdmin", "Insert"):
        with pytest.raises(MilvusException):
            c.create_privilege_group(bad)
    c.add_privileges_to_group("g1", ["Query", "Search"])
    c.add_privileges_to_group("g1", ["Query", "Load"])  # added once
    assert _groups(c)["g1"] == ["Query", "Search", "Load"]
    with pytest.raises(MilvusException, match="one level"):  # CreateCollection is a database privilege
        c.add_privileges_to_group("g1", ["CreateCollection"])
    with pytest.raises(MilvusException, match="not defined"):
        c.add_privileges_to_group("g1", ["NoSuchPrivilege"])
    c.remove_privileges_from_group("g1", ["Query"])
    assert _groups(c)["g1"] == ["Search", "Load"]
    c.create_role("r1")
    c.grant_privilege_v2("r1", "g1", "*", "*")
    with pytest.raises(MilvusException, match="used by role"):
        c.drop_privilege_group("g1")
    grants = c.describe_role("r1")["privileges"]
    assert [(g["object_type"], g["object_name"], g["db_name"], g["privilege"]) for g in grants] == [
        ("Global", "*", "*", "g1")
    ]
    c.revoke_privilege_v2("r1", "g1", "*", "*")
    c.drop_privilege_group("g1")
    c.drop_privilege_group("never_made")  # as Milvus: nothing to drop is no error
    assert "g1" not in _groups(c)


def test_v2_grant_levels(authed):
    c = _client(authed)
    c.create_role("lv")
    c.grant_privilege_v2("lv", "ClusterAdmin", "*", "*")
    for group, coll, db in (
        ("ClusterAdmin", "*", "db1"),
        ("DatabaseAdmin", "col1", "db1"),
        ("CollectionAdmin", "c", "*"),
    ):
        with pytest.raises(MilvusException, match=r"should be|specify database"):
            c.grant_privilege_v2("lv", group, coll, db)
    c.grant_privilege_v2("lv", "DatabaseAdmin", "*", "db1")
    c.grant_privilege_v2("lv", "CollectionAdmin", "col1", "db1")
    c.grant_privilege_v2("lv", "Insert", "*", "*")  # a single privilege keeps its object type
    got = {
        (g["object_type"], g["object_name"], g["db_name"], g["privilege"]) for g in c.describe_role("lv")["privileges"]
    }
    assert got == {
        ("Global", "*", "*", "ClusterAdmin"),
        ("Global", "*", "db1", "DatabaseAdmin"),
        ("Global", "col1", "db1", "CollectionAdmin"),
        ("Collection", "*", "*", "Insert"),
    }
    with pytest.raises(MilvusException, match="not found the privilege name"):
        c.grant_privilege_v2("lv", "NoSuchGroup", "*", "*")
    with pytest.raises(MilvusException):
        c.grant_privilege_v2("lv", "Insert", "*", "%$")


def test_a_group_grant_is_enforced_and_follows_the_group(authed):
    root = _client(authed)
    root.create_database("db1")
    _client(authed, db_name="db1").create_collection("c1", dimension=4)
    root.create_user("u1", "password1")
    root.create_role("reader")
    root.grant_role("u1", "reader")
    root.create_privilege_group("look")
    root.add_privileges_to_group("look", ["Query"])
    root.grant_privilege_v2("reader", "look", "*", "db1")
    root.grant_privilege_v2("reader", "DatabaseReadOnly", "*", "db1")
    u = _client(authed, "u1", "password1", db_name="db1")
    assert u.list_collections() == ["c1"]  # DatabaseReadOnly: ShowCollections in db1
    assert u.query("c1", filter="id >= 0", limit=1) == []  # the custom group's Query
    with pytest.raises(Exception, match="permission deny"):
        u.search("c1", [[0.0] * 4], limit=1)
    root.add_privileges_to_group("look", ["Search"])  # in force at once for every holder
    assert u.search("c1", [[0.0] * 4], limit=1) == [[]]
    with pytest.raises(Exception, match="permission deny"):
        u.create_collection("c2", dimension=4)
    root.revoke_privilege_v2("reader", "look", "*", "db1")
    with pytest.raises(Exception, match="permission deny"):
        u.query("c1", filter="id >= 0", limit=1)


def test_pymilvus_rbac_example(authed, tmp_path):
    """pymilvus' examples/rbac.py, address edited only: it passes, and leaves what its text says."""
    script = tmp_path / "rbac.py"
    script.write_text(
        re.sub(r"localhost:19530", authed.uri.removeprefix("http://"), (EXAMPLES / "rbac.py").read_text())
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    c = _client(authed)
    out = proc.stdout
    assert (
        "users: ['root', 'user1', 'user2', 'user3']" in out
        and "after drop opeartion, users: ['root', 'user1', 'user2']" in out
    )
    # Each role got the grant it was given: v2 groups at their level, v1 privileges by object type.
    assert (
        "'object_name': 'col1', 'db_name': 'db1', 'role_name': 'collection_readwrite', "
        "'privilege': 'CollectionReadWrite'" in out
    )
    assert "'db_name': '*', 'role_name': 'cluster_admin', 'privilege': 'ClusterAdmin'" in out
    assert "'db_name': 'db1', 'role_name': 'database_readonly', 'privilege': 'DatabaseReadOnly'" in out
    assert "'role_name': 'custom_role', 'privilege': 'custom_privilege_group'" in out
    assert "'roles': ('cluster_admin', 'database_readonly', 'db_ro')" in out  # user2 after the revoke
    # At its end it revokes the v2 grants, drops those roles, the group and the users; db_rw and
    # db_ro stay, with their v1 grants.
    assert c.list_users() == ["root"]
    assert set(c.list_roles()) == {"admin", "public", "db_rw", "db_ro"}
    assert len(c.describe_role("db_rw")["privileges"]) == 11
    assert len(c.describe_role("db_ro")["privileges"]) == 4
    assert "custom_privilege_group" not in _groups(c)
