"""RL Unplugged Atari (``rlu_atari/<Game>/<run>``, e.g. ``rlu_atari/Pong/1``) as TorchRL Episode Data.

Source: the episode shards TFDS's ``rlu_atari`` builder reads,
``gs://rl_unplugged/atari_episodes_ordered/<Game>/run_<run>-<i:05d>-of-<n:05d>``, fetched over
plain HTTPS from ``https://storage.googleapis.com/rl_unplugged/atari_episodes_ordered/…``
(``DATASETS_HUB_ENDPOINT_RLU_ATARI`` points at a mirror with the same paths; ``base_url`` replaces
the whole ``…/atari_episodes_ordered`` folder, e.g. ``file:///data/rlu``). 46 games x 5 runs; each
run is ``n = 50`` shards (49 for Carnival, Gravitar and StarGunner). The data are the DQN replay
logs of Agarwal et al. (2020) cut into whole episodes: the working replacement for the DQN Replay
bucket the ``atari`` loader reads, which was removed upstream.

Checked against tensorflow-datasets 4.9.10 (``rl_unplugged/atari_utils.py``, ``rlu_common.py``,
``rlu_atari`` 1.3.0): each shard is a GZIP-compressed TFRecord file; each record one episode, a
``tf.train.Example`` with

==============================  ======================  ==========================================
feature                         kind                    TED
==============================  ======================  ==========================================
``observations``                bytes, one PNG per       ``observation[t]`` = step t,
                                step (84x84 grey)        ``("next", "observation")[t]`` = step t+1;
                                                         uint8 ``[84, 84, 1]`` as TFDS declares it;
                                                         stored once per episode
``actions``                     int64 per step           ``action[t]`` (int64)
``unclipped_rewards``           float32 per step         ``("next", "reward")[t]``: TFDS's ``reward``.
                                                         Despite the name it is clipped to [-1, 1]
                                                         (TFDS's own note: the DQN agent clipped
                                                         before logging)
``clipped_rewards``             float32 per step         ``("info", "clipped_reward")[t]``
``discounts``                   float32 per step         ``("next", "discount")[t]`` = TFDS's step
                                                         ``discount``; the episode is terminal when
                                                         its last discount is 0, and TFDS then
                                                         shifts discounts one step earlier
``episode_idx``                 int64                    ``("info", "episode_idx")`` on every row
``checkpoint_idx``              int64                    ``("info", "checkpoint_idx")``
``episode_return``              float32 (sum of          ``("info", "episode_return")``
                                clipped rewards)
``clipped_episode_return``      float32                  ``("info", "clipped_episode_return")``
==============================  ======================  ==========================================

**Steps to transitions** (RLDS, as TFDS reads it): an episode of L steps gives L - 1 transitions.
Step t's observation, action and reward with step t + 1's observation as the next one. The last
step holds the final observation only: in a terminal episode it is the terminal state and its
action and reward are invalid (TFDS's words); in one that is not terminal the episode was cut
there and the step is RLDS's ``is_last`` step, whose action and reward "are considered invalid"
too. So nothing is fabricated and no row lacks its next observation. The last transition is
``("next", "terminated")`` when the last discount is 0, ``("next", "truncated")`` otherwise.
Episodes of one step give no transition (skipped, counted on the card).

**Parameters** (all in the build fingerprint): ``shards`` (shard indices to read, in that order;
default all), ``checkpoint_range`` (``[first, last]``: keep the episodes whose ``checkpoint_idx``
lies in it, inclusive; all shards listed are still downloaded, so combine it with ``shards`` to
download less), ``base_url``, ``game``/``run`` (default from the id). Episode ids are 0..E-1 in
reading order.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from datasets_hub.errors import CorruptFile, InvalidParameter, LoaderError, did_you_mean
from datasets_hub.loader import DatasetSpec, Loader, LoaderContext, Resource
from datasets_hub.loaders.formats.dopamine_atari import environment_card

if TYPE_CHECKING:  # torch is imported where used: `datasets-hub info/verify --param` import this module
    from tensordict import TensorDictBase

UPSTREAM = "https://storage.googleapis.com/rl_unplugged/atari_episodes_ordered"
GAMES = (
    "Alien", "Amidar", "Assault", "Asterix", "Atlantis", "BankHeist", "BattleZone", "BeamRider", "Boxing",
    "Breakout", "Carnival", "Centipede", "ChopperCommand", "CrazyClimber", "DemonAttack", "DoubleDunk", "Enduro",
    "FishingDerby", "Freeway", "Frostbite", "Gopher", "Gravitar", "Hero", "IceHockey", "Jamesbond", "Kangaroo",
    "Krull", "KungFuMaster", "MsPacman", "NameThisGame", "Phoenix", "Pong", "Pooyan", "Qbert", "Riverraid",
    "RoadRunner", "Robotank", "Seaquest", "SpaceInvaders", "StarGunner", "TimePilot", "UpNDown", "VideoPinball",
    "WizardOfWor", "YarsRevenge", "Zaxxon",
)  # fmt: skip
SHORT_GAMES = ("Carnival", "Gravitar", "StarGunner")  # one shard fewer (TFDS atari_utils.num_shards)
SHARDS = 50
RUNS = (1, 2, 3, 4, 5)
FRAME = (84, 84, 1)
#: steps a run logged: 50 DQN iterations of 1M agent steps each (Agarwal et al. 2020), cut into its shards
RUN_STEPS = 50_000_000
PARAMS = ("base_url", "checkpoint_range", "game", "run", "shards")
CHUNK_BYTES = 64 << 20
_REQUIRED = ("observations", "actions", "unclipped_rewards", "discounts")


def num_shards(game: str) -> int:
    """Shards per run of ``game`` (50, or 49 for the three short games)."""
    return SHARDS - 1 if game in SHORT_GAMES else SHARDS


def shard_file(game: str, run: int | str, index: int, total: int) -> str:
    """Upstream name of one shard, relative to ``atari_episodes_ordered/``."""
    return f"{game}/run_{run}-{index:05d}-of-{total:05d}"


class RLUAtariLoader(Loader):
    """Loader for RL Unplugged's Atari episodes (see the module docstring)."""

    name = "rlu_atari"
    requires = ("PIL", "google.protobuf")
    install_hint = "pip install 'datasets-hub[openx]'"
    format_version = 1
    #: above the raw limit, exact PNG: upstream stores every frame as a PNG already, and 84x84 grey game frames
    #: (a ball of one or two pixels) are where JPEG's 8x8 blocks change what an agent sees
    auto_frames = "png"

    def frame_bytes(self, spec: DatasetSpec) -> int:
        """An estimate, not a bound: a run's :data:`RUN_STEPS` spread evenly over its shards (1M steps of 84x84
        bytes a shard, 7.06 GB; 353 GB for a whole run), one stored frame per step (an episode of L steps
        stores its L frames once). The steps of a shard are only in its records; ``checkpoint_range`` can
        only lower the count."""
        game, _ = self.source(spec)
        per_shard = RUN_STEPS // num_shards(game)
        return len(self.shards(spec)) * per_shard * FRAME[0] * FRAME[1] * FRAME[2]

    # -- parameters -------------------------------------------------------------------------
    def check_params(self, spec: DatasetSpec) -> None:
        self.reject_unknown_params(spec, PARAMS)
        game, _ = self.source(spec)
        total = num_shards(game)
        shards = spec.params.get("shards")
        if shards is not None:
            if (
                not isinstance(shards, list)
                or not shards
                or not all(isinstance(s, int) and not isinstance(s, bool) for s in shards)
            ):
                raise InvalidParameter(
                    f"{spec.id}: shards must be a non-empty list of shard indices, e.g. [0, 1], got {shards!r}"
                )
            bad = [s for s in shards if not 0 <= s < total]
            if bad:
                raise InvalidParameter(f"{spec.id}: shard {bad[0]} does not exist: {game} has shards 0..{total - 1}")
            if len(set(shards)) != len(shards):
                raise InvalidParameter(f"{spec.id}: shards lists a shard twice: {shards}")
        self.checkpoint_range(spec)
        base = spec.params.get("base_url")
        if base is not None and (not isinstance(base, str) or "://" not in base):
            raise InvalidParameter(
                f"{spec.id}: base_url must be a URL of the folder holding <Game>/run_<r>-*-of-* shards, such as "
                f"'https://host/atari_episodes_ordered' or 'file:///data/rlu', got {base!r}"
            )

    @staticmethod
    def checkpoint_range(spec: DatasetSpec) -> tuple[int, int] | None:
        value = spec.params.get("checkpoint_range")
        if value is None:
            return None
        if (
            not isinstance(value, (list, tuple))
            or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
            or not 0 <= value[0] <= value[1]
        ):
            raise InvalidParameter(
                f"{spec.id}: checkpoint_range must be [first, last], two ints with 0 <= first <= last (both kept), "
                f"e.g. checkpoint_range=[40, 50], got {value!r}"
            )
        return int(value[0]), int(value[1])

    @staticmethod
    def source(spec: DatasetSpec) -> tuple[str, int]:
        """(game, run) of ``spec``: the ``game``/``run`` params, else the id ``rlu_atari/<Game>/<run>``."""
        parts = spec.name.split("/")
        game = spec.params.get("game", parts[0] if len(parts) == 2 else None)
        run = spec.params.get("run", parts[1] if len(parts) == 2 else None)
        if game not in GAMES:
            raise InvalidParameter(
                f"{spec.id}: {game!r} is not one of RL Unplugged's 46 Atari games; use an id "
                f"'rlu_atari/<Game>/<run>' such as 'rlu_atari/Pong/1'.{did_you_mean(str(game), GAMES)}"
            )
        if run is None or isinstance(run, bool) or str(run) not in {str(r) for r in RUNS}:
            raise InvalidParameter(f"{spec.id}: run must be 1..5 (five DQN runs per game), got {run!r}")
        return game, int(run)

    def shards(self, spec: DatasetSpec) -> list[int]:
        game, _ = self.source(spec)
        return list(spec.params.get("shards") or range(num_shards(game)))

    # -- what to fetch ------------------------------------------------------------------------
    def resources(self, spec: DatasetSpec) -> list[Resource]:
        self.check_params(spec)
        game, run = self.source(spec)
        base = str(spec.params.get("base_url") or UPSTREAM).rstrip("/")
        if base.startswith("gs://"):
            base = "https://storage.googleapis.com/" + base[len("gs://") :]
        total = num_shards(game)
        known = {r.name: r for r in spec.resources}  # catalogue entries may pin sha256/size
        out = []
        for i in self.shards(spec):
            file = shard_file(game, run, i, total)
            name = f"atari_episodes_ordered/{file}"
            out.append(known.get(name) or Resource(name=name, urls=(f"{base}/{file}",)))
        return out

    # -- conversion ---------------------------------------------------------------------------
    def episodes(self, spec: DatasetSpec, files: Mapping[str, Path], ctx: LoaderContext) -> Iterator[TensorDictBase]:
        from datasets_hub.loaders.formats.tf_example import parse_example
        from datasets_hub.loaders.formats.tfrecord import crc32c_implementation, iter_records

        self.check_params(spec)
        game, run = self.source(spec)
        keep = self.checkpoint_range(spec)
        counts = {"records": 0, "episodes": 0, "transitions": 0, "terminated": 0, "truncated": 0,
                  "skipped_one_step": 0, "skipped_checkpoint_range": 0}  # fmt: skip
        per_shard: dict[str, int] = {}
        checkpoints: set[int] = set()
        pending: list[dict[tuple[str, ...], np.ndarray]] = []
        rows = nbytes = 0
        for resource in self.resources(spec):
            if resource.name not in files:
                raise LoaderError(f"{spec.id}: shard {resource.name} was not fetched")
            path = Path(files[resource.name])
            n_records = 0
            for offset, record in iter_records(path, compression="gzip"):
                where = f"{path.name} (record at byte {offset} of the decompressed stream)"
                try:
                    example = parse_example(record)
                except ValueError as exc:
                    raise CorruptFile(
                        f"{spec.id}: {where} is not a tf.train.Example ({exc}); delete {path} and download it again",
                        path=path,
                    ) from exc
                n_records += 1
                checkpoint = _scalar(example, "checkpoint_idx", where, spec)
                if keep is not None and not keep[0] <= checkpoint <= keep[1]:
                    counts["skipped_checkpoint_range"] += 1
                    continue
                columns = _episode(example, where, spec, counts["episodes"])
                if columns is None:
                    counts["skipped_one_step"] += 1
                    continue
                checkpoints.add(checkpoint)
                n = len(columns[("episode",)])
                counts["episodes"] += 1
                counts["transitions"] += n
                counts["terminated" if columns[("next", "terminated")][-1, 0] else "truncated"] += 1
                size = sum(v.nbytes for v in columns.values())
                if pending and (rows + n > ctx.chunk_rows or nbytes + size > CHUNK_BYTES):
                    yield _chunk(pending)
                    pending, rows, nbytes = [], 0, 0
                pending.append(columns)
                rows, nbytes = rows + n, nbytes + size
                ctx.progress(n)
            per_shard[path.name] = n_records
            counts["records"] += n_records
        if pending:
            yield _chunk(pending)
        if counts["episodes"] == 0:
            raise LoaderError(
                f"{spec.id}: no episode with a transition in the selected shards"
                + (f" and checkpoint_range {list(keep)}" if keep else "")
                + f" ({counts})"
            )
        ctx.note("game", game)
        ctx.note("environment", environment_card(game))
        ctx.note("run", run)
        ctx.note("counts", counts)
        ctx.note("records_per_shard", per_shard)
        ctx.note("checkpoints_present", sorted(checkpoints))
        ctx.note("crc32c", crc32c_implementation())
        ctx.note(
            "reward",
            "('next', 'reward') is upstream's unclipped_rewards, TFDS's reward: clipped to [-1, 1] despite its "
            "name; ('info', 'clipped_reward') is upstream's clipped_rewards",
        )
        ctx.note(
            "last_step",
            "an episode of L steps gives L-1 transitions: the last step holds only the final observation "
            "(the terminal state when its discount is 0); its action and reward are not kept",
        )


