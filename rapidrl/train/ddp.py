"""Several learners with ``torchrun``: identical start, averaged gradients, averaged metrics.

Every rank (one process per learner, started by ``torchrun``) collects with its own envs and seed stream
and computes gradients on its own rollout; after each backward the gradients are averaged over ranks, so
every rank takes the same optimizer step and the parameters stay bitwise identical. This is what
``torch.nn.parallel.DistributedDataParallel`` does, done explicitly, after each minibatch's backward (the
algorithm calls ``Algorithm._sync_grads``), without wrapping the policy in DDP's module.

Gradients are averaged with one ``all_reduce`` on one flat buffer (DDP's single bucket). After the first
call every parameter's ``.grad`` is a view of that buffer (DDP's ``gradient_as_bucket_view``): the on-policy
updates (PPO, A2C, IMPALA) zero their gradients in place (``zero_grad(set_to_none=False)``), so each backward
accumulates straight into the buffer and nothing is copied. Only the ``.grad`` tensors autograd created before
that first call are copied in once and re-pointed.

Backend: ``nccl`` when the algorithm's parameters are on a CUDA device, else ``gloo``; the environment
variable ``RAPIDRL_DIST_BACKEND`` (or ``from_env(backend=...)``) overrides. The process group is created
in ``setup`` (the device is known only then) unless one exists already; then it is used as it is and
``close`` leaves it alone. With CUDA available, ``from_env`` makes ``cuda:LOCAL_RANK`` the current device,
so ``device="cuda"`` puts each rank on its own GPU.

Only rank 0 (``is_main``) should write checkpoints and logs.
"""

from __future__ import annotations

import os
import zlib

import torch
import torch.distributed as dist

from rapidrl._unsafe.torch_private import flatten, unflatten
from rapidrl.train.config import config_to_dict

