"""``check_loader``: the whole plugin contract (docs/design/plugins.md), checked for a plugin author.

Two forms (both raise ``AssertionError`` naming the loader, the stage and the problem):

- ``check_loader(cls, spec=None, files=None)``: the class (name, requires, install_hint,
  format_version, the entry point it is registered under, ``catalogue()``), then, with a ``spec``,
  its conversion of ``files`` run ``runs`` times (default 3): every chunk is checked against the
  TED contract (:mod:`datasets_hub.ted_contract` and the layout rules of the build writer), must
  not change after it was yielded, and must not print; every run must yield the same data in the
  same chunks (a build is fingerprinted by its inputs, so its output must be deterministic).
- ``check_loader("prefix/name")``: a catalogue entry end to end, as a user gets it: resolve the
  id, find the entry point, check the class, fetch the resources, build, check the conversion on
  the fetched files, load, and sample a batch whose keys, shapes and dtypes follow TED.
"""

from __future__ import annotations

import contextlib
import io
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import torch
from tensordict import TensorDictBase

from datasets_hub.build.writer import LeanTEDWriter, equal_rows
from datasets_hub.loader import DatasetSpec, Loader, LoaderContext, Resource
from datasets_hub.ted_contract import check_chunk, observation_keys

_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")


def check_loader(
    target: type[Loader] | str,
    spec: DatasetSpec | None = None,
    files: Mapping[str, Path] | None = None,
    *,
    max_chunks: int | None = None,
    runs: int = 3,
    params: Mapping[str, Any] | None = None,
    batch_size: int = 8,
) -> dict[str, Any]:
    """Check a loader class (with ``spec``/``files``: its conversion) or, given an id string, a
    catalogue entry end to end (``params`` override the catalogue's); see the module docstring.
    Returns the build summary (counts, episode stats), plus ``id``, ``build_path`` and
    ``sample_keys`` for an id. ``max_chunks`` limits each conversion run to its first chunks."""
    if isinstance(target, str):
        return _check_entry(target, dict(params or {}), runs=runs, max_chunks=max_chunks, batch_size=batch_size)
    check_class(target)
    if spec is None:
        return {}
    return check_conversion(target(), spec, files or {}, runs=runs, max_chunks=max_chunks)


def check_class(cls: Any) -> None:
    """The class attributes, the entry point's name and ``catalogue()``."""
    if not (isinstance(cls, type) and issubclass(cls, Loader)):
        raise AssertionError(f"{cls!r} is not a datasets_hub.Loader subclass")
    if not _NAME_RE.match(cls.name or ""):
        raise AssertionError(f"{cls.__name__}.name = {cls.name!r}: a loader needs a lower-case name (the id prefix)")
    if not isinstance(cls.requires, tuple) or not all(isinstance(r, str) for r in cls.requires):
        raise AssertionError(f"{cls.__name__}.requires must be a tuple of import names")
    if cls.requires and not cls.install_hint.startswith("pip install"):
        raise AssertionError(f"{cls.__name__}.install_hint must be the exact 'pip install …' line for {cls.requires}")
    if not isinstance(cls.format_version, int) or isinstance(cls.format_version, bool) or cls.format_version < 1:
        raise AssertionError(f"{cls.__name__}.format_version must be a positive int")
    if cls.auto_frames not in ("jpeg", "png"):
        raise AssertionError(f"{cls.__name__}.auto_frames must be 'jpeg' or 'png', got {cls.auto_frames!r}")
    from datasets_hub.plugins import entry_point_names_of

    for registered in entry_point_names_of(cls):
        if registered != cls.name:
            raise AssertionError(
                f"{cls.__name__} is registered as entry point {registered!r} but declares name {cls.name!r}: "
                "the entry-point name, Loader.name and the id prefix must be equal"
            )
    catalogue = cls().catalogue()
    if not isinstance(catalogue, Mapping):
        raise AssertionError(f"{cls.__name__}.catalogue() returned {type(catalogue).__name__}; it must be a dict")
    for dataset_id, entry in catalogue.items():
        if not str(dataset_id).startswith(cls.name + "/"):
            raise AssertionError(
                f"{cls.__name__}.catalogue() lists {dataset_id!r}, outside its prefix {cls.name + '/'!r}"
            )
        if not isinstance(entry, Mapping):
            raise AssertionError(f"{cls.__name__}.catalogue()[{dataset_id!r}] must be a dict (params, resources, …)")


def check_conversion(
    loader: Loader, spec: DatasetSpec, files: Mapping[str, Path], *, runs: int = 3, max_chunks: int | None = None
) -> dict[str, Any]:
    """Convert ``files`` ``runs`` times into temporary directories; see the module docstring."""
    name = type(loader).__name__
    loader.check_params(spec)
    first: tuple[list[int], TensorDictBase] | None = None
    summary: dict[str, Any] = {}
    for run in range(1, max(1, runs) + 1):
        sizes, data, summary = _convert_once(loader, spec, files, max_chunks)
        if first is None:
            first = (sizes, data)
            continue
        if sizes != first[0]:
            raise AssertionError(
                f"{name}.episodes is not deterministic: run 1 yielded chunks of {first[0][:8]} rows, run {run} "
                f"{sizes[:8]} (the same inputs must give the same chunks in the same order)"
            )
        differing = _first_difference(first[1], data)
        if differing is not None:
            raise AssertionError(
                f"{name}.episodes is not deterministic: runs 1 and {run} differ at {differing!r} (the same inputs "
                "must give the same data in the same order)"
            )
    return summary


