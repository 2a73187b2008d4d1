"""The group coordinator: classic consumer groups (JoinGroup/SyncGroup/Heartbeat/LeaveGroup),
committed offsets, and the admin APIs over them. `coordinator.GroupCoordinator` is the sans-IO
core; `apis.GroupCoordinatorApis` turns kio requests into core calls."""
