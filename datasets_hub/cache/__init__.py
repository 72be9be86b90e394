"""The cache: its layout and locks, listing, verification and maintenance (``prune``, ``rm``)."""