def _convert_once(
    loader: Loader, spec: DatasetSpec, files: Mapping[str, Path], max_chunks: int | None
) -> tuple[list[int], TensorDictBase, dict[str, Any]]:
    name = type(loader).__name__
    yielded: list[tuple[TensorDictBase, TensorDictBase]] = []
    printed = io.StringIO()
    with tempfile.TemporaryDirectory() as tmp:
        writer = LeanTEDWriter(Path(tmp) / "data")
        try:
            with contextlib.redirect_stdout(printed):
                for i, chunk in enumerate(loader.episodes(spec, files, LoaderContext(chunk_rows=1024))):
                    if max_chunks is not None and i >= max_chunks:
                        break
                    try:
                        check_chunk(chunk, loader.name, spec.id)
                        writer.write(chunk)
                    except ValueError as exc:  # TEDError
                        raise AssertionError(f"{name}.episodes, chunk {i}: {exc}") from exc
                    yielded.append((chunk, chunk.clone()))
            summary = writer.finish()
        finally:
            writer.close()
    if printed.getvalue():
        raise AssertionError(
            f"{name}.episodes printed {printed.getvalue()[:80]!r}: a loader never prints (record facts for the "
            "dataset card with ctx.note(key, value))"
        )
    if not yielded:
        raise AssertionError(f"{name}.episodes yielded no chunk for {spec.id!r}")
    for i, (chunk, copy) in enumerate(yielded):
        differing = _first_difference(copy, chunk)
        if differing is not None:
            raise AssertionError(
                f"{name}.episodes changed chunk {i} at {differing!r} after yielding it (the core may still be "
                "writing it in the background): yield a chunk you no longer modify"
            )
    data = cast(TensorDictBase, torch.cat(cast(Any, [c for _, c in yielded])))  # torch's stubs know only tensors
    return [c.batch_size[0] for c, _ in yielded], data, summary


def _first_difference(a: TensorDictBase, b: TensorDictBase) -> str | None:
    keys_a, keys_b = set(a.keys(True, True)), set(b.keys(True, True))
    if keys_a != keys_b:
        return f"keys {sorted(map(str, keys_a ^ keys_b))}"
    for key in sorted(keys_a, key=str):
        x, y = a.get(key), b.get(key)
        if x.shape != y.shape or x.dtype != y.dtype or not equal_rows(x, y):
            return "/".join(key) if isinstance(key, tuple) else key
    return None


def _stage(dataset_id: str, stage: str, exc: BaseException) -> AssertionError:
    return AssertionError(f"check_loader({dataset_id!r}) failed at {stage}: {type(exc).__name__}: {exc}")


def _check_entry(
    dataset_id: str, params: dict[str, Any], *, runs: int, max_chunks: int | None, batch_size: int
) -> dict[str, Any]:
    from datasets_hub.build.pipeline import build
    from datasets_hub.catalogue import resolve
    from datasets_hub.hub import fetch_sources, load
    from datasets_hub.plugins import check_requirements, get_loader

    try:
        spec = resolve(dataset_id, **params)
    except Exception as exc:
        raise _stage(dataset_id, "resolve (the catalogue)", exc) from exc
    try:
        loader = get_loader(spec.loader)
        check_requirements(loader)
    except Exception as exc:
        raise _stage(dataset_id, "the entry point", exc) from exc
    check_class(type(loader))
    try:
        loader.check_params(spec)
        resources = loader.resources(spec)
        if not isinstance(resources, list) or not all(isinstance(r, Resource) for r in resources):
            raise AssertionError(f"{type(loader).__name__}.resources(spec) must return a list of datasets_hub.Resource")
        files, sources = fetch_sources(spec, loader)
    except Exception as exc:
        raise _stage(dataset_id, "fetch", exc) from exc
    try:
        path = build(spec, loader, files, sources)
    except Exception as exc:
        raise _stage(dataset_id, "build", exc) from exc
    summary = check_conversion(loader, spec, files, runs=runs, max_chunks=max_chunks)
    try:
        rb = load(dataset_id, batch_size=batch_size, generator=torch.Generator().manual_seed(0), **params)
        batch = rb.sample()
    except Exception as exc:
        raise _stage(dataset_id, "load and sample", exc) from exc
    _check_sample(dataset_id, batch, batch_size)
    keys = sorted("/".join(k) if isinstance(k, tuple) else k for k in batch.keys(True, True))
    return {**summary, "id": dataset_id, "build_path": path, "sample_keys": keys}


def _check_sample(dataset_id: str, batch: TensorDictBase, b: int) -> None:
    def fail(message: str) -> AssertionError:
        return AssertionError(f"check_loader({dataset_id!r}): the sampled batch {message}")

    if tuple(batch.batch_size) != (b,):
        raise fail(f"has batch size {list(batch.batch_size)}, not [{b}]")
    for key, dtype in (
        (("next", "reward"), None),
        *((("next", f), torch.bool) for f in ("done", "terminated", "truncated")),
        *(((f,), torch.bool) for f in ("done", "terminated", "truncated")),
    ):
        value = batch.get(key, None)
        if value is None or tuple(value.shape) != (b, 1) or (dtype is not None and value.dtype != dtype):
            got = "missing" if value is None else f"{value.dtype} {list(value.shape)}"
            raise fail(f"has {'/'.join(key)} {got}; TED needs {dtype or 'a float'} [{b}, 1]")
    for name in ("episode", "step"):
        value = batch.get(name, None)
        if value is None or value.dtype != torch.int64 or value.shape[0] != b:
            raise fail(
                f"has {name} {'missing' if value is None else f'{value.dtype} {list(value.shape)}'}; TED needs int64"
            )
    keys = {(k,) if isinstance(k, str) else tuple(k) for k in batch.keys(True, True)}
    if not observation_keys(keys):
        raise fail("has no observation with a next/ counterpart")
