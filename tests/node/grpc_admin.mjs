// Partitions, databases, aliases, users and roles through the SDK's gRPC client
// (tests/system/test_node_sdk.py).
import { MilvusClient, DataType } from '@zilliz/milvus2-sdk-node';
import { address, Recorder } from './lib.mjs';

const r = new Recorder();
const c = new MilvusClient({ address, logLevel: 'error' });
await c.connectPromise;
const name = 'node_admin';
const fields = [
  { name: 'id', data_type: DataType.Int64, is_primary_key: true },
  { name: 'vec', data_type: DataType.FloatVector, dim: 2 },
];
await r.step('create', () => c.createCollection({ collection_name: name, fields }));
// Partitions
await r.step('createPartition', () => c.createPartition({ collection_name: name, partition_name: 'p1' }));
await r.step('hasPartition', () => c.hasPartition({ collection_name: name, partition_name: 'p1' }));
await r.step('listPartitions', () => c.listPartitions({ collection_name: name }));
await r.step('insertP1', () =>
  c.insert({ collection_name: name, partition_name: 'p1', data: [{ id: 1, vec: [1, 1] }, { id: 2, vec: [2, 2] }] })
);
await r.step('insertDefault', () => c.insert({ collection_name: name, data: [{ id: 3, vec: [3, 3] }] }));
await r.step('flush', () => c.flushSync({ collection_names: [name] }));
await r.step('partitionStats', () => c.getPartitionStatistics({ collection_name: name, partition_name: 'p1' }));
await r.step('index', () => c.createIndex({ collection_name: name, field_name: 'vec', index_type: 'FLAT', metric_type: 'L2' }));
await r.step('loadPartitions', () => c.loadPartitionsSync({ collection_name: name, partition_names: ['p1'] }));
await r.step('queryP1', () =>
  c.query({ collection_name: name, filter: 'id > 0', output_fields: ['id'], partition_names: ['p1'] })
);
await r.step('releasePartitions', () => c.releasePartitions({ collection_name: name, partition_names: ['p1'] }));
await r.step('dropPartition', () => c.dropPartition({ collection_name: name, partition_name: 'p1' }));
await r.step('listPartitionsAfterDrop', () => c.listPartitions({ collection_name: name }));
// Aliases
await r.step('createAlias', () => c.createAlias({ collection_name: name, alias: 'node_alias' }));
await r.step('describeAlias', () => c.describeAlias({ collection_name: name, alias: 'node_alias' }));
await r.step('listAliases', () => c.listAliases({ collection_name: name }));
await r.step('describeByAlias', () => c.describeCollection({ collection_name: 'node_alias' }));
await r.step('dropAlias', () => c.dropAlias({ alias: 'node_alias' }));
// Databases: a collection in another database is invisible from the default one
await r.step('createDatabase', () => c.createDatabase({ db_name: 'node_db' }));
await r.step('listDatabases', () => c.listDatabases());
await r.step('describeDatabase', () => c.describeDatabase({ db_name: 'node_db' }));
await r.step('createInDb', () => c.createCollection({ collection_name: 'in_db', fields, db_name: 'node_db' }));
await r.step('showInDb', () => c.showCollections({ db_name: 'node_db' }));
await r.step('useDb', () => c.use({ db_name: 'node_db' }));
await r.step('showAfterUse', () => c.showCollections());
await r.step('useDefault', () => c.use({ db_name: 'default' }));
await r.step('showDefault', () => c.showCollections());
await r.step('dropInDb', () => c.dropCollection({ collection_name: 'in_db', db_name: 'node_db' }));
await r.step('dropDatabase', () => c.dropDatabase({ db_name: 'node_db' }));
// Users and roles (auth is off here: the RPCs still work, as in Milvus)
await r.step('createUser', () => c.createUser({ username: 'node_user', password: 'node_password' }));
await r.step('updateUser', () =>
  c.updateUser({ username: 'node_user', oldPassword: 'node_password', newPassword: 'node_password2' })
);
await r.step('listUsers', () => c.listUsers());
await r.step('createRole', () => c.createRole({ roleName: 'node_role' }));
await r.step('listRoles', () => c.listRoles());
await r.step('addUserToRole', () => c.addUserToRole({ username: 'node_user', roleName: 'node_role' }));
await r.step('grant', () =>
  c.grantRolePrivilege({ roleName: 'node_role', object: 'Collection', objectName: name, privilegeName: 'Search' })
);
await r.step('listGrants', () => c.listGrants({ roleName: 'node_role' }));
await r.step('selectUser', () => c.selectUser({ username: 'node_user', includeRoleInfo: true }));
await r.step('hasRole', () => c.hasRole({ roleName: 'node_role' }));
await r.step('revoke', () =>
  c.revokeRolePrivilege({ roleName: 'node_role', object: 'Collection', objectName: name, privilegeName: 'Search' })
);
await r.step('removeUserFromRole', () => c.removeUserFromRole({ username: 'node_user', roleName: 'node_role' }));
await r.step('dropRole', () => c.dropRole({ roleName: 'node_role' }));
await r.step('deleteUser', () => c.deleteUser({ username: 'node_user' }));
await r.step('drop', () => c.dropCollection({ collection_name: name }));
await c.closeConnection();
r.print();
