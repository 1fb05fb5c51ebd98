// The SDK's HttpClient against kmilvus' RESTful API v2 (tests/system/test_node_sdk.py).
import { HttpClient } from '@zilliz/milvus2-sdk-node';
import { restUri, Recorder } from './lib.mjs';

const r = new Recorder();
const h = new HttpClient({ endpoint: restUri });
const collectionName = 'node_http';
await r.step('createCollection', () =>
  h.createCollection({
    collectionName,
    schema: {
      autoId: false,
      enabledDynamicField: false,
      fields: [
        { fieldName: 'id', dataType: 'Int64', isPrimary: true },
        { fieldName: 'vec', dataType: 'FloatVector', elementTypeParams: { dim: 4 } },
        { fieldName: 'tag', dataType: 'VarChar', elementTypeParams: { max_length: 32 } },
      ],
    },
    indexParams: [{ fieldName: 'vec', indexName: 'vec_idx', metricType: 'L2', indexType: 'FLAT' }],
  })
);
await r.step('hasCollection', () => h.hasCollection({ collectionName }));
await r.step('describeCollection', () => h.describeCollection({ collectionName }));
await r.step('listCollections', () => h.listCollections());
const data = Array.from({ length: 10 }, (_, i) => ({ id: i, vec: [i, i, i, i], tag: `t${i % 2}` }));
await r.step('insert', () => h.insert({ collectionName, data }));
await r.step('flush', () => h.flushCollection({ collectionName }));
await r.step('stats', () => h.getCollectionStatistics({ collectionName }));
await r.step('loadCollection', () => h.loadCollection({ collectionName }));
for (let i = 0; i < 600; i++) {
  const s = await h.getCollectionLoadState({ collectionName });
  if (s.data && s.data.loadState === 'LoadStateLoaded') break;
  await new Promise(res => setTimeout(res, 100));
}
await r.step('loadState', () => h.getCollectionLoadState({ collectionName }));
await r.step('describeIndex', () => h.describeIndex({ collectionName, indexName: 'vec_idx' }));
await r.step('listIndexes', () => h.listIndexes({ collectionName }));
await r.step('search', () =>
  h.search({ collectionName, data: [[2, 2, 2, 2]], limit: 2, outputFields: ['id', 'tag'] })
);
await r.step('query', () => h.query({ collectionName, filter: 'id < 3', outputFields: ['id', 'tag'] }));
await r.step('get', () => h.get({ collectionName, id: [7, 8], outputFields: ['id', 'tag'] }));
await r.step('upsert', () => h.upsert({ collectionName, data: [{ id: 1, vec: [9, 9, 9, 9], tag: 'up' }] }));
await r.step('delete', () => h.delete({ collectionName, filter: 'id in [2, 3]' }));
await r.step('queryAfter', () => h.query({ collectionName, filter: 'id < 4', outputFields: ['id', 'tag'] }));
await r.step('createAlias', () => h.createAlias({ collectionName, aliasName: 'node_http_alias' }));
await r.step('describeAlias', () => h.describeAlias({ aliasName: 'node_http_alias' }));
await r.step('listAliases', () => h.listAliases({}));
await r.step('dropAlias', () => h.dropAlias({ aliasName: 'node_http_alias' }));
await r.step('createDatabase', () => h.createDatabase({ dbName: 'node_http_db' }));
await r.step('listDatabases', () => h.listDatabases());
await r.step('describeDatabase', () => h.describeDatabase({ dbName: 'node_http_db' }));
await r.step('dropDatabase', () => h.dropDatabase({ dbName: 'node_http_db' }));
await r.step('createUser', () => h.createUser({ userName: 'node_http_user', password: 'node_password' }));
await r.step('listUsers', () => h.listUsers());
await r.step('createRole', () => h.createRole({ roleName: 'node_http_role' }));
await r.step('grantPrivilegeToRole', () =>
  h.grantPrivilegeToRole({ roleName: 'node_http_role', objectType: 'Collection', objectName: '*', privilege: 'Search' })
);
await r.step('describeRole', () => h.describeRole({ roleName: 'node_http_role' }));
await r.step('grantRoleToUser', () => h.grantRoleToUser({ userName: 'node_http_user', roleName: 'node_http_role' }));
await r.step('describeUser', () => h.describeUser({ userName: 'node_http_user' }));
await r.step('revokeRoleFromUser', () => h.revokeRoleFromUser({ userName: 'node_http_user', roleName: 'node_http_role' }));
await r.step('revokePrivilegeFromRole', () =>
  h.revokePrivilegeFromRole({ roleName: 'node_http_role', objectType: 'Collection', objectName: '*', privilege: 'Search' })
);
await r.step('dropRole', () => h.dropRole({ roleName: 'node_http_role' }));
await r.step('dropUser', () => h.dropUser({ userName: 'node_http_user' }));
await r.step('releaseCollection', () => h.releaseCollection({ collectionName }));
await r.step('createPartition', () => h.createPartition({ collectionName, partitionName: 'hp' }));
await r.step('listPartitions', () => h.listPartitions({ collectionName }));
await r.step('hasPartition', () => h.hasPartition({ collectionName, partitionName: 'hp' }));
await r.step('dropPartition', () => h.dropPartition({ collectionName, partitionName: 'hp' }));
await r.step('compact', () => h.compactCollection({ collectionName }));
// The compaction ID is an int64 past 2^53 that JSON.parse rounds (as it would from Milvus), so
// the state is asked for with the ID this script cannot know exactly: only the shape is checked.
await r.step('compactionState', () => h.getCompactionState({ jobID: 1 }));
await r.step('dropCollection', () => h.dropCollection({ collectionName }));
await r.step('hasAfterDrop', () => h.hasCollection({ collectionName }));
r.print();
