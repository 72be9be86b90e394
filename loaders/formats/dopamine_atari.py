"""The Atari environment Dopamine's DQN agents collected DQN Replay and RL Unplugged Atari in, as a card entry.

Both datasets are the replay logs of Dopamine's DQN runs (Agarwal et al. 2020; RL Unplugged re-publishes
them as episodes). Dopamine made each game as gym's ``<Game>NoFrameskip-v0`` (sticky actions: ALE repeats
the previous action with probability 0.25 at every frame; the minimal action set) inside its own
``AtariPreprocessing`` (each action held for 4 frames, the last two max-pooled, grayscale, resized to
84x84 by area, no episode end at a life loss, no no-op starts) and ended episodes after 27,000 actions
(108,000 frames). Gymnasium and ``ale_py`` make the same settings as ``ALE/<Game>-v5`` with
``frameskip=1`` wrapped in gymnasium's ``AtariPreprocessing``: that is what the card records to make the
environment again (:meth:`datasets_hub.DatasetInfo.recover_environment`), next to how Dopamine made it.
"""

from __future__ import annotations

from typing import Any

STICKY_ACTION_PROBABILITY = 0.25
FRAMES_PER_ACTION = 4
MAX_FRAMES_PER_EPISODE = 108_000  # Dopamine's 27,000 actions of 4 frames


def environment_card(game: str) -> dict[str, Any]:
    """The card's ``environment`` entry for ``game`` (the dataset's CamelCase name, e.g. ``"Pong"``)."""
    return {
        "env_id": f"ALE/{game}-v5",
        "registry": "gymnasium",
        "registered_by": "ale_py",
        "make_kwargs": {
            "frameskip": 1,  # the wrapper holds each action for 4 frames, as Dopamine's did
            "repeat_action_probability": STICKY_ACTION_PROBABILITY,
            "full_action_space": False,
            "max_num_frames_per_episode": MAX_FRAMES_PER_EPISODE,
        },
        "wrappers": [
            {
                "entry_point": "gymnasium.wrappers:AtariPreprocessing",
                "kwargs": {
                    "noop_max": 0,
                    "frame_skip": FRAMES_PER_ACTION,
                    "screen_size": 84,
                    "terminal_on_life_loss": False,
                    "grayscale_obs": True,
                    "scale_obs": False,
                },
            }
        ],
        "collected_with": (
            f"Dopamine: gym's {game}NoFrameskip-v0 (sticky actions, p={STICKY_ACTION_PROBABILITY} per frame; "
            f"minimal action set) in Dopamine's AtariPreprocessing ({FRAMES_PER_ACTION} frames per action, "
            "max-pooled over the last two, grayscale 84x84, no end at a life loss, no no-op starts), at most "
            f"{MAX_FRAMES_PER_EPISODE // FRAMES_PER_ACTION:,} actions per episode. The data holds single frames: "
            f"agents stack the last {FRAMES_PER_ACTION} themselves"
        ),
    }
