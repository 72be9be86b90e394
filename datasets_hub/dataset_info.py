"""``DatasetInfo``, the dataset card that ``datasets_hub.info`` returns.

A module of its own, importing nothing heavy: ``datasets-hub info`` builds cards from recorded facts
without importing torch (:mod:`datasets_hub.cache.catalogue_builds`).
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from datasets_hub.errors import InvalidParameter, MissingDependency


@dataclass(repr=False)
class DatasetInfo:
    """The dataset card: what a dataset is, where it comes from, and (once built) what it holds.

    Its ``repr`` is a short summary (a few lines); every field is an attribute, and
    ``datasets-hub info ID`` prints the whole card."""

    id: str
    loader: str
    params: dict[str, Any]
    resources: list[dict[str, Any]]
    metadata: dict[str, Any]
    source: str
    cached: bool
    build_path: Path | None = None
    raw_bytes: int = 0
    built_bytes: int = 0
    manifest: dict[str, Any] = field(default_factory=dict)
    #: the keys one sampled transition has: ``{"next/reward": {"dtype": "float32", "shape": [1]}, ...}``
    #: (per-row shapes; a batch of B adds a leading B). Empty until the dataset is built.
    sample_keys: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def from_build(
        cls,
        spec: Any,
        resources: list[dict[str, Any]],
        path: Path,
        manifest: dict[str, Any] | None,
        *,
        raw_bytes: int,
        built_bytes: int,
        sample_keys: dict[str, dict[str, Any]],
    ) -> DatasetInfo:
        """The card of ``spec`` (a ``DatasetSpec``) whose build is at ``path`` (``manifest``: ``None`` when
        not built), every URL in it redacted: the one place ``info`` and its torch-free twin make it."""
        from datasets_hub.redact import redact_value

        return cls(
            id=spec.id,
            loader=spec.loader,
            params=redact_value(spec.params),
            resources=[redact_value(r) for r in resources],
            metadata=redact_value(spec.metadata),
            source=spec.source,
            cached=manifest is not None,
            build_path=path if manifest is not None else None,
            raw_bytes=raw_bytes,
            built_bytes=built_bytes,
            manifest=redact_value(manifest or {}),
            sample_keys=sample_keys,
        )

    def __repr__(self) -> str:
        def short(value: Any, limit: int = 90) -> str:
            text = repr(value)
            return text if len(text) <= limit else text[: limit - 1] + "…"

        lines = [f"DatasetInfo({self.id!r}, loader={self.loader!r}, cached={self.cached},"]
        lines.append(f"    params={short(self.params)},")
        if self.description:
            lines.append(f"    description={short(self.description)},")
        if self.cached:
            counts = self.counts
            lines.append(
                f"    transitions={counts.get('transitions')}, episodes={counts.get('episodes')}, "
                f"keys={len(self.sample_keys)}, built_bytes={self.built_bytes},"
            )
            lines.append(f"    build_path={short(str(self.build_path))},")
        lines.append(f"    resources={len(self.resources)}, source={short(self.source, 60)})")
        return "\n".join(lines)

    @property
    def environment(self) -> dict[str, Any]:
        """What the card records of the environment the data was collected in (``{}`` when nothing, or
        not built yet). Keys, each present only when upstream makes it known:

        - ``env_spec``, ``eval_env_spec``, ``observation_space``, ``action_space``: gymnasium's JSON forms
          (the ``gym`` loader, which made the environment; Minari, which records them);
        - ``env_id``, ``registry`` (``"gymnasium"`` or ``"gym"``) and ``registered_by`` (the package whose
          import registers the id): upstream's own id for the environment, e.g. ``"hopper-medium-v2"``
          registered by ``d4rl`` in gym, ``"antmaze-large-v0"`` by ``ogbench`` in gymnasium;
        - ``make_kwargs`` and ``wrappers`` (``[{"entry_point": "module:Name", "kwargs": {...}}]``): how to
          make it with the settings the data was collected with (Atari's sticky actions, frame skip, ...);
        - ``make_with``: how upstream makes an environment gymnasium cannot (robomimic's env metadata,
          ``env_meta``, through robomimic); ``collected_with``: upstream's description of the environment.
        """
        note = self.notes.get("environment")
        if isinstance(note, dict):
            return note
        for note in self.notes.values():  # Minari's metadata note
            if isinstance(note, dict) and ("observation_space" in note or "action_space" in note):
                keys = ("observation_space", "action_space", "env_spec", "eval_env_spec")
                return {k: note[k] for k in keys if note.get(k) is not None}
        return {}

    @property
    def spaces(self) -> dict[str, Any]:
        """Upstream's observation and action spaces and env specs (gymnasium's JSON forms), where the card
        records them (:attr:`environment`); ``{}`` otherwise. Known only once built."""
        keys = ("observation_space", "action_space", "env_spec", "eval_env_spec")
        return {k: self.environment[k] for k in keys if self.environment.get(k) is not None}

    def recover_environment(self, eval_env: bool = False, **kwargs: Any) -> Any:
        """The environment the dataset was collected in, made again with gymnasium: ``gymnasium.make`` of
        the recorded env spec, as Minari does (``eval_env=True``: the evaluation env spec, falling back to
        the collection one), else of the recorded gymnasium id with its recorded settings and wrappers
        (:attr:`environment`); ``kwargs`` go to ``gymnasium.make``. Needs gymnasium and the environment's
        package; an environment gymnasium cannot make (D4RL's, registered in the old gym) is refused,
        saying how it was made."""
        env = self.environment
        spec = self.spaces.get("eval_env_spec") if eval_env else None
        spec = spec or self.spaces.get("env_spec")
        if spec is None and not env.get("env_id"):
            raise InvalidParameter(
                f"{self.id!r} records no environment spec"
                + ("" if self.cached else " (or is not built yet: download it)")
            )
        if spec is None and env.get("registry") != "gymnasium":
            how = env.get("make_with") or f"import {env.get('registered_by')}; gym.make({env['env_id']!r})"
            raise InvalidParameter(
                f"{self.id!r} was collected in {env['env_id']!r} ({env.get('registry')}), which gymnasium cannot "
                f"make; make it with `{how}`"
            )
        try:
            import gymnasium
            from gymnasium.envs.registration import EnvSpec, load_env_creator
        except ImportError as exc:
            raise MissingDependency(f"recover_environment needs gymnasium ({exc}). Fix: pip install gymnasium") from exc
        if spec is not None:
            return gymnasium.make(EnvSpec.from_json(spec if isinstance(spec, str) else json.dumps(spec)), **kwargs)
        package = str(env.get("registered_by") or "")
        try:
            if package:
                importlib.import_module(package)  # registers its ids with gymnasium
            made: Any = gymnasium.make(env["env_id"], **{**env.get("make_kwargs", {}), **kwargs})
            for wrapper in env.get("wrappers", []):
                wrap: Any = load_env_creator(wrapper["entry_point"])  # a wrapper class, not an env creator
                made = wrap(made, **wrapper.get("kwargs", {}))
        except ImportError as exc:
            raise MissingDependency(
                f"recover_environment({self.id!r}) needs the package that makes {env['env_id']!r} ({exc}). "
                f"Fix: pip install {package.replace('_', '-') or 'it'}"
            ) from exc
        return made

    @property
    def counts(self) -> dict[str, int]:
        return self.manifest.get("counts", {})

    @property
    def schema(self) -> dict[str, Any]:
        return self.manifest.get("schema", {})

    @property
    def stats(self) -> dict[str, Any]:
        return self.manifest.get("stats", {})

    @property
    def feature_stats(self) -> dict[str, dict[str, Any]] | None:
        """Per-key statistics recorded while building (mean, std, min, max, q01, q99; see
        :mod:`datasets_hub.buffers.feature_stats`), e.g. ``card.feature_stats["action"]["mean"]``.
        None when the dataset is not built, or was built before statistics were recorded (rebuild with
        ``download(id, force=True)``, or compute them with
        :func:`~datasets_hub.buffers.feature_stats.compute_feature_stats` over ``load(id).storage``)."""
        features = self.stats.get("features")
        return features if isinstance(features, dict) else None

    def lerobot_stats(self) -> dict[str, dict[str, Any]] | None:
        """:attr:`feature_stats` in the layout of LeRobot's ``meta/stats.json`` (None as there)."""
        from datasets_hub.buffers.feature_stats import lerobot_stats

        features = self.feature_stats
        return None if features is None else lerobot_stats(features)

    @property
    def notes(self) -> dict[str, Any]:
        return self.manifest.get("notes", {})

    @property
    def frames(self) -> dict[str, Any]:
        """Per compressed camera key: codec, quality, stored and decoded bytes, and the PSNR (dB) of the
        stored frames against the frames the loader handed over (measured on every 16th row at build
        time); ``{}`` for a build whose frames are raw (or a build not made yet)."""
        return self.stats.get("frames", {})

    @property
    def description(self) -> str:
        return str(self.metadata.get("description", ""))


def _sample_keys_record(build_path: Path) -> Path:
    from datasets_hub.env import cache_root

    return cache_root() / "catalogue" / "cards" / f"{build_path.parent.name}-{build_path.name}.json"


def recorded_sample_keys(build_path: Path, manifest: dict[str, Any]) -> dict[str, dict[str, Any]] | None:
    """The sample keys :func:`record_sample_keys` kept for this build (made by this version of the hub,
    with this manifest), or None."""
    from datasets_hub import __version__
    from datasets_hub.files import sha256_json

    try:
        record = json.loads(_sample_keys_record(build_path).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("hub") != __version__:
        return None
    if record.get("path") != str(build_path) or record.get("manifest") != sha256_json(manifest, default=str):
        return None
    keys = record.get("sample_keys")
    return keys if isinstance(keys, dict) else None


def record_sample_keys(build_path: Path, manifest: dict[str, Any], sample_keys: dict[str, dict[str, Any]]) -> None:
    """Keep the sample keys of a build (read with torch once) for cards made without torch. Builds
    never change once published; the record names the manifest it belongs to and the hub version."""
    from datasets_hub import __version__
    from datasets_hub.files import sha256_json, write_json_atomic

    record = {
        "hub": __version__,
        "path": str(build_path),
        "manifest": sha256_json(manifest, default=str),
        "sample_keys": sample_keys,
    }
    target = _sample_keys_record(build_path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(target, record, indent=None, sort_keys=False)
    except OSError:
        pass  # a read-only cache: torch is imported again next time, only slower
