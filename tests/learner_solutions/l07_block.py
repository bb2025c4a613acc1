"""Lesson 07, Your turn 2: ``pre_ln_block(x, ln1, sa, ln2, ffwd)``, the pre-LN block."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from gpt_lesson import model as M

from ._registry import Exercise

EX = Exercise("07.2 from post-LN to pre-LN", "check_block")


@EX.right
def lesson(x, ln1, sa, ln2, ffwd):
    x = x + sa(ln1(x))
    x = x + ffwd(ln2(x))
    return x


@EX.right
def walrus(x, ln1, sa, ln2, ffwd):
    return (h := x + sa(ln1(x))) + ffwd(ln2(h))


@EX.right
def loop_over_sublayers(x, ln1, sa, ln2, ffwd):
    for norm, sublayer in ((ln1, sa), (ln2, ffwd)):
        x = torch.add(x, sublayer(norm(x)))
    return x


@EX.right
def named_steps(x, ln1, sa, ln2, ffwd):
    attn_in = ln1(x)
    stream = x + sa(attn_in)
    ffwd_in = ln2(stream)
    return stream + ffwd(ffwd_in)


@EX.right
def add_method(x, ln1, sa, ln2, ffwd):
    x = sa(ln1(x)).add(x)
    return ffwd(ln2(x)).add(x)


@EX.right
def clone_then_in_place(x, ln1, sa, ln2, ffwd):
    x = x.clone()
    x += sa(ln1(x))
    x += ffwd(ln2(x))
    return x


@EX.right
def forward_methods(x, ln1, sa, ln2, ffwd):
    x = x + sa.forward(ln1.forward(x))
    return x + ffwd.forward(ln2.forward(x))


@EX.right
def recomputed(x, ln1, sa, ln2, ffwd):
    return x + sa(ln1(x)) + ffwd(ln2(x + sa(ln1(x))))


# --- wrong answers
@EX.wrong("POST_LN")
def post_ln(x, ln1, sa, ln2, ffwd):
    x = ln1(x + sa(x))
    return ln2(x + ffwd(x))


@EX.wrong("HALF_PRE_LN")
def half_fixed(x, ln1, sa, ln2, ffwd):
    x = x + sa(ln1(x))
    return ln2(x + ffwd(x))


@EX.wrong("LN_ON_STREAM")
def ln_on_the_stream(x, ln1, sa, ln2, ffwd):
    x = ln1(x)
    x = x + sa(x)
    x = ln2(x)
    return x + ffwd(x)


@EX.wrong("MISSING_RESIDUAL")
def no_residuals(x, ln1, sa, ln2, ffwd):
    return ffwd(ln2(sa(ln1(x))))


@EX.wrong("MISSING_RESIDUAL")
def ffn_residual_missing(x, ln1, sa, ln2, ffwd):
    x = x + sa(ln1(x))
    return ffwd(ln2(x))


@EX.wrong("LAYER_NORMS_SWAPPED")
def norms_swapped(x, ln1, sa, ln2, ffwd):
    x = x + sa(ln2(x))
    return x + ffwd(ln1(x))


@EX.wrong("FFN_READS_OLD_X")
def parallel_sublayers(x, ln1, sa, ln2, ffwd):
    return x + sa(ln1(x)) + ffwd(ln2(x))


@EX.wrong("NO_LAYER_NORM")
def no_norms(x, ln1, sa, ln2, ffwd):
    x = x + sa(x)
    return x + ffwd(x)


@EX.wrong("INPUT_MODIFIED")
def in_place_on_the_input(x, ln1, sa, ln2, ffwd):
    x += sa(ln1(x))
    x += ffwd(ln2(x))
    return x


@EX.wrong("NOT_DETERMINISTIC")
def residual_dropout_left_on(x, ln1, sa, ln2, ffwd):
    x = x + F.dropout(sa(ln1(x)), 0.1)
    return x + F.dropout(ffwd(ln2(x)), 0.1)


@EX.wrong("LN_REUSED")
def ln1_twice(x, ln1, sa, ln2, ffwd):
    x = x + sa(ln1(x))
    return x + ffwd(ln1(x))


@EX.wrong("SUBLAYERS_SWAPPED")
def ffn_first(x, ln1, sa, ln2, ffwd):
    x = x + ffwd(ln2(x))
    return x + sa(ln1(x))


@EX.wrong("RESIDUAL_DOUBLED")
def input_added_twice(x, ln1, sa, ln2, ffwd):
    h = x + x + sa(ln1(x))
    return h + ffwd(ln2(h))


@EX.wrong("CALLED_LIBRARY")
def library_block(x, ln1, sa, ln2, ffwd):
    block = M.Block(x.size(-1), 1, 8)
    block.ln1, block.sa, block.ln2, block.ffwd = ln1, sa, ln2, ffwd
    return block(x)


@EX.wrong("INPUT_MODIFIED")
def resets_a_layer_norm(x, ln1, sa, ln2, ffwd):
    with torch.no_grad():
        ln1.weight.fill_(1.0)
    x = x + sa(ln1(x))
    return x + ffwd(ln2(x))


@EX.wrong("MISSING_RESIDUAL", "STEP_DIFFERS")
def residual_only_at_the_end(x, ln1, sa, ln2, ffwd):
    return x + ffwd(ln2(sa(ln1(x))))
