"""Sequence packing: place variable-length sequences into few fixed-length rows (first-fit decreasing).

Padding every sequence to the longest wastes compute on pad tokens; packing puts several sequences
in one row of ``max_len`` tokens. Each token keeps its own position (``position_ids`` restart at 0 for
every sequence) and may attend only within its sequence (``attention_mask()``, block-diagonal and
causal), so a packed forward gives the same logits as separate forwards.

First-fit decreasing (FFD): sort sequences by length, longest first, and put each into the first row
with room for it, opening a new row when none has. It uses at most ``11/9 · OPT + 6/9`` rows, where
OPT is the fewest possible (Dósa, 2007; the bound is tight).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from rapidrl.kernels.validation import check_int


@dataclass(frozen=True)
class PackedBatch:
    """Result of ``pack_sequences``; ``P`` rows of ``L = max_len`` tokens, ``N`` sequences.

    Attributes:
        tokens: [P, L] int64 packed ids (``pad_id`` in unused slots), or ``None`` when only
            lengths were packed.
        position_ids: [P, L] int64 position of each token in its own sequence (0 in unused slots).
        seq_ids: [P, L] int64 index of the sequence each token belongs to (-1 in unused slots).
        row: [N] int64 row holding sequence ``i``.
        start: [N] int64 first column of sequence ``i`` in its row.
        lengths: [N] int64 length of sequence ``i``.
    """

    tokens: torch.Tensor | None
    position_ids: torch.Tensor
    seq_ids: torch.Tensor
    row: torch.Tensor
    start: torch.Tensor
    lengths: torch.Tensor

    @property
    def num_rows(self) -> int:
        return int(self.seq_ids.shape[0])

    def attention_mask(self, causal: bool = True) -> torch.Tensor:
        """[P, L, L] bool, True where query ``i`` may attend to key ``j``: same sequence (and ``j <= i``).

        Unused slots attend to nothing but themselves, so attention rows stay finite.
        """
        same = self.seq_ids[:, :, None] == self.seq_ids[:, None, :]  # [P, L, L]
        used = self.seq_ids >= 0  # [P, L]
        allowed = same & used[:, :, None] & used[:, None, :]
        if causal:
            allowed = allowed & torch.ones_like(allowed[0]).tril()
        return allowed | torch.eye(allowed.shape[1], dtype=torch.bool)

    def unpack(self, packed: torch.Tensor) -> list[torch.Tensor]:
        """Split a per-token tensor [P, L, ...] (e.g. logits of the packed rows) back into one
        tensor [len_i, ...] per sequence, in the original order (views, no copy)."""
        if packed.shape[:2] != self.seq_ids.shape:
            raise ValueError(f"packed must start with shape {tuple(self.seq_ids.shape)}, got {tuple(packed.shape)}")
        return [packed[r, s:s + n] for r, s, n in zip(self.row.tolist(), self.start.tolist(),
                                                       self.lengths.tolist())]


def first_fit_decreasing(lengths: np.ndarray, max_len: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Assign each item of ``lengths`` [N] to a bin of capacity ``max_len`` by FFD.

    Returns ``(row [N], start [N], num_bins)``: the bin of item ``i`` and its offset in the bin
    (items of a bin are laid out in the order they were placed). Ties in length keep input order.
    """
    order = np.argsort(-lengths, kind="stable")  # longest first
    remaining = np.empty(len(lengths), dtype=np.int64)  # free room per open bin (at most N bins)
    num_bins = 0
    row = np.empty(len(lengths), dtype=np.int64)
    start = np.empty(len(lengths), dtype=np.int64)
    for i in order:
        n = lengths[i]
        fits = np.flatnonzero(remaining[:num_bins] >= n)
        b = fits[0] if fits.size else num_bins
        if b == num_bins:
            remaining[b] = max_len
            num_bins += 1
        row[i] = b
        start[i] = max_len - remaining[b]
        remaining[b] -= n
    return row, start, num_bins


def pack_sequences(sequences, max_len: int, *, pad_id: int = 0) -> PackedBatch:
    """Pack sequences into rows of ``max_len`` tokens with first-fit decreasing.

    Args:
        sequences: either lengths (a 1-D int array/tensor or a list of ints), or the sequences
            themselves (a list of 1-D int tensors or lists of ints). Every length is in [1, max_len].
        max_len: L, the row length.
        pad_id: id written into unused slots of ``tokens``.
    Returns:
        ``PackedBatch`` with ``tokens`` (``None`` when only lengths were given), ``position_ids``,
        ``seq_ids``, the mapping ``row``/``start``/``lengths`` and ``attention_mask()``/``unpack()``.
    """
    max_len = check_int("max_len", max_len, low=1)
    check_int("pad_id", pad_id)
    if isinstance(sequences, torch.Tensor):
        sequences = sequences.cpu().numpy()
    if isinstance(sequences, np.ndarray):
        if sequences.ndim != 1 or not np.issubdtype(sequences.dtype, np.integer):
            raise TypeError(f"lengths must be a 1-D integer array, got {sequences.dtype} {sequences.shape}")
        lengths, seqs = sequences.astype(np.int64), None
    elif isinstance(sequences, (list, tuple)) and all(
            isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in sequences):
        lengths, seqs = np.asarray(sequences, dtype=np.int64), None
    elif isinstance(sequences, (list, tuple)):
        seqs = [torch.as_tensor(s, dtype=torch.int64) for s in sequences]
        if any(s.ndim != 1 for s in seqs):
            raise ValueError("each sequence must be 1-D")
        lengths = np.array([len(s) for s in seqs], dtype=np.int64)
    else:
        raise TypeError("sequences must be a 1-D array of lengths or a list of token sequences")
    if lengths.size == 0:
        raise ValueError("sequences must not be empty")
    if lengths.min() < 1 or lengths.max() > max_len:
        raise ValueError(f"every sequence length must be in [1, {max_len}], got range "
                         f"[{lengths.min()}, {lengths.max()}]")

    row, start, num_rows = first_fit_decreasing(lengths, max_len)
    seq_ids = np.full((num_rows, max_len), -1, dtype=np.int64)
    position_ids = np.zeros((num_rows, max_len), dtype=np.int64)
    for i, (r, s, n) in enumerate(zip(row, start, lengths)):
        seq_ids[r, s:s + n] = i
        position_ids[r, s:s + n] = np.arange(n)
    tokens = None
    if seqs is not None:
        tokens = torch.full((num_rows, max_len), pad_id, dtype=torch.int64)
        for seq, r, s, n in zip(seqs, row.tolist(), start.tolist(), lengths.tolist()):
            tokens[r, s:s + n] = seq
    return PackedBatch(tokens=tokens, position_ids=torch.from_numpy(position_ids),
                       seq_ids=torch.from_numpy(seq_ids), row=torch.from_numpy(row),
                       start=torch.from_numpy(start), lengths=torch.from_numpy(lengths))
