"""Builds: converting a loader's episodes into the on-disk lean TED format, and reading them back.

``format`` owns the on-disk layout, ``writer`` writes it, ``checks`` verifies it when a build is opened,
``storage`` is the read-only storage over a build, ``pipeline`` runs a build end to end.
"""
