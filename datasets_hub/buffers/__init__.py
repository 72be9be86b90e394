"""The replay-buffer layer: storages, samplers, writers, replay buffers, ensembles and transforms.

This package knows nothing of the hub (catalogue, downloads, builds, cache): it works on any data a user
writes into it, and the hub hands it read-only storages over converted builds. The public names are
re-exported by ``datasets_hub`` itself; import them from there.
"""
