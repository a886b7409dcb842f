"""Optimizers as rapidrl builds them: one definition, the fastest kernel PyTorch has for the device.

``adam`` builds the optimizer (a real ``torch.optim.Adam``: state dicts, schedulers and checkpoints work as
usual); ``optimizer_step`` takes one step with it, optionally clipping the global gradient norm first.
"""

from __future__ import annotations

import torch


def adam(params, lr: float, eps: float = 1e-8) -> torch.optim.Adam:
    """Adam with the fused kernel where torch has one for the device (CPU included), else foreach.

    For the small networks of RL the fused step is ~3x faster than foreach on this CPU (measured: 13 tensors
    of two 64x64 MLPs, 0.33 ms vs 1.0 ms per step, one thread).
    """
    params = list(params)
    try:
        return torch.optim.Adam(params, lr=lr, eps=eps, fused=True)
    except RuntimeError:
        return torch.optim.Adam(params, lr=lr, eps=eps, foreach=True)


def clip_grad_norm(grads: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Scale ``grads`` in place so their global L2 norm is at most ``max_norm``; returns the norm before.

    The same arithmetic as ``torch.nn.utils.clip_grad_norm_`` (coefficient max_norm / (norm + 1e-6),
    clamped to 1) in three foreach calls, without reading the norm back to the host.
    """
    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    torch._foreach_mul_(grads, (max_norm / (norm + 1e-6)).clamp_(max=1.0))
    return norm


def optimizer_step(optimizer: torch.optim.Optimizer, max_grad_norm: float = 0.0) -> None:
    """Clip the gradients' global norm to ``max_grad_norm`` (0: no clipping), then take one optimizer step.

    A fused Adam whose state exists steps through ``torch._fused_adam_`` directly: the same kernel and the
    same arithmetic as ``optimizer.step()`` (tests compare them bitwise) without its ~0.2 ms of Python
    bookkeeping per call, which is as long as the kernel itself for RL-sized networks. Anything else goes
    through ``optimizer.step()``: tracing by torch.compile, the first step (which creates the state), other
    optimizers, AMSGrad, weight decay, missing gradients, parameters of several devices or dtypes.
    """
    groups = optimizer.param_groups
    if max_grad_norm > 0:
        grads = [p.grad for g in groups for p in g["params"] if p.grad is not None]
        if grads:
            clip_grad_norm(grads, max_grad_norm)
    if torch.compiler.is_compiling() or not (isinstance(optimizer, torch.optim.Adam) and len(groups) == 1
                                             and groups[0]["fused"]):
        optimizer.step()
        return
    group = groups[0]
    params = group["params"]
    states = [optimizer.state.get(p) for p in params]
    if (any(not s or p.grad is None for s, p in zip(states, params)) or group["amsgrad"] or group["maximize"]
            or group["weight_decay"] or group["differentiable"] or torch.is_tensor(group["lr"])
            or len({(p.device, p.dtype) for p in params}) != 1):
        optimizer.step()
        return
    steps = [s["step"] for s in states]
    torch._foreach_add_(steps, 1)
    beta1, beta2 = group["betas"]
    torch._fused_adam_(params, [p.grad for p in params], [s["exp_avg"] for s in states],
                       [s["exp_avg_sq"] for s in states], [], steps, lr=group["lr"], beta1=beta1, beta2=beta2,
                       weight_decay=0.0, eps=group["eps"], amsgrad=False, maximize=False)
