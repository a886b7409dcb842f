"""One spelling of a torch device: ``resolve_device("cuda")`` is ``cuda:<current>``, so a device given as "cuda"
compares equal to the ``cuda:0`` that tensors and parameters report (``torch.device("cuda") != "cuda:0"``)."""

from __future__ import annotations


def resolve_device(device):
    """``torch.device(device)``, with the current CUDA device's index filled in where ``device`` names none.

    Raises ValueError (naming the argument) for anything torch cannot read as a device."""
    import torch

    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device must be a torch device such as 'cpu' or 'cuda:0', got {device!r}") from e
    if resolved.type == "cuda" and resolved.index is None and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return resolved
