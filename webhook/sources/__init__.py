"""Cluster state as immutable snapshots: the snapshot store, the reflector, the file source.

The only package that imports the `kubernetes` client. It may import the core.
"""
