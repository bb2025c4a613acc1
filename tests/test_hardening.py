"""Issue 28, the library's half: no silent wrong result, and every bad argument named with its rule.

Each test covers a class of inputs (every attention function with every mask, every decoding path with
broken logits, every size that asks for too much memory), not one example.
"""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gpt_lesson import GPT, validation
from gpt_lesson import attention as A
from gpt_lesson.data import CharTokenizer, get_batch
from gpt_lesson.kv_cache import KVCache
from gpt_lesson.sampling import generate, next_token_probs, sample_next
from gpt_lesson.training import TrainConfig, estimate_loss, lr_at, micro_batches


@pytest.fixture
def tiny():
    torch.manual_seed(0)
    return GPT(10, 8, 2, 1, 6)


# --- 1. attention: the causal mask is never dropped ----------------------------------------------------

def _reference(q, k, v, mask, is_causal, scale=None):
    """softmax(q k^T * scale) v with what ``mask`` (1 = visible) and the causal triangle both allow."""
    scale = q.size(-1) ** -0.5 if scale is None else scale
    scores = (q.double() @ k.double().transpose(-2, -1)) * scale
    visible = torch.ones(scores.shape[-2:], dtype=torch.bool)
    if is_causal:
        visible = visible.tril()
    if mask is not None:
        visible = visible & (mask != 0)
    weights = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)
    return (weights @ v.double()).float()


def _masks(B, T_q, T_k):
    g = torch.Generator().manual_seed(3)
    lengths = [T_k, max(1, T_k - 2)][:B] + [T_k] * max(0, B - 2)
    padding = A.padding_mask(lengths, T_k)[:, None]  # (B, 1, 1, T_k): key padding
    random = torch.rand(B, 1, T_q, T_k, generator=g) > 0.4
    random[..., 0] = True  # every query sees key 0, so no row is empty whatever the causal triangle hides
    return {"none": None, "padding (float 0/1)": padding, "padding (bool)": padding.bool(),
            "random (bool)": random, "random (float)": random.float(), "2-D": random[0, 0]}


@pytest.mark.parametrize("shape", [(2, 3, 5, 5), (2, 3, 4, 6), (1, 2, 6, 4)], ids=["square", "wide", "tall"])
@pytest.mark.parametrize("mask_name", ["none", "padding (float 0/1)", "padding (bool)", "random (bool)",
                                       "random (float)", "2-D"])
@pytest.mark.parametrize("is_causal", [False, True])
def test_sdpa_attention_honours_every_mask_with_and_without_is_causal(shape, mask_name, is_causal):
    B, nh, T_q, T_k = shape
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, nh, T, 8, generator=g) for T in (T_q, T_k, T_k))
    mask = _masks(B, T_q, T_k)[mask_name]
    got = A.sdpa_attention(q, k, v, mask=mask, is_causal=is_causal)
    torch.testing.assert_close(got, _reference(q, k, v, mask, is_causal), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mask_name", ["none", "padding (float 0/1)", "padding (bool)", "random (bool)",
                                       "random (float)", "2-D"])
@pytest.mark.parametrize("causal", [False, True])
def test_naive_attention_with_every_mask_matches_the_reference(mask_name, causal):
    """naive_attention has no is_causal: the causal case is its mask combined with causal_mask(T)."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 5, 8, generator=g) for _ in range(3))
    mask = _masks(2, 5, 5)[mask_name]
    given = mask
    if causal:
        given = A.causal_mask(5) if mask is None else (mask != 0) & A.causal_mask(5).bool()
    out, _, weights = A.naive_attention(q, k, v, mask=given)
    torch.testing.assert_close(out, _reference(q, k, v, mask, causal), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out, A.sdpa_attention(q, k, v, mask=mask, is_causal=causal), atol=1e-5, rtol=1e-5)
    if causal:  # no weight on the future
        assert float(weights.triu(1).abs().max()) == 0.0


def test_one_query_attention_matches_the_last_row_of_causal_attention():
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 3, 5, 8, generator=g) for _ in range(3))
    got = A.one_query_attention(q[:, :, -1:], k, v, 8 ** -0.5)
    torch.testing.assert_close(got, _reference(q, k, v, None, True)[:, :, -1:], atol=1e-5, rtol=1e-5)


def test_padding_and_causal_together_leak_nothing_from_the_future():
    """The probe's case: change a future key and value; the outputs of earlier queries must not move."""
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, 2, 6, 4, generator=g) for _ in range(3))
    mask = A.padding_mask([6, 4], 6)[:, None]
    before = A.sdpa_attention(q, k, v, mask=mask, is_causal=True)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 3], v2[:, :, 3] = 100.0, 100.0
    after = A.sdpa_attention(q, k2, v2, mask=mask, is_causal=True)
    torch.testing.assert_close(after[:, :, :3], before[:, :, :3])


