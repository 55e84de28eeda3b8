"""Automatic failover of a broker group on etcd (issue 16): etcd decides which replica is master, the HA plugin's
classes still move the data. :mod:`.plugin` (the hooks, and the list of the package's modules), :mod:`.etcd` (a
trio client for etcd's v3 JSON gateway), :mod:`.local_etcd` (a local etcd process for tests and ``pyrmq dev --ha``).
docs/replication.md, "Automatic failover on etcd", describes it.
"""
