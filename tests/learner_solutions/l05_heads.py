"""Lesson 05, Your turns 1 and 2: ``my_split_heads(x, n_head)`` and ``my_merge_heads(y)``."""
from __future__ import annotations

import torch

from gpt_lesson import attention as A

from ._registry import Exercise

SPLIT = Exercise("05.1 split into heads", "check_split_heads")
MERGE = Exercise("05.2 merge the heads", "check_merge_heads")
C_LESSON, N_HEAD_LESSON = 12, 3  # the lesson's example sizes, in the notebook's namespace


@SPLIT.right
def view_transpose(x, n_head):
    B, T, C = x.shape
    return x.view(B, T, n_head, C // n_head).transpose(1, 2)


@SPLIT.right
def reshape_permute(x, n_head):
    B, T, C = x.shape
    return x.reshape(B, T, n_head, -1).permute(0, 2, 1, 3)


@SPLIT.right
def stack_of_slices(x, n_head):
    return torch.stack(x.split(x.size(-1) // n_head, dim=-1), dim=1)


@SPLIT.right
def chunk(x, n_head):
    return torch.stack(x.chunk(n_head, dim=-1), dim=1)


@SPLIT.right
def unflatten(x, n_head):
    return x.unflatten(-1, (n_head, -1)).transpose(1, 2)


@SPLIT.right
def slices_in_a_loop(x, n_head):
    hs = x.shape[-1] // n_head
    return torch.cat([x[..., i * hs:(i + 1) * hs].unsqueeze(1) for i in range(n_head)], dim=1)


@SPLIT.right
def channels_first(x, n_head):
    B, T, C = x.shape
    return x.transpose(1, 2).reshape(B, n_head, C // n_head, T).transpose(2, 3)


@SPLIT.right
def contiguous_copy(x, n_head):
    B, T, C = x.shape
    return x.view(B, T, n_head, C // n_head).permute(0, 2, 1, 3).contiguous()


@SPLIT.right
def negative_dims(x, n_head):
    return x.reshape(*x.shape[:-1], n_head, -1).transpose(-3, -2)


@SPLIT.wrong("MISSING_TRANSPOSE")
def view_straight_into_heads(x, n_head):
    B, T, C = x.shape
    return x.view(B, n_head, T, C // n_head)


@SPLIT.wrong("MISSING_TRANSPOSE")
def no_swap(x, n_head):
    B, T, C = x.shape
    return x.view(B, T, n_head, C // n_head)


@SPLIT.wrong("SPLIT_WRONG_ORDER")
def interleaved(x, n_head):
    B, T, C = x.shape
    return x.view(B, T, C // n_head, n_head).permute(0, 3, 1, 2)


@SPLIT.wrong("RAISED", says="take every size from the input")
def fixed_head_size(x, n_head):
    B, T, C = x.shape
    return x.view(B, T, n_head, 4).transpose(1, 2)


@SPLIT.wrong("RAISED", says="take every size from the input")
def fixed_n_head(x, n_head):
    B, T, C = x.shape
    return x.view(B, T, N_HEAD_LESSON, C // N_HEAD_LESSON).transpose(1, 2)


@SPLIT.wrong("RAISED", says="use //")
def float_head_size(x, n_head):
    B, T, C = x.shape
    return x.view(B, T, n_head, C / n_head).transpose(1, 2)


@SPLIT.wrong("DIMS_PERMUTED")
def swapped_the_wrong_axes(x, n_head):
    B, T, C = x.shape
    return x.view(B, T, n_head, C // n_head).transpose(0, 2)


@SPLIT.wrong("DIMS_PERMUTED")
def head_size_before_time(x, n_head):
    B, T, C = x.shape
    return x.view(B, T, n_head, C // n_head).permute(0, 2, 3, 1)


@SPLIT.wrong("CALLED_LIBRARY")
def split_library(x, n_head):
    return A.split_heads(x, n_head)


@SPLIT.wrong("SPLIT_WRONG_ORDER")
def stack_of_strided_slices(x, n_head):
    return torch.stack([x[..., i::n_head] for i in range(n_head)], dim=1)


@SPLIT.wrong("INPUT_MODIFIED")
def resizes_the_input(x, n_head):
    B, T, C = x.shape
    x.mul_(1.0).add_(0.0)
    x[:, 0] = 0.0  # overwrites the caller's first position
    return x.view(B, T, n_head, C // n_head).transpose(1, 2)


# --- merge
@MERGE.right
def contiguous_view(y):
    B, nh, T, hs = y.shape
    return y.transpose(1, 2).contiguous().view(B, T, nh * hs)


@MERGE.right
def permute_reshape(y):
    return y.permute(0, 2, 1, 3).reshape(y.size(0), y.size(2), -1)


@MERGE.right
def cat_of_heads(y):
    return torch.cat(y.unbind(dim=1), dim=-1)


@MERGE.right
def flatten(y):
    return y.transpose(1, 2).flatten(2)


@MERGE.right
def movedim(y):
    B, nh, T, hs = y.shape
    return y.movedim(1, 2).reshape(B, T, nh * hs)


@MERGE.right
def list_of_heads(y):
    return torch.cat([y[:, h] for h in range(y.shape[1])], dim=-1)


@MERGE.right
def einsum_identity(y):
    B, nh, T, hs = y.shape
    return torch.einsum("bhtd->bthd", y).reshape(B, T, nh * hs)


@MERGE.right
def reshape_after_transpose(y):
    B, nh, T, hs = y.shape
    return y.transpose(1, 2).reshape(B, T, -1)


@MERGE.wrong("MERGE_WITHOUT_TRANSPOSE")
def reshape_only(y):
    B, nh, T, hs = y.shape
    return y.reshape(B, T, nh * hs)


@MERGE.wrong("MERGE_WRONG_ORDER")
def channels_interleaved(y):
    return y.permute(0, 2, 3, 1).reshape(y.size(0), y.size(2), -1)


@MERGE.wrong("RAISED", says=".contiguous()")
def view_after_transpose(y):
    B, nh, T, hs = y.shape
    return y.transpose(1, 2).view(B, T, nh * hs)


@MERGE.wrong("HEADS_SUMMED")
def summed(y):
    return y.sum(dim=1)


@MERGE.wrong("HEADS_SUMMED")
def averaged(y):
    return y.mean(dim=1)


@MERGE.wrong("HEADS_CAT_POSITIONS")
def cat_along_time(y):
    return torch.cat(y.unbind(dim=1), dim=1)


@MERGE.wrong("RAISED", says="take every size from the input")
def fixed_channels(y):
    B, nh, T, hs = y.shape
    return y.transpose(1, 2).reshape(B, T, C_LESSON)


@MERGE.wrong("CALLED_LIBRARY")
def merge_library(y):
    return A.merge_heads(y)


@MERGE.wrong("DIMS_PERMUTED")
def time_and_channels_swapped(y):
    B, nh, T, hs = y.shape
    return y.permute(0, 1, 3, 2).reshape(B, nh * hs, T)


@MERGE.wrong("MERGE_WITHOUT_TRANSPOSE")
def transposed_the_wrong_axes(y):
    B, nh, T, hs = y.shape
    return y.transpose(2, 3).transpose(2, 3).reshape(B, T, nh * hs)


@MERGE.wrong("HEADS_LAST_ONLY")
def last_head_only(y):
    return y[:, -1]
