"""Packing sequences into rows with no attention across sequence boundaries.

A row is the concatenation of whole sequences with `position_ids` restarting at 0 for each. Given
`position_ids` and no `attention_mask`, transformers 5.x (masking_utils.find_packed_sequence_indices)
builds a block-diagonal causal mask, so a token only sees earlier tokens of its own sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .tokenize import Sequence

__all__ = ["Row", "build_rows", "pack_indices", "prefix_groups", "row_groups", "split_batches"]


def pack_indices(lengths: list[int], capacity: int) -> list[list[int]]:
    """First-fit decreasing: groups of sequence indices whose lengths sum to at most `capacity`."""
    rows: list[list[int]] = []
    free: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        for r, room in enumerate(free):
            if lengths[i] <= room:
                rows[r].append(i)
                free[r] -= lengths[i]
                break
        else:
            rows.append([i])
            free.append(capacity - lengths[i])
    return rows


@dataclass
class Row:
    """One packed row and where its trained tokens sit."""

    input_ids: torch.Tensor  # [L]
    position_ids: torch.Tensor  # [L]
    pred_index: torch.Tensor  # [n] positions whose next token is trained
    targets: torch.Tensor  # [n] the trained tokens
    token_index: torch.Tensor  # [n] where these tokens sit in the batch's flat token arrays
    seq_local: torch.Tensor  # [n] sequence index within the row (0..k-1)


def build_rows(sequences: list[Sequence], capacity: int) -> tuple[list[Row], torch.Tensor]:
    """Pack `sequences` into rows of at most `capacity` tokens.

    Returns the rows and `seq_of_token` [N]: for each trained token of the batch (in sequence order,
    the order of the flat arrays), the index of its sequence. A trained token at position 0 has no
    prediction and is skipped.
    """
    offsets: list[int] = []
    seq_of_token: list[int] = []
    for s, seq in enumerate(sequences):
        offsets.append(len(seq_of_token))
        seq_of_token.extend([s] * sum(seq.mask[1:]))
    rows: list[Row] = []
    for group in pack_indices([len(s) for s in sequences], capacity):
        ids: list[int] = []
        pos: list[int] = []
        pred: list[int] = []
        targets: list[int] = []
        token_index: list[int] = []
        local: list[int] = []
        for k, s in enumerate(sorted(group)):
            seq = sequences[s]
            start = len(ids)
            trained = [j for j in range(1, len(seq)) if seq.mask[j]]
            pred.extend(start + j - 1 for j in trained)
            targets.extend(seq.token_ids[j] for j in trained)
            token_index.extend(range(offsets[s], offsets[s] + len(trained)))
            local.extend([k] * len(trained))
            ids.extend(seq.token_ids)
            pos.extend(range(len(seq)))
        rows.append(
            Row(
                torch.tensor(ids),
                torch.tensor(pos),
                torch.tensor(pred, dtype=torch.long),
                torch.tensor(targets, dtype=torch.long),
                torch.tensor(token_index, dtype=torch.long),
                torch.tensor(local, dtype=torch.long),
            )
        )
    return rows, torch.tensor(seq_of_token, dtype=torch.long)


def prefix_groups(rows: list[Row], min_prefix: int = 16) -> list[tuple[int, list[Row]]]:
    """Single-sequence rows grouped by a context they start with, up to their first prediction.

    Returns (prefix length, rows) pairs; a row that shares no prefix of at least `min_prefix` tokens
    with another comes alone with length 0. A group's prefix is run once (see `SharedPrefix`), which
    saves prefix length x (members - 1) tokens of forward and backward. Rows with the same context
    (GRPO's rollouts of one task) start as one group; then, while it saves tokens, the two groups
    whose merge saves most are merged, their prefix shrinking to what both share. So SFT examples
    with distinct questions share their system prompt and tool specs, while two tasks' rollouts
    stay apart: sharing only the system prompt would cost each rollout its whole prompt's forward.
    """
    exact: dict[tuple[int, ...], list[Row]] = {}
    for row in rows:
        k = int(row.pred_index.min()) if row.pred_index.numel() else 0
        exact.setdefault(tuple(row.input_ids[:k].tolist()) if k >= min_prefix else (-id(row),), []).append(row)
    keys = [list(key) if key[0] >= 0 else [] for key in exact]  # a lone row's key: empty, shares nothing
    members = list(exact.values())
    lengths = [len(k) for k in keys]  # each group's prefix length; the keys themselves are not needed again
    common = [[_common_length(a, b) for b in keys] for a in keys]  # common[i][j]: shared prefix length
    while True:
        best, best_gain = None, 0
        for i in range(len(members)):
            for j in range(i + 1, len(members)):
                c = common[i][j]
                if c < min_prefix:
                    continue
                before = lengths[i] * (len(members[i]) - 1) + lengths[j] * (len(members[j]) - 1)
                gain = c * (len(members[i]) + len(members[j]) - 1) - before
                if gain > best_gain:
                    best, best_gain = (i, j), gain
        if best is None:
            break
        i, j = best
        lengths[i] = common[i][j]
        members[i] = members[i] + members[j]
        for x in range(len(members)):
            common[i][x] = common[x][i] = min(lengths[i], common[i][x], common[j][x])
        for table in (members, lengths, common):
            del table[j]
        for line in common:
            del line[j]
    return [(n if len(group) > 1 else 0, group) for n, group in zip(lengths, members, strict=True)]


def _common_length(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def split_batches(sequences: list[Sequence], batch_size: int | None) -> list[list[Sequence]]:
    """Split by trajectory: `batch_size` trajectories per optimizer step (None: all in one); no empty batch."""
    trajs = sorted({s.trajectory for s in sequences})
    size = batch_size or max(len(trajs), 1)
    chunks = [set(trajs[i : i + size]) for i in range(0, len(trajs), size)]
    batches = [[s for s in sequences if s.trajectory in chunk] for chunk in chunks]
    return [b for b in batches if b]


def row_groups(rows: list[Row], share_prefix: bool) -> list[tuple[int, list[Row]]]:
    """(shared prefix length, rows): with `share_prefix` (one-sequence rows), rows that start with the
    same prompt share its forward and backward (`SharedPrefix`); otherwise rows go one by one."""
    return prefix_groups(rows) if share_prefix else [(0, [row]) for row in rows]
