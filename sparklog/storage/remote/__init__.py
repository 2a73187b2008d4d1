"""The remote tier of a topic: a Delta table (KIP-405 with Kafka's setting names; DESIGN D17).

Modules:
- `config`     broker settings of the remote log manager (`remote.log.*`, `remote.table.root`)
- `schema`     the table's columns, its Arrow schema, app-transaction ids, commit metadata
- `tier`       the contract the broker and Spark use: `TopicTable`, `SegmentUpload`,
               `RemoteRead`, the tier's errors
- `table`      the one importer of `deltalake` for the tier: `DeltaTopicTable`
- `codec`      batches <-> rows (record-identical rebuild), vectorized over Arrow
- `files`      which data files a request needs, from their add actions' statistics
- `scans`      reading chosen data files: fetch rows, timestamps, epochs, producer states
- `rows`       row-level helpers: upload checks, read ordering and sizing, follower state
- `values`     typed values (remote.table.value.format json|avro): value_typed, value_error
"""
