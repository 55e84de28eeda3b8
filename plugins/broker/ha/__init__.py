"""Master/slave replication (HA) wire-compatible with RocketMQ 4.x, as the broker's replicator plugin
(``pyrmq_make_replicator``): :mod:`.master` (HA listener, transfers, SYNC_MASTER wait), :mod:`.slave` (HA client,
metadata sync), :mod:`.plugin` (the hooks). docs/replication.md describes it.
"""