# --- 2. NaN or infinite logits: every decoding path refuses, with one message ------------------------

LOGITS_ERROR = r"logits hold NaN or infinite values, so there is no distribution to choose a token from"
DECODING = [dict(temperature=0), dict(temperature=1.0), dict(temperature=0.5, top_k=3), dict(top_p=0.9),
            dict(temperature=1e-5), dict(top_k=1)]


def _broken(value, row=None):
    torch.manual_seed(0)
    model = GPT(10, 8, 2, 1, 6)
    with torch.no_grad():
        model.lm_head.bias[3] = value  # one logit of every position: NaN, +inf
    return model


@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "+inf"])
@pytest.mark.parametrize("use_cache", [False, True], ids=["no cache", "kv cache"])
@pytest.mark.parametrize("settings", DECODING, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_every_decoding_path_refuses_non_finite_logits(value, use_cache, settings):
    model = _broken(value)
    with pytest.raises(ValueError, match=LOGITS_ERROR):
        generate(model, torch.zeros(2, 2, dtype=torch.long), 3, use_cache=use_cache,
                 generator=torch.Generator().manual_seed(0), **settings)


def _bad_rows():
    finite = torch.randn(3, 7, generator=torch.Generator().manual_seed(0))
    rows = {}
    for name, fill in [("nan", float("nan")), ("+inf", float("inf"))]:
        t = finite.clone()
        t[1, 2] = fill
        rows[name] = t
    t = finite.clone()
    t[2] = float("-inf")
    rows["row all -inf"] = t
    return rows


@pytest.mark.parametrize("kind", ["nan", "+inf", "row all -inf"])
@pytest.mark.parametrize("settings", DECODING, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_sample_next_and_next_token_probs_refuse_broken_logits(kind, settings):
    logits = _bad_rows()[kind]
    with pytest.raises(ValueError, match=LOGITS_ERROR):
        next_token_probs(logits, **settings)
    with pytest.raises(ValueError, match=LOGITS_ERROR):
        sample_next(logits, generator=torch.Generator().manual_seed(0), **settings)


def test_minus_inf_for_some_tokens_is_still_a_distribution():
    logits = torch.tensor([[0.0, float("-inf"), 1.0], [float("-inf"), 2.0, float("-inf")]])
    probs = next_token_probs(logits)
    assert torch.isfinite(probs).all() and probs[:, [1, 0]].tolist()[0][0] == 0.0
    assert sample_next(logits, temperature=0).tolist() == [[2], [1]]


# --- 3. bad arguments: the argument, the value and the rule ------------------------------------------

class _NotAGPT(torch.nn.Module):
    """A module with a GPT's config whose forward returns the input: not a language model."""

    def __init__(self):
        super().__init__()
        self.config = GPT(10, 8, 2, 1, 6).config
        self.lin = torch.nn.Linear(2, 2)

    def forward(self, idx, *args, **kwargs):
        return idx


def _cases(tiny):
    ids = torch.zeros(1, 3, dtype=torch.long)
    q = torch.randn(2, 2, 4, 8)
    other = torch.randn(3, 2, 4, 8)
    data = torch.randint(0, 10, (200,))
    cfg = TrainConfig(max_steps=10, progress=False)
    return [
        # raw torch errors before
        ("idx float to the model", lambda: tiny(torch.zeros(1, 3)), TypeError, r"idx must hold integer token ids"),
        ("idx int16 to the model", lambda: tiny(ids.short()), TypeError, r"idx must hold integer token ids .*int16"),
        ("idx on another device", lambda: tiny(ids.to("meta")), ValueError, r"idx is on meta but the model is on cpu"),
        ("generate idx on another device", lambda: generate(tiny, ids.to("meta"), 2), ValueError,
         r"idx is on meta but the model is on cpu"),
        ("targets of another shape", lambda: tiny(ids, torch.zeros(1, 2, dtype=torch.long)), ValueError,
         r"targets of shape \(1, 2\) .* must have idx's shape \(1, 3\)"),
        ("targets float", lambda: tiny(ids, torch.zeros(1, 3)), TypeError, r"targets must hold integer token ids"),
        ("float64 KV cache on a float32 model",
         lambda: tiny(ids, kv_cache=KVCache(1, 1, 2, 4, 6, dtype=torch.float64)), ValueError,
         r"kv_cache holds torch.float64 .* but the model is torch.float32"),
        ("KV cache dtype not a dtype", lambda: KVCache(1, 1, 2, 4, 6, dtype="float32"), TypeError,
         r"dtype='float32' must be a floating-point torch.dtype"),
        ("KV cache device='gpu'", lambda: KVCache(1, 1, 2, 4, 6, device="gpu"), ValueError,
         r"device='gpu' is not a device"),
        ("attention_scores batch mismatch", lambda: A.attention_scores(q, other), ValueError,
         r"q of shape \(2, 2, 4, 8\) and k of shape \(3, 2, 4, 8\) have batch dimensions"),
        ("naive_attention batch mismatch", lambda: A.naive_attention(q, q, other), ValueError,
         r"and v of shape \(3, 2, 4, 8\) have batch dimensions"),
        ("sdpa_attention batch mismatch", lambda: A.sdpa_attention(q, other, other), ValueError,
         r"and k of shape \(3, 2, 4, 8\) have batch dimensions"),
        ("one_query_attention batch mismatch", lambda: A.one_query_attention(q[:, :, :1], other, other, 0.3),
         ValueError, r"have batch dimensions"),
        ("weighted_sum batch mismatch", lambda: A.weighted_sum(torch.rand(2, 2, 4, 4), other), ValueError,
         r"weights of shape \(2, 2, 4, 4\) and v of shape \(3, 2, 4, 8\) have batch dimensions"),
        ("v with other positions", lambda: A.naive_attention(q, q, torch.randn(2, 2, 5, 8)), ValueError,
         r"k has 4 positions but v has 5"),
        ("k of another dtype", lambda: A.sdpa_attention(q, q.double(), q), ValueError,
         r"k is torch.float64 on cpu but q is torch.float32"),
        ("sdpa mask that does not broadcast", lambda: A.sdpa_attention(q, q, q, mask=torch.ones(3, 4)), ValueError,
         r"mask of shape \(3, 4\) does not broadcast"),
        ("sdpa is_causal='yes'", lambda: A.sdpa_attention(q, q, q, is_causal="yes"), TypeError,
         r"is_causal='yes' must be True or False"),
        ("sdpa dropout_p=2", lambda: A.sdpa_attention(q, q, q, dropout_p=2.0), ValueError, r"dropout_p=2.0 must be"),
        ("causal_mask device=5", lambda: A.causal_mask(4, device=5), TypeError, r"device=5 must be a device name"),
        ("causal_mask device='gpu'", lambda: A.causal_mask(4, device="gpu"), ValueError, r"device='gpu' is not a"),
        ("generate generator=5", lambda: generate(tiny, ids, 2, generator=5), TypeError,
         r"generator=5 must be a torch.Generator"),
        ("sample_next generator='a'", lambda: sample_next(torch.randn(1, 10), generator="a"), TypeError,
         r"generator='a' must be a torch.Generator"),
        ("greedy sample_next generator=1.5", lambda: sample_next(torch.randn(1, 10), 0, generator=1.5), TypeError,
         r"generator=1.5 must be a torch.Generator"),
        ("get_batch generator=5", lambda: get_batch(data, 6, 2, 5), TypeError, r"generator=5 must be a torch.Gen"),
        ("get_batch device='gpu'", lambda: get_batch(data, 6, 2, None, "gpu"), ValueError,
         r"device='gpu' is not a device"),
        ("generate with a module that is not a GPT", lambda: generate(_NotAGPT(), ids, 2), TypeError,
         r"model must be a language model of the course: model\(idx\) must return \(logits, loss\)"),
        ("lr_at('a')", lambda: lr_at("a", cfg), TypeError, r"step='a' must be an integer"),
        ("lr_at(step, cfg=dict)", lambda: lr_at(0, {}), TypeError, r"cfg must be a TrainConfig"),
        # NaN without a message before
        ("attention_scores scale=inf", lambda: A.attention_scores(q, q, scale=math.inf), ValueError,
         r"scale=inf must be a finite number"),
        ("sdpa_attention scale=nan", lambda: A.sdpa_attention(q, q, q, scale=math.nan), ValueError,
         r"scale=nan must be a finite number"),
        ("sdpa_attention scale=inf", lambda: A.sdpa_attention(q, q, q, scale=math.inf), ValueError,
         r"scale=inf must be a finite number"),
        ("one_query_attention scale=inf", lambda: A.one_query_attention(q[:, :, :1], q, q, math.inf), ValueError,
         r"scale=inf must be a finite number"),
        ("one_query_attention scale=-1", lambda: A.one_query_attention(q[:, :, :1], q, q, -1.0), ValueError,
         r"scale=-1.0 must be > 0"),
        ("all targets ignored", lambda: tiny(ids, torch.full((1, 3), -100)), ValueError,
         r"targets are all ignore_index=-100: the loss would average over no tokens"),
        ("next_token_probs of all -inf", lambda: next_token_probs(torch.full((1, 5), -math.inf)), ValueError,
         LOGITS_ERROR),
        # misleading messages before
        ("padding_mask([])", lambda: A.padding_mask([], 4), ValueError, r"lengths=\[\] is empty"),
        ("estimate_loss of a short split", lambda: estimate_loss(tiny, {"train": data, "val": data[:5]}, 2, 1),
         ValueError, r"splits\['val'\] has 5 tokens; it needs more than block_size=6"),
        ("decode of a 2-D numpy array", lambda: CharTokenizer("abc").decode(np.zeros((2, 2), dtype=np.int64)),
         ValueError, r"ids must be a 1-D sequence of token ids, got an array of shape \(2, 2\)"),
        # accepted silently before
        ("lr_at(-5)", lambda: lr_at(-5, cfg), ValueError, r"step=-5 must be >= 0"),
        ("micro_batches of mismatched x and y", lambda: micro_batches(torch.zeros(4, 3), torch.zeros(4, 2), 2),
         ValueError, r"x of shape \(4, 3\) and y of shape \(4, 2\) must have the same shape"),
    ]


CASE_NAMES = [c[0] for c in _cases(GPT(10, 8, 2, 1, 6))]


@pytest.mark.parametrize("name", CASE_NAMES)
def test_bad_arguments_are_named_with_their_rule(tiny, name):
    _, call, kind, message = next(c for c in _cases(tiny) if c[0] == name)
    with pytest.raises(kind, match=message):
        call()


def test_decode_reads_numpy_ids_as_the_integers_they_are():
    tok = CharTokenizer("abc")
    assert tok.decode(np.array([0, 2, 1])) == "acb"
    assert tok.decode([np.int64(1), np.int32(0)]) == "ba"
    with pytest.raises(ValueError, match=r"ids\[0\]=5 must be in \[0, vocab_size=3\)"):
        tok.decode(np.array([5]))
    with pytest.raises(TypeError, match=r"ids\[0\]=0.5 must be an integer"):
        tok.decode(np.array([0.5]))


def test_the_model_call_reads_no_token_id_on_the_way_in(tiny, monkeypatch):
    """The entry-point check of model(idx) is about kinds, shapes and devices: no min/max per call."""
    calls = []
    monkeypatch.setattr(validation, "check_token_ids", lambda *a, **k: calls.append(a))
    tiny(torch.zeros(2, 4, dtype=torch.long), torch.zeros(2, 4, dtype=torch.long))
    assert calls == []


# --- huge sizes: the argument and the bytes, before any allocation -----------------------------------

@pytest.mark.parametrize("call, name", [
    (lambda: GPT(65, 32, 4, 2, 200_000), "block_size=200000"),
    (lambda: GPT(10**9, 32, 4, 2, 16), "vocab_size=1000000000"),
    (lambda: GPT(65, 32, 4, 10**7, 16), "n_layer=10000000"),
    (lambda: KVCache(2, 10**9, 4, 8, 16), "batch_size=1000000000"),
    (lambda: generate(GPT(10, 8, 2, 1, 6), torch.zeros(1, 2, dtype=torch.long), 10**10), "max_new_tokens=10000000000"),
], ids=["block_size", "vocab_size", "n_layer", "kv batch_size", "max_new_tokens"])
def test_a_size_too_large_for_this_machine_is_named_with_its_bytes_before_allocating(call, name):
    with pytest.raises(ValueError, match=rf"{name} asks for .*: [\d,]+ bytes .*more than the .* of memory "
                                         r"available on this machine"):
        call()


def test_the_memory_limit_is_the_memory_available_now(monkeypatch):
    """The limit comes from the machine, not a fixed number: with 1 MB free, a 4 MB model is refused."""
    GPT(65, 32, 4, 2, 16)  # about 0.1 MB
    GPT(65, 32, 4, 2, 700)
    monkeypatch.setattr(validation, "available_memory", lambda: 10**6)
    GPT(65, 32, 4, 2, 16)
    with pytest.raises(ValueError, match=r"block_size=700 asks for a GPT of [\d,]+ numbers"):
        GPT(65, 32, 4, 2, 700)
    assert validation.available_memory.__name__ == "<lambda>"


def test_available_memory_is_a_positive_number_of_bytes():
    free = validation.available_memory()
    assert isinstance(free, int) and free > 0


def test_building_on_the_meta_device_allocates_nothing_and_is_not_refused():
    with torch.device("meta"):
        model = GPT(10**9, 32, 4, 2, 16)
    assert next(model.parameters()).device.type == "meta"


@pytest.mark.parametrize("B, T", [(1, 6), (3, 1)])
def test_every_decoding_mode_still_gives_the_same_tokens(tiny, B, T):
    """The new checks change no token: cached and uncached, greedy and sampled."""
    idx = torch.randint(0, 10, (B, T), generator=torch.Generator().manual_seed(B + T))
    for settings in DECODING:
        runs = [generate(tiny, idx, 8, use_cache=c, generator=torch.Generator().manual_seed(0), **settings)
                for c in (False, True)]
        assert torch.equal(runs[0], runs[1]), settings


def test_sdpa_attention_with_no_mask_still_matches_torch():
    q, k, v = (torch.randn(2, 2, 5, 4, generator=torch.Generator().manual_seed(i)) for i in range(3))
    for causal in (False, True):
        torch.testing.assert_close(A.sdpa_attention(q, k, v, is_causal=causal),
                                   F.scaled_dot_product_attention(q, k, v, is_causal=causal))


# --- 4. graded checks: torch and the runner cannot be replaced from an answer cell -------------------

def _graded_cell(answer: str, check_call: str = "check_softmax_weights(f)") -> None:
    """An answer cell, then the nbgrader test cell of a tiny assignment, in one namespace."""
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    from tools.nbgrader_course import assignment_notebook

    nb = new_notebook(cells=[new_markdown_cell("# 99 tiny\n"), new_markdown_cell("### Your turn 1: weights"),
                             new_code_cell("def f(scores):\n    raise NotImplementedError"), new_code_cell(check_call),
                             new_markdown_cell("<details><summary>Solution</summary>\n\n```python\n"
                                               "def f(scores):\n    return scores.softmax(-1)\n```\n</details>")])
    source, _ = assignment_notebook(nb, "99_tiny")
    test = next(c for c in source.cells if c.metadata.get("nbgrader", {}).get("grade")
                and not c.metadata["nbgrader"].get("solution")).source
    namespace: dict = {}
    exec("import torch\n" + answer, namespace)
    exec(test, namespace)


WRONG_WEIGHTS = "def f(scores):\n    return scores\n"  # no softmax at all
TORCH_ATTACKS = {
    "F.softmax": "import torch.nn.functional as F\nF.softmax = lambda x, dim=None, **k: x\n",
    "torch.softmax": "torch.softmax = lambda x, dim=None, **k: x\n",
    "Tensor.softmax": "torch.Tensor.softmax = lambda self, dim=None, **k: self\n",
    "torch._C._VariableFunctions": "class Fake:\n    def __getattr__(self, name):\n        return lambda *a, **k: True\n"
                                   "torch._C._VariableFunctions = Fake()\n",
}


@pytest.fixture
def torch_restored():
    from gpt_lesson.checks import runner

    yield
    runner._restore_torch(runner.torch_replacements())
    assert runner.torch_replacements() == []


@pytest.mark.parametrize("attack", list(TORCH_ATTACKS), ids=list(TORCH_ATTACKS))
def test_replacing_a_torch_function_before_the_graded_cell_fails_it(attack, torch_restored, capsys):
    with pytest.raises(AssertionError, match="the check or the library was replaced"):
        _graded_cell(WRONG_WEIGHTS + TORCH_ATTACKS[attack])
    assert "is not the course's own" in capsys.readouterr().out


@pytest.mark.parametrize("attack", list(TORCH_ATTACKS), ids=list(TORCH_ATTACKS))
def test_a_function_that_patches_torch_while_it_is_checked_fails_and_torch_is_put_back(attack, torch_restored):
    from gpt_lesson import checks
    from gpt_lesson.checks import runner

    body = "".join("    " + line + "\n" for line in TORCH_ATTACKS[attack].splitlines())
    namespace: dict = {}
    exec("import torch\ndef f(scores):\n" + body + "    return scores\n", namespace)
    result = checks.check_softmax_weights(namespace["f"])
    assert not result.passed and result.diagnosis == checks.TAMPERED, result.message
    assert runner.torch_replacements() == []  # put back by the check itself


def test_the_runner_fresh_checks_cannot_be_rebound(capsys):
    import gpt_lesson.checks.runner as runner

    real = runner.fresh_checks
    with pytest.raises(AttributeError, match="fresh_checks is what graded checks run; it cannot be replaced"):
        _graded_cell(WRONG_WEIGHTS + "import gpt_lesson.checks.runner as r\nimport types\n"
                     "r.fresh_checks = lambda: types.SimpleNamespace(check_softmax_weights=lambda *a, **k: None)\n")
    vars(runner)["fresh_checks"] = lambda: None  # the module's dict is not where the name is read
    with pytest.raises(AssertionError, match="no softmax|not yet"):
        _graded_cell(WRONG_WEIGHTS)
    vars(runner)["fresh_checks"] = real
    assert runner.fresh_checks is real
    with pytest.raises(AttributeError, match="cannot be removed"):
        del runner.library_replacements


def test_a_right_answer_still_passes_the_graded_cell(capsys):
    _graded_cell("def f(scores):\n    return torch.softmax(scores, dim=-1)\n")
    # the visible cases; the grader's own cases come from a course folder's grading/cases.json (none here)
    assert capsys.readouterr().out.count(": passed.") == 1


def test_patching_torch_before_an_ungraded_check_changes_no_verdict(monkeypatch):
    """Outside grading, a session that patched torch.allclose earlier still gets the true verdict."""
    from gpt_lesson import checks

    monkeypatch.setattr(torch, "allclose", lambda *a, **k: True)
    assert checks.check_softmax_weights(lambda s: s).diagnosis != checks.TAMPERED
    assert checks.check_softmax_weights(lambda s: s.softmax(-1)).passed


@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "+inf"])
def test_the_serving_scheduler_refuses_non_finite_logits(value):
    """Lesson 15's scheduler decodes greedily through the paged cache: argmax of NaN would be token 0."""
    from gpt_lesson.serving import scheduler as S

    model = _broken(value).eval()
    with pytest.raises(ValueError, match=LOGITS_ERROR):
        S.serve(model, [S.Request("a", [1, 2], 2)], num_blocks=4, tokens_per_block=4)
