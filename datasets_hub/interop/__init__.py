"""Bridges from replay buffers to other frameworks: torch DataLoader and DDP, TorchRL, Ray.

Each module imports its framework on first use, so ``import datasets_hub`` never pays for them.
"""
