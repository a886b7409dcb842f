"""Record a trained policy playing: frames from the env's ``render_mode="rgb_array"``, written with imageio.

GIF needs only Pillow; MP4 needs the ``imageio-ffmpeg`` package (``pip install imageio-ffmpeg``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

FORMATS = (".gif", ".mp4")


def check_video_path(path: Path) -> None:
    """ValueError for an unsupported suffix, or .mp4 without an ffmpeg backend (before any work is done)."""
    if path.suffix.lower() not in FORMATS:
        raise ValueError(f"--video must end in {' or '.join(FORMATS)}, got {path.name!r}")
    if path.suffix.lower() == ".mp4" and importlib.util.find_spec("imageio_ffmpeg") is None:
        raise ValueError("writing .mp4 needs imageio-ffmpeg (pip install imageio-ffmpeg); .gif works without it")


def record(model, env_id: str, path: Path, *, episodes: int = 1, seed: int = 0, env_kwargs: dict | None = None,
           deterministic: bool = True, max_frames: int = 2000) -> tuple[Path, list[float]]:
    """Play ``episodes`` episodes on one env and write the frames to ``path``; returns (path, episode returns).

    GIF frames are downscaled 2x to keep files small.
    """
    import imageio.v3 as iio

    from rapidrl.envs import make_vec

    check_video_path(path)
    env = make_vec(env_id, 1, seed=seed, render_mode="rgb_array", **(env_kwargs or {}))
    fps = int(env.metadata.get("render_fps") or 30)
    gif = path.suffix.lower() == ".gif"
    frames, returns, total = [], [], 0.0

    def grab():
        frame = env.render()
        if frame is None:
            raise ValueError(f"{env_id} produced no frame: it cannot render as rgb_array")
        frame = np.asarray(frame)
        frame = frame[0] if frame.ndim == 4 else frame
        frames.append(frame[::2, ::2] if gif else frame)

    act = model.episode_actor(1, deterministic)  # evaluation's acting: a recurrent policy carries its state
    masked = bool(getattr(env, "action_mask_size", 0))
    obs, _ = env.reset(seed=seed)
    starts = np.ones(1, bool)
    grab()
    while len(returns) < episodes and len(frames) < max_frames:
        obs = np.asarray(obs)
        actions = act(obs, starts, env.action_masks()) if masked else act(obs, starts)
        obs, reward, term, trunc, _ = env.step(actions)
        starts = np.logical_or(term, trunc)
        total += float(reward[0])
        if term[0] or trunc[0]:
            returns.append(total)
            total = 0.0
        grab()
    env.close()
    path.parent.mkdir(parents=True, exist_ok=True)
    if gif:
        iio.imwrite(path, np.stack(frames), extension=".gif", duration=1000 / fps, loop=0)
    else:
        iio.imwrite(path, np.stack(frames), extension=".mp4", fps=fps)
    return path, returns