def _scalar(example: Mapping[str, Any], name: str, where: str, spec: DatasetSpec) -> int:
    value = example.get(name)
    if not isinstance(value, np.ndarray) or value.size != 1:
        raise LoaderError(f"{spec.id}: {where}: feature {name!r} should hold one int64, got {value!r:.80}")
    return int(value[0])


def _episode(
    example: Mapping[str, Any], where: str, spec: DatasetSpec, episode_id: int
) -> dict[tuple[str, ...], np.ndarray] | None:
    """The TED columns of one record (see the module docstring), ``None`` for a one-step episode."""
    missing = [k for k in _REQUIRED if k not in example]
    if missing:
        raise LoaderError(
            f"{spec.id}: {where} has no feature(s) {missing}; an RL Unplugged Atari episode holds "
            f"{sorted(_REQUIRED)} (found {sorted(example)})"
        )
    pngs = example["observations"]
    if not isinstance(pngs, list):
        raise LoaderError(f"{spec.id}: {where}: 'observations' should hold PNG byte strings")
    steps = len(pngs)
    numeric = {}
    for name in ("actions", "unclipped_rewards", "clipped_rewards", "discounts"):
        value = example.get(name)
        if value is None and name == "clipped_rewards":
            continue
        if not isinstance(value, np.ndarray) or value.size != steps:
            got = value.size if isinstance(value, np.ndarray) else type(value).__name__
            raise LoaderError(f"{spec.id}: {where}: {name!r} has {got} values for {steps} observations")
        numeric[name] = value
    if steps < 2:
        return None
    n = steps - 1
    frames = np.stack([_png(blob, where, spec) for blob in pngs])
    discounts = numeric["discounts"].astype(np.float32)
    terminal = bool(discounts[-1] == 0.0)
    step_discount = np.concatenate([discounts[1:], [0.0]]).astype(np.float32) if terminal else discounts
    terminated = np.zeros((n, 1), dtype=bool)
    terminated[-1] = terminal
    out: dict[tuple[str, ...], np.ndarray] = {
        ("observation",): frames[:-1],
        ("next", "observation"): frames[1:],
        ("action",): numeric["actions"][:n].astype(np.int64),
        ("next", "reward"): numeric["unclipped_rewards"][:n].astype(np.float32).reshape(n, 1),
        ("next", "discount"): step_discount[:n].reshape(n, 1),
        ("next", "terminated"): terminated,
        ("next", "truncated"): ~terminated & (np.arange(n) == n - 1)[:, None],
        ("episode",): np.full(n, episode_id, dtype=np.int64),
    }
    if "clipped_rewards" in numeric:
        out[("info", "clipped_reward")] = numeric["clipped_rewards"][:n].astype(np.float32)
    for name, dtype in (("episode_idx", np.int64), ("checkpoint_idx", np.int64), ("episode_return", np.float32),
                        ("clipped_episode_return", np.float32)):  # fmt: skip
        value = example.get(name)
        if isinstance(value, np.ndarray) and value.size == 1:
            out[("info", name)] = np.full(n, value[0], dtype=dtype)
        elif name in ("episode_idx", "checkpoint_idx", "episode_return"):
            raise LoaderError(f"{spec.id}: {where}: feature {name!r} should hold one value, got {value!r:.80}")
    return out


