"""Plugins of the client library (bundle ``configs/client.toml``): queue allocation strategies for rebalance."""
