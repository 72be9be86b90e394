"""Cached, fingerprinted preprocessing of a build (``rb.preprocess(fn)``), run in parallel workers."""