def _png(blob: bytes, where: str, spec: DatasetSpec) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(blob)) as image:
            if image.format != "PNG":
                raise LoaderError(f"{spec.id}: {where}: an observation is {image.format}, not PNG")
            if image.mode != "L":  # TFDS decodes with channels=1; any conversion here could differ from TF's
                raise LoaderError(f"{spec.id}: {where}: an observation is a {image.mode} PNG, not 8-bit grey (L)")
            array = np.asarray(image)
    except (UnidentifiedImageError, OSError) as exc:
        raise LoaderError(f"{spec.id}: {where}: an observation Pillow cannot decode as PNG ({exc})") from exc
    if array.shape != FRAME[:2]:
        raise LoaderError(f"{spec.id}: {where}: an observation is {list(array.shape)} pixels, expected 84x84")
    return array.reshape(FRAME)


def _chunk(episodes: list[dict[tuple[str, ...], np.ndarray]]) -> TensorDictBase:
    import torch
    from tensordict import TensorDict

    n = sum(len(e[("episode",)]) for e in episodes)
    out = TensorDict({}, batch_size=[n])
    for key in episodes[0]:
        parts = [e[key] for e in episodes]
        out.set(key, torch.from_numpy(np.ascontiguousarray(parts[0] if len(parts) == 1 else np.concatenate(parts))))
    return out
