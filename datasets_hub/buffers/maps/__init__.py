"""Storage maps (TorchRL's ``torchrl.data.map``): hashes that turn entries into storage indices, a
TensorDict-keyed map over a storage, and the search trees (``Tree``, ``MCTSForest``) built on them.

The public names are re-exported by ``datasets_hub`` itself; import them from there.
"""
