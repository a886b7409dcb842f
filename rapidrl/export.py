"""Export a trained policy for deployment: ONNX or TorchScript, deterministic, normalization folded in.

``rapidrl export RUN_DIR --format onnx|torchscript [--out FILE]``, or from Python::

    from rapidrl.export import export_policy
    export_policy(model, "policy.onnx")          # format from the suffix (.onnx / .pt)

The exported graph maps raw observations ``obs: [B, *obs_shape] float32`` to the env actions
``model.predict(obs, deterministic=True)`` returns. A model trained on an env with action masks (docs/masks.md) is
exported with a second input, ``action_masks: [B, M] bool`` (the valid actions of each observation, as the env gives
them), and returns ``model.predict(obs, deterministic=True, action_masks=action_masks)``. Each algorithm says what
that is in its ``deterministic_module()``: PPO/A2C/IMPALA/MAPPO/IPPO (observation normalization, then the actor's
mode, clipped or tanh-squashed to the action bounds), DQN (argmax of Q), SAC (tanh of the mean, scaled to the bounds)
and TD3 (the actor). Tests run the files with onnxruntime and ``torch.jit.load`` and
compare the actions with ``predict``.

A recurrent policy (recurrent PPO/A2C, R2D2, recurrent SAC and TD3) is exported as one step that carries its state,
as ``predict(obs, state, episode_start, deterministic=True)``: inputs ``obs [B, *obs_shape] float32``,
``state [B, S] float32`` (zeros for fresh episodes; S is the graph's second input's width, ``model.
deterministic_module().state_size``), ``episode_start [B] bool`` (True zeroes that row's state first) and
``action_masks`` where the model has them; outputs ``actions`` and ``state_out [B, S]``, fed back as the next
step's ``state``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from rapidrl.nn.deploy import RecurrentMode

FORMATS = ("onnx", "torchscript")


class DeterministicPolicy(nn.Module):
    """obs [B, *obs_shape] float32 (and action_masks [B, M] bool for a model trained with action masks) ->
    deterministic env actions [B] int64 or [B, A] float32 of ``model``: its ``deterministic_module()`` (each algorithm
    builds its own) on the flattened observations. A recurrent model's module (``RecurrentMode``) also takes
    state [B, S] and episode_start [B] before the masks and returns (actions, state after the step)."""

    def __init__(self, model):
        super().__init__()
        self.obs_dim = int(np.prod(model.observation_space.shape))
        self.mask_size = int(getattr(model, "action_mask_size", 0))
        self.net = model.deterministic_module()
        self.state_size = getattr(self.net, "state_size", None)  # a recurrent policy's (RecurrentMode), else None

    def forward(self, obs: torch.Tensor, *inputs: torch.Tensor):
        return self.net(obs.reshape(obs.shape[0], self.obs_dim).float(), *inputs)


def export_policy(model, path, fmt: str | None = None) -> Path:
    """Write ``model``'s deterministic policy to ``path`` as ONNX or TorchScript; returns the path.

    fmt: "onnx" or "torchscript"; ``None`` picks it from the suffix (.onnx -> onnx, anything else ->
    torchscript). The batch dimension stays dynamic.
    """
    return write_policy(DeterministicPolicy(model), tuple(model.observation_space.shape), path, fmt)


def write_policy(policy: DeterministicPolicy, obs_shape: tuple, path, fmt: str | None = None) -> Path:
    """``export_policy`` of a ``DeterministicPolicy`` built already (``rapidrl export`` describes its inputs from it);
    ``obs_shape``: the model's observation shape."""
    path = Path(path)
    fmt = fmt or ("onnx" if path.suffix == ".onnx" else "torchscript")
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    recurrent = isinstance(policy.net, RecurrentMode)
    example = (torch.zeros((2, *obs_shape), dtype=torch.float32),)
    names, outputs = ["obs"], ["actions"]
    axes = {"obs": {0: "batch"}, "actions": {0: "batch"}}
    if recurrent:  # the state in and out, and where episodes start
        example += (torch.zeros((2, policy.net.state_size), dtype=torch.float32), torch.tensor([True, False]))
        names += ["state", "episode_start"]
        outputs.append("state_out")
        axes.update(state={0: "batch"}, episode_start={0: "batch"}, state_out={0: "batch"})
    if policy.mask_size:  # the valid actions: a second input
        example += (torch.ones((2, policy.mask_size), dtype=torch.bool),)
        names.append("action_masks")
        axes["action_masks"] = {0: "batch"}
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        if fmt == "torchscript":
            torch.jit.trace(policy, example, check_trace=False).save(str(path))
        else:
            try:
                import onnx  # noqa: F401
            except ImportError as e:
                raise ImportError("ONNX export needs the export extra: pip install 'rapidrl[export]'") from e
            torch.onnx.export(policy, example, str(path), input_names=names, output_names=outputs,
                              dynamic_axes=axes, dynamo=False)
    return path