_ENV_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
BACKEND_ENV = "RAPIDRL_DIST_BACKEND"
# Metrics summed over ranks (totals over all learners); every other number is averaged.
SUMMED_METRICS = frozenset({"global_step", "charts/SPS"})


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class DistributedContext:
    """One learner among ``world_size``; see the module docstring. Build it with ``from_env()``."""

    def __init__(self, rank: int, world_size: int, local_rank: int, backend: str | None = None):
        self.rank = rank
        self.world_size = world_size
        self.local_rank = local_rank
        self.backend = backend
        self.device = torch.device("cpu")
        self._owns_group = False
        self._grad_key: tuple | None = None
        self._grad_flat: torch.Tensor | None = None
        self._grad_views: list[torch.Tensor] = []

    @classmethod
    def from_env(cls, backend: str | None = None) -> DistributedContext:
        """The context of this process, read from ``torchrun``'s environment (RANK, WORLD_SIZE, LOCAL_RANK,
        MASTER_ADDR, MASTER_PORT), or from an already initialised default process group.

        Raises RuntimeError with instructions when the process was not started by ``torchrun``.
        """
        if not dist.is_available():
            raise RuntimeError("distributed=True needs torch.distributed, which this PyTorch build lacks")
        backend = backend or os.environ.get(BACKEND_ENV) or None
        if dist.is_initialized():
            local_rank = int(os.environ.get("LOCAL_RANK", "0"))
            return cls(dist.get_rank(), dist.get_world_size(), local_rank, dist.get_backend())
        missing = [v for v in _ENV_VARS if v not in os.environ]
        if missing:
            raise RuntimeError(
                f"distributed=True needs the process to be started by torchrun (missing environment variables "
                f"{', '.join(missing)}); run e.g. `torchrun --standalone --nproc_per_node 2 train.py` or "
                "`torchrun --standalone --nproc_per_node 2 -m rapidrl train ... --distributed`"
            )
        rank, world_size, local_rank = (int(os.environ[v]) for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
        if not 0 <= rank < world_size:
            raise RuntimeError(f"RANK={rank} must lie in [0, WORLD_SIZE={world_size})")
        if torch.cuda.is_available() and local_rank < torch.cuda.device_count():
            torch.cuda.set_device(local_rank)
        return cls(rank, world_size, local_rank, backend)

    def __repr__(self) -> str:
        return f"DistributedContext(rank={self.rank}, world_size={self.world_size}, backend={self.backend})"

    @property
    def is_main(self) -> bool:
        """True on rank 0, the one rank that writes checkpoints and logs."""
        return self.rank == 0

    # -- set-up ------------------------------------------------------------------------------------
    def setup(self, algo) -> None:
        """Join the process group, check every rank has the same config, then broadcast every parameter
        and buffer of ``algo.trainable_modules()`` from rank 0 so that all ranks start identical."""
        modules = algo.trainable_modules()  # Algorithm refuses distributed=True where it is unsupported
        tensors = [t for m in modules for t in (*m.parameters(), *m.buffers())]
        device = tensors[0].device if tensors else torch.device(algo.device)
        self._init_group(device)
        configs: list = [None] * self.world_size
        dist.all_gather_object(configs, config_to_dict(algo.config))
        differ = sorted(k for k in configs[0] if any(c.get(k) != configs[0][k] for c in configs[1:]))
        if differ:
            raise ValueError(f"distributed ranks were built with different configs (fields {differ}); every "
                             "rank must run the same algorithm with the same hyperparameters")
        self._broadcast(tensors)

    def _init_group(self, device: torch.device) -> None:
        """Create the default process group (nccl for CUDA tensors, else gloo) unless it exists."""
        if dist.is_initialized():
            self.backend = dist.get_backend()
        else:
            self.backend = self.backend or ("nccl" if device.type == "cuda" else "gloo")
            dist.init_process_group(self.backend, rank=self.rank, world_size=self.world_size)
            self._owns_group = True
        self.device = torch.device("cuda", torch.cuda.current_device()) if self.backend == "nccl" \
            else torch.device("cpu")

    @torch.no_grad()
    def _broadcast(self, tensors: list[torch.Tensor]) -> None:
        """Copy rank 0's values into ``tensors`` on every rank: one broadcast per dtype."""
        groups: dict[torch.dtype, list[torch.Tensor]] = {}
        for t in tensors:
            groups.setdefault(t.dtype, []).append(t)
        for group in groups.values():
            flat = flatten([t.detach().to(self.device) for t in group])
            dist.broadcast(flat, src=0)
            for t, v in zip(group, unflatten(flat, group)):
                t.copy_(v)

    # -- per update --------------------------------------------------------------------------------
    @torch.no_grad()
    def all_reduce_grads(self, params) -> None:
        """Average the ``.grad`` of ``params`` over ranks: one all_reduce on one flat buffer.

        Parameters whose ``.grad`` is None are skipped; every rank must have gradients for the same
        parameters (they do when all run the same algorithm). Gradients must share one dtype and device.
        """
        params = [p for p in params if p.grad is not None]
        if self.world_size == 1 or not params:
            return
        key = tuple((id(p), p.shape, p.dtype, p.device) for p in params)
        if key != self._grad_key:
            self._make_grad_buffer(params, key)
        for p, view in zip(params, self._grad_views):
            if p.grad is not view:  # the first call: autograd's own .grad, copied in once, then the view stays
                view.copy_(p.grad)
                p.grad = view
        flat = self._grad_flat
        dist.all_reduce(flat)
        flat.div_(self.world_size)

    def _make_grad_buffer(self, params, key: tuple) -> None:
        dtypes = {p.grad.dtype for p in params}
        devices = {p.grad.device for p in params}
        if len(dtypes) > 1 or len(devices) > 1:
            raise TypeError(f"all_reduce_grads needs gradients of one dtype on one device, got dtypes "
                            f"{sorted(map(str, dtypes))} on devices {sorted(map(str, devices))}")
        flat = torch.zeros(sum(p.numel() for p in params), dtype=dtypes.pop(), device=devices.pop())
        views, offset = [], 0
        for p in params:
            views.append(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        self._grad_key, self._grad_flat, self._grad_views = key, flat, views

    def reduce_metrics(self, metrics: dict) -> None:
        """Combine the numeric metrics of all ranks, in place: ``SUMMED_METRICS`` (global_step, SPS) are
        summed, every other number is averaged over the ranks that have it (a rank without finished
        episodes has no ``charts/episodic_return`` yet). Keys only some ranks have appear on all.

        One all_reduce of the values and, to agree on the keys, one of a checksum of the key names (when
        the names differ, one all_gather of them). Ints stay ints; other values are left alone.
        """
        if self.world_size == 1:
            return
        keys = self._agree_on_keys(sorted(k for k, v in metrics.items() if _is_number(v)))
        table = torch.zeros(2, len(keys), dtype=torch.float64)  # [value sum, number of ranks having it]
        for j, k in enumerate(keys):
            if _is_number(metrics.get(k)):
                table[0, j] = float(metrics[k])
                table[1, j] = 1.0
        table = table.to(self.device)
        dist.all_reduce(table)
        sums, counts = table.cpu().tolist()
        for k, total, n in zip(keys, sums, counts):
            value = total if k in SUMMED_METRICS else total / n
            metrics[k] = round(value) if isinstance(metrics.get(k), int) else float(value)

    def _agree_on_keys(self, keys: list[str]) -> tuple[str, ...]:
        """The sorted union of every rank's ``keys`` (cheap when all ranks have the same ones)."""
        keys = tuple(keys)
        digest = zlib.crc32("\0".join(keys).encode())
        check = torch.tensor([digest, -digest], dtype=torch.int64, device=self.device)
        dist.all_reduce(check, op=dist.ReduceOp.MAX)
        if int(check[0]) == digest == -int(check[1]):
            return keys
        gathered: list = [None] * self.world_size
        dist.all_gather_object(gathered, keys)
        return tuple(sorted(set().union(*gathered)))

    def all_reduce_mean(self, value: float) -> float:
        """The mean of a float over ranks (e.g. to make an early-stopping decision the same on every rank)."""
        if self.world_size == 1:
            return float(value)
        t = torch.tensor([float(value)], dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return float(t) / self.world_size

    # -- life cycle --------------------------------------------------------------------------------
    def barrier(self) -> None:
        """Wait until every rank reaches this call."""
        if dist.is_initialized():
            dist.barrier()

    def close(self) -> None:
        """Destroy the process group if this context created it (idempotent)."""
        if self._owns_group and dist.is_initialized():
            dist.destroy_process_group()
        self._owns_group = False
