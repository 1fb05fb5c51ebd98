// The data path through the SDK's gRPC client: create / insert / flush / index / load /
// search / query / get / count / delete / release / drop (tests/system/test_node_sdk.py).
import { MilvusClient, DataType } from '@zilliz/milvus2-sdk-node';
import { address, Recorder } from './lib.mjs';

const r = new Recorder();
const c = new MilvusClient({ address, logLevel: 'error' });
await r.step('connect', async () => (await c.connectPromise, c.connectStatus));
await r.step('version', () => c.getVersion());
await r.step('health', () => c.checkHealth());
const name = 'node_crud';
await r.step('create', () =>
  c.createCollection({
    collection_name: name,
    fields: [
      { name: 'id', data_type: DataType.Int64, is_primary_key: true, autoID: false },
      { name: 'vec', data_type: DataType.FloatVector, dim: 4 },
      { name: 'tag', data_type: DataType.VarChar, max_length: 32 },
    ],
  })
);
await r.step('has', () => c.hasCollection({ collection_name: name }));
await r.step('describe', () => c.describeCollection({ collection_name: name }));
const rows = Array.from({ length: 20 }, (_, i) => ({ id: i, vec: [i, i + 1, i + 2, i + 3], tag: `t${i % 3}` }));
await r.step('insert', () => c.insert({ collection_name: name, data: rows }));
await r.step('flush', () => c.flushSync({ collection_names: [name] }));
await r.step('stats', () => c.getCollectionStatistics({ collection_name: name }));
await r.step('createIndex', () =>
  c.createIndex({ collection_name: name, field_name: 'vec', index_type: 'HNSW', metric_type: 'L2', params: { M: 8, efConstruction: 64 } })
);
await r.step('describeIndex', () => c.describeIndex({ collection_name: name, field_name: 'vec' }));
await r.step('load', () => c.loadCollectionSync({ collection_name: name }));
await r.step('loadState', () => c.getLoadState({ collection_name: name }));
// The SDK asks for output field `*` by default; with a list that leaves the primary key out,
// Milvus answers no `id` either (the SDK reads ids only from fields_data).
await r.step('search', () => c.search({ collection_name: name, data: [[5, 6, 7, 8]], limit: 3 }));
await r.step('searchTagOnly', () => c.search({ collection_name: name, data: [[5, 6, 7, 8]], limit: 3, output_fields: ['tag'] }));
await r.step('query', () => c.query({ collection_name: name, filter: 'id < 3', output_fields: ['id', 'tag', 'vec'] }));
await r.step('get', () => c.get({ collection_name: name, ids: [4, 5], output_fields: ['tag'] }));
await r.step('count', () => c.count({ collection_name: name }));
await r.step('delete', () => c.delete({ collection_name: name, filter: 'id in [1, 2]' }));
await r.step('queryAfterDelete', () =>
  c.query({ collection_name: name, filter: 'id < 4', output_fields: ['id'], consistency_level: 'Strong' })
);
await r.step('upsert', () => c.upsert({ collection_name: name, data: [{ id: 3, vec: [0, 0, 0, 0], tag: 'up' }] }));
await r.step('queryAfterUpsert', () =>
  c.query({ collection_name: name, filter: 'id == 3', output_fields: ['tag'], consistency_level: 'Strong' })
);
await r.step('release', () => c.releaseCollection({ collection_name: name }));
await r.step('drop', () => c.dropCollection({ collection_name: name }));
await r.step('hasAfterDrop', () => c.hasCollection({ collection_name: name }));
await c.closeConnection();
r.print();
