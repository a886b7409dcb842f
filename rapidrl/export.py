"""Export a trained policy for deployment: ONNX or TorchScript, deterministic, normalization folded in.

``rapidrl export RUN_DIR --format onnx|torchscript [--out FILE]``, or from Python::

    from rapidrl.export import export_policy
    export_policy(model, "policy.onnx")          # format from the suffix (.onnx / .pt)

The exported graph maps raw observations ``obs: [B, *obs_shape] float32`` to the env actions
``model.predict(obs, deterministic=True)`` returns: PPO/A2C/IMPALA (observation normalization, then the
actor's mode, clipped or tanh-squashed to the action bounds), DQN (argmax of Q), SAC (tanh of the mean,
scaled to the bounds) and TD3 (the actor). Tests run the files with onnxruntime and ``torch.jit.load`` and
compare the actions with ``predict``.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import torch
from torch import nn

FORMATS = ("onnx", "torchscript")


class DeterministicPolicy(nn.Module):
    """obs [B, *obs_shape] float32 -> deterministic env actions [B] int64 or [B, A] float32 of ``model``."""

    def __init__(self, model):
        super().__init__()
        name = model.name
        self.kind = {"ppo": "ac", "a2c": "ac", "impala": "ac", "dqn": "q", "sac": "sac", "td3": "td3"}.get(name)
        if self.kind is None:
            raise ValueError(f"exporting {name!r} models is not supported")
        if getattr(getattr(model, "policy", None), "recurrent", False):
            raise ValueError("exporting recurrent policies is not supported yet (the exported graph would need the "
                             "state as an input and an output)")
        self.obs_dim = int(np.prod(model.observation_space.shape))
        normalizer = getattr(model, "obs_normalizer", None)
        self.normalize = normalizer is not None
        if self.normalize:  # clip((obs - mean) / sqrt(var + eps), -clip, clip), as ObsNormalizer does
            rms = normalizer.rms
            self.register_buffer("mean", torch.as_tensor(np.asarray(rms.mean), dtype=torch.float32).reshape(-1))
            self.register_buffer("inv_std", torch.as_tensor(1.0 / np.sqrt(np.asarray(rms.var) + normalizer.eps),
                                                            dtype=torch.float32).reshape(-1))
            self.clip = float(normalizer.clip)
        net = {"ac": "policy", "q": "q_net", "sac": "actor", "td3": "actor"}[self.kind]
        # a frozen CPU copy: the trained model (maybe on a GPU, maybe training on) is left as it is
        self.net = copy.deepcopy(getattr(model, net)).cpu().eval().requires_grad_(False)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.reshape(obs.shape[0], self.obs_dim).float()
        if self.normalize:
            x = ((x - self.mean) * self.inv_std).clamp(-self.clip, self.clip)
        if self.kind == "ac":
            raw, _, _ = self.net.act(x, deterministic=True)
            return self.net.to_env_action(raw)
        if self.kind == "q":
            return self.net(x).argmax(1)
        if self.kind == "sac":
            return self.net(x, True)[0]
        return self.net(x)


def export_policy(model, path, fmt: str | None = None) -> Path:
    """Write ``model``'s deterministic policy to ``path`` as ONNX or TorchScript; returns the path.

    fmt: "onnx" or "torchscript"; ``None`` picks it from the suffix (.onnx -> onnx, anything else ->
    torchscript). The batch dimension stays dynamic.
    """
    path = Path(path)
    fmt = fmt or ("onnx" if path.suffix == ".onnx" else "torchscript")
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    policy = DeterministicPolicy(model)
    example = torch.zeros((2, *model.observation_space.shape), dtype=torch.float32)
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        if fmt == "torchscript":
            torch.jit.trace(policy, example, check_trace=False).save(str(path))
        else:
            try:
                import onnx  # noqa: F401
            except ImportError as e:
                raise ImportError("ONNX export needs the export extra: pip install 'rapidrl[export]'") from e
            torch.onnx.export(policy, (example,), str(path), input_names=["obs"], output_names=["actions"],
                              dynamic_axes={"obs": {0: "batch"}, "actions": {0: "batch"}}, dynamo=False)
    return path
