// The RPCs Attu's server makes through this SDK (zilliztech/attu server/src: milvus.service.ts
// connectMilvus, collections.service.ts, users.service.ts, databases, partitions, system page),
// in Attu's order, against kmilvus with auth on (tests/system/test_attu.py).
import { MilvusClient, DataType } from '@zilliz/milvus2-sdk-node';
import { address, Recorder } from './lib.mjs';

const [username, password] = process.argv.slice(4);
const r = new Recorder();
const c = new MilvusClient({ address, username, password, logLevel: 'error' });
// connectMilvus: connect, checkHealth, use the database, ListDatabases permission check, use again
await r.step('connect', async () => (await c.connectPromise, c.connectStatus));
await r.step('checkHealth', () => c.checkHealth());
await r.step('use', () => c.use({ db_name: 'default' }));
await r.step('listDatabases', () => c.listDatabases());
await r.step('describeDatabase', () => c.describeDatabase({ db_name: 'default' }));
// a collection to look at, as Attu creates one
const name = 'attu_coll';
await r.step('createCollection', () =>
  c.createCollection({
    collection_name: name,
    fields: [
      { name: 'id', data_type: DataType.Int64, is_primary_key: true },
      { name: 'vec', data_type: DataType.FloatVector, dim: 4 },
      { name: 'color', data_type: DataType.VarChar, max_length: 16 },
    ],
    enable_dynamic_field: true,
  })
);
const rows = Array.from({ length: 30 }, (_, i) => ({ id: i, vec: [i, 1, 2, 3], color: i % 2 ? 'red' : 'blue' }));
await r.step('insert', () => c.insert({ collection_name: name, data: rows }));
await r.step('flush', () => c.flushSync({ collection_names: [name] }));
await r.step('createIndex', () =>
  c.createIndex({ collection_name: name, field_name: 'vec', index_type: 'IVF_FLAT', metric_type: 'L2', params: { nlist: 4 } })
);
await r.step('loadCollectionSync', () => c.loadCollectionSync({ collection_name: name }));
// collections page (getAllCollections → getCollection)
await r.step('showCollections', () => c.showCollections({ db_name: 'default' }));
await r.step('showLoadedCollections', () => c.showCollections({ type: 1, db_name: 'default' }));
await r.step('describeCollection', () => c.describeCollection({ collection_name: name, db_name: 'default' }));
await r.step('describeIndex', () => c.describeIndex({ collection_name: name }));
await r.step('getLoadState', () => c.getLoadState({ collection_name: name, db_name: 'default' }));
await r.step('count', () => c.count({ collection_name: name, db_name: 'default' }));
await r.step('getCollectionStatistics', () => c.getCollectionStatistics({ collection_name: name }));
await r.step('getReplicas', () => c.getReplicas({ collectionID: r.out.describeCollection.value.collectionID }));
// data and search pages
await r.step('query', () => c.query({ collection_name: name, filter: 'color == "red"', output_fields: ['*'], limit: 5 }));
await r.step('search', () =>
  c.search({ collection_name: name, data: [[3, 1, 2, 3]], anns_field: 'vec', limit: 3, params: { nprobe: 4 }, output_fields: ['color'] })
);
await r.step('upsert', () => c.upsert({ collection_name: name, data: [{ id: 1, vec: [0, 0, 0, 0], color: 'green' }] }));
await r.step('deleteEntities', () => c.deleteEntities({ collection_name: name, filter: 'id in [2]' }));
// partitions page
await r.step('createPartition', () => c.createPartition({ collection_name: name, partition_name: 'attu_p' }));
await r.step('showPartitions', () => c.showPartitions({ collection_name: name }));
await r.step('getPartitionStatistics', () => c.getPartitionStatistics({ collection_name: name, partition_name: '_default' }));
// segments page
await r.step('getQuerySegmentInfo', () => c.getQuerySegmentInfo({ collectionName: name }));
await r.step('getPersistentSegmentInfo', () => c.getPersistentSegmentInfo({ collectionName: name }));
await r.step('compact', () => c.compact({ collection_name: name }));
await r.step('getCompactionState', () => c.getCompactionState({ compactionID: r.out.compact.value.compactionID }));
// aliases, rename
await r.step('createAlias', () => c.createAlias({ collection_name: name, alias: 'attu_alias' }));
await r.step('dropAlias', () => c.dropAlias({ alias: 'attu_alias' }));
// system page
await r.step('getMetric', () => c.getMetric({ request: { metric_type: 'system_info' } }));
await r.step('listResourceGroups', () => c.listResourceGroups());
await r.step('describeResourceGroup', () => c.describeResourceGroup({ resource_group: '__default_resource_group' }));
// users and roles pages
await r.step('createUser', () => c.createUser({ username: 'attu_user', password: 'attu_password' }));
await r.step('listUsers', () => c.listUsers());
await r.step('selectUser', () => c.selectUser({ username: 'attu_user', includeRoleInfo: true }));
await r.step('createRole', () => c.createRole({ roleName: 'attu_role' }));
await r.step('addUserToRole', () => c.addUserToRole({ username: 'attu_user', roleName: 'attu_role' }));
await r.step('listRoles', () => c.listRoles({ includeUserInfo: true }));
await r.step('hasRole', () => c.hasRole({ roleName: 'attu_role' }));
await r.step('listPrivilegeGroups', () => c.listPrivilegeGroups());
await r.step('createPrivilegeGroup', () => c.createPrivilegeGroup({ group_name: 'attu_group' }));
await r.step('addPrivilegesToGroup', () => c.addPrivilegesToGroup({ group_name: 'attu_group', privileges: ['Query', 'Search'] }));
await r.step('grantPrivilegeV2', () =>
  c.grantPrivilegeV2({ role: 'attu_role', privilege: 'attu_group', db_name: 'default', collection_name: '*' })
);
await r.step('grantRolePrivilege', () =>
  c.grantRolePrivilege({ roleName: 'attu_role', object: 'Collection', objectName: name, privilegeName: 'Insert' })
);
await r.step('listGrants', () => c.listGrants({ roleName: 'attu_role' }));
// Attu's revokeAllRolePrivileges: revokePrivilegeV2 of every listed grant
await r.step('revokeAll', async () => {
  for (const g of r.out.listGrants.value.entities) {
    const res = await c.revokePrivilegeV2({
      role: g.role.name,
      privilege: g.grantor.privilege.name,
      db_name: g.db_name,
      collection_name: g.object_name,
    });
    if (res.error_code !== 'Success') throw new Error(JSON.stringify(res));
  }
  return (await c.listGrants({ roleName: 'attu_role' })).entities.length;
});
await r.step('removePrivilegesFromGroup', () =>
  c.removePrivilegesFromGroup({ group_name: 'attu_group', privileges: ['Search'] })
);
await r.step('dropPrivilegeGroup', () => c.dropPrivilegeGroup({ group_name: 'attu_group' }));
await r.step('updateUser', () => c.updateUser({ username: 'attu_user', oldPassword: 'attu_password', newPassword: 'attu_password2' }));
await r.step('removeUserFromRole', () => c.removeUserFromRole({ username: 'attu_user', roleName: 'attu_role' }));
await r.step('dropRole', () => c.dropRole({ roleName: 'attu_role' }));
await r.step('deleteUser', () => c.deleteUser({ username: 'attu_user' }));
// clean up as the collection page does
await r.step('releaseCollection', () => c.releaseCollection({ collection_name: name }));
await r.step('dropPartition', () => c.dropPartition({ collection_name: name, partition_name: 'attu_p' }));
await r.step('dropCollection', () => c.dropCollection({ collection_name: name }));
await c.closeConnection();
r.print();
