"""Deterministic simulation of sparklog replication (issue 5), FoundationDB/VOPR style.

The real sans-IO cores run on a simulated clock and network: the controller
(`QuorumController`: registration, heartbeats, leases, fencing, elections, AlterPartition,
preferred-leader balancing, controlled shutdown), each broker's `Partition` state machines,
`truncation_for`, `reset_for_out_of_range` and the `LeaderEpochFileCache` logic. The glue
that the asyncio broker does with them (metadata publishing, follower fetch state machine,
delayed produce/fetch, AlterPartition batching) is re-done here over simulated RPCs, following
`replica_manager.py`, `replica_fetcher.py` and `isr_manager.py`. One seed fixes the fault
schedule and every random choice, so a failure replays exactly from its number.

Run (from the repository root):

    .venv/bin/pytest tests/simulation -q -p no:cacheprovider            # seeds 0..499
    .venv/bin/pytest tests/simulation -q -p no:cacheprovider --sim-seeds=5000
    .venv/bin/pytest tests/simulation -q -p no:cacheprovider --sim-seed=K   # replay one

Modules: sim_network (clock, event queue, network, processes), sim_log (a replica's log),
sim_controller, sim_broker + sim_fetcher (brokers), workload (producers, consumer), faults
(schedules and their injection), checks (the properties), sim_cluster (one run).

Not modelled: record batches and bytes (one record per produce; the codec has its own tests),
segments, retention and compaction (logs start at 0), transactions, consumer groups, the
producer's InitProducerId round trip (ids come from a counter), KIP-903 broker epochs in
AlterPartition (the real broker does not send them either), reassignments, more than one
topic, controller failover to another node (a controller restart rebuilds from its log), a power
loss of the controller. Disk faults are: a kill keeps every write (the page cache survives), a
power loss keeps what the OS had written back plus a torn part of the rest, a disk loss loses
everything; clock jumps move a broker's wall clock (the controller's leases are monotonic).
"""
