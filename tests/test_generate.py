"""Sampling and the KV cache: cached, uncached and compiled decoding give the same tokens."""
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

from gpt_lesson import GPT, kv_cache
from gpt_lesson.runtime import decode_settings
from gpt_lesson.sampling import generate, next_token_probs, sample_next


@pytest.fixture
def model():
    torch.manual_seed(3)
    return GPT(30, 32, 4, 2, 16)


@pytest.mark.parametrize("attn_impl", ["naive", "sdpa"])
@pytest.mark.parametrize("prompt_len,new", [(1, 10), (5, 11), (12, 30), (16, 5), (40, 8)])
def test_greedy_with_and_without_cache_identical(attn_impl, prompt_len, new):
    # (12, 30) and (40, 8) run past block_size=16: the window slides and both paths crop.
    torch.manual_seed(7)
    m = GPT(30, 32, 4, 2, 16, attn_impl=attn_impl)
    idx = torch.randint(0, 30, (2, prompt_len))
    a = generate(m, idx, new, temperature=0)
    b = generate(m, idx, new, temperature=0, use_cache=True)
    assert a.shape == (2, prompt_len + new)
    assert torch.equal(a, b)
    assert torch.equal(a[:, :prompt_len], idx)


def test_sampling_with_and_without_cache_identical_given_a_seed(model):
    idx = torch.randint(0, 30, (1, 3))
    a = generate(model, idx, 12, temperature=0.8, top_k=5, generator=torch.Generator().manual_seed(1))
    b = generate(model, idx, 12, temperature=0.8, top_k=5, use_cache=True,
                 generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b)


def test_generate_restores_training_mode(model):
    model.train()
    generate(model, torch.zeros(1, 1, dtype=torch.long), 2)
    assert model.training
    model.eval()
    generate(model, torch.zeros(1, 1, dtype=torch.long), 2)
    assert not model.training


def test_greedy_is_argmax():
    logits = torch.tensor([[0.1, 2.0, -1.0, 1.9]])
    assert sample_next(logits, temperature=0).item() == 1
    assert torch.equal(next_token_probs(logits, temperature=0), torch.tensor([[0.0, 1.0, 0.0, 0.0]]))


def test_top_k_keeps_only_k_tokens():
    logits = torch.tensor([[3.0, 1.0, 2.0, 0.0, -1.0]])
    p = next_token_probs(logits, top_k=2)
    assert torch.equal(p[0] > 0, torch.tensor([True, False, True, False, False]))
    assert torch.isclose(p.sum(), torch.tensor(1.0))
    g = torch.Generator().manual_seed(0)
    draws = {sample_next(logits, top_k=2, generator=g).item() for _ in range(200)}
    assert draws == {0, 2}


def test_temperature_sharpens_and_flattens():
    logits = torch.tensor([[2.0, 1.0, 0.0]])
    cold, warm, hot = (next_token_probs(logits, t)[0, 0].item() for t in (0.5, 1.0, 2.0))
    assert cold > warm > hot > 1 / 3


# --- top-p (nucleus) sampling (issue 22) ---------------------------------------------------------


@pytest.fixture
def hf_warpers(monkeypatch):
    """Hugging Face's temperature, top-k and top-p warpers: the reference (nothing is downloaded)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper
    return TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper


def _hf_probs(warpers, logits, temperature=1.0, top_k=None, top_p=None):
    """The distribution Hugging Face's generate() samples from: temperature, then top-k, then top-p."""
    temperature_warper, top_k_warper, top_p_warper = warpers
    scores = temperature_warper(temperature)(None, logits.clone())
    if top_k is not None:
        scores = top_k_warper(top_k)(None, scores)
    if top_p is not None:
        scores = top_p_warper(top_p)(None, scores)
    return torch.softmax(scores, dim=-1)


def _random_logits(g, kind):
    """(B, vocab) logits: continuous values, or few distinct values (many ties), at random scales."""
    B, V = int(torch.randint(1, 6, (1,), generator=g)), int(torch.randint(2, 70, (1,), generator=g))
    if kind == "ties":
        return torch.randint(-3, 3, (B, V), generator=g).float() * float(torch.rand(1, generator=g) * 2 + 0.1)
    return torch.randn(B, V, generator=g) * float(torch.rand(1, generator=g) * 6 + 0.05)


@pytest.mark.parametrize("top_p", ["random", 1.0, 1e-6, 0.999999])
@pytest.mark.parametrize("kind", ["continuous", "ties"])
def test_top_p_matches_hugging_face(hf_warpers, kind, top_p):
    """The same distribution as Hugging Face's TopPLogitsWarper (with temperature and top-k before it) on
    random logits, batches of 1-5 rows. Where tokens tie with the least likely one kept, Hugging Face keeps
    those its sort happens to put first and this library keeps them all (as its top-k does): then the kept
    set is Hugging Face's plus exactly those tied tokens, renormalised."""
    g = torch.Generator().manual_seed(22)
    exact_rows = tied_rows = 0
    for trial in range(150):
        logits = _random_logits(g, kind)
        p = float(torch.rand(1, generator=g) * 0.98 + 0.01) if top_p == "random" else top_p
        temperature = (1.0, 0.7, 1.6)[trial % 3]
        top_k = None if trial % 2 else int(torch.randint(1, logits.size(1) + 1, (1,), generator=g))
        ours = next_token_probs(logits, temperature, top_k, top_p=p)
        ref = _hf_probs(hf_warpers, logits, temperature, top_k, p)
        before_p = next_token_probs(logits, temperature, top_k)  # the distribution top-p cuts
        for row in range(logits.size(0)):
            kept, ref_kept = ours[row] > 0, ref[row] > 0
            smallest = before_p[row][ref_kept].min()
            extra = kept & ~ref_kept
            assert not (ref_kept & ~kept).any(), (trial, row)  # every token Hugging Face keeps is kept
            assert torch.equal(before_p[row][extra], smallest.expand(int(extra.sum()))), (trial, row)
            if extra.any():
                tied_rows += 1
                assert torch.allclose(ours[row], before_p[row] * kept / before_p[row][kept].sum(), atol=1e-6)
            else:
                exact_rows += 1
                assert torch.allclose(ours[row], ref[row], atol=1e-6), (trial, row, p)
    assert exact_rows > 40  # the exact comparison really ran (on 59-400 of the rows)
    if kind == "ties" and top_p != 1.0:
        assert tied_rows > 0  # and ties at the edge of the nucleus did occur
    if top_p == 1.0:
        assert tied_rows == 0


def test_top_p_keeps_the_token_that_crosses_p():
    logits = torch.tensor([0.5, 0.3, 0.15, 0.05]).log()
    for p, kept in [(0.45, 1), (0.6, 2), (0.79, 2), (0.81, 3), (0.96, 4), (1.0, 4)]:
        probs = next_token_probs(logits, top_p=p)
        assert int((probs > 0).sum()) == kept, p
        expected = torch.tensor([0.5, 0.3, 0.15, 0.05])[:kept]
        assert torch.allclose(probs[:kept], expected / expected.sum())
    # The same numbers in another order: the kept tokens are the likely ones, wherever they are.
    shuffled = logits[[2, 0, 3, 1]]
    assert torch.equal(next_token_probs(shuffled, top_p=0.6) > 0, torch.tensor([False, True, False, True]))


def test_top_p_one_changes_nothing_and_a_tiny_p_is_greedy():
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(4, 3, 50, generator=g) * 3  # any leading dimensions
    assert torch.equal(next_token_probs(logits, top_p=1.0), next_token_probs(logits))
    assert torch.equal(next_token_probs(logits, top_p=1e-9), next_token_probs(logits, temperature=0))
    # Row by row, (B, T, vocab) and (vocab,) give what each row gives alone.
    assert torch.equal(next_token_probs(logits, top_p=0.8)[2, 1], next_token_probs(logits[2, 1], top_p=0.8))


def test_top_k_comes_before_top_p():
    logits = torch.tensor([[0.4, 0.3, 0.2, 0.1]]).log()
    # top-k 2 first: (4/7, 3/7), and 4/7 alone reaches p = 0.5. (top-p first would keep two.)
    assert torch.equal(next_token_probs(logits, top_k=2, top_p=0.5), torch.tensor([[1.0, 0.0, 0.0, 0.0]]))
    assert torch.equal(next_token_probs(logits, top_k=3, top_p=0.5) > 0, torch.tensor([[True, True, False, False]]))


def test_top_p_sampling_draws_only_from_the_nucleus():
    logits = torch.tensor([[1.0, 3.0, 0.0, 2.5, -1.0]])  # probabilities 0.08, 0.56, 0.03, 0.34, 0.01
    g = torch.Generator().manual_seed(0)
    draws = {sample_next(logits, top_p=0.85, generator=g).item() for _ in range(300)}
    assert draws == {1, 3}


def test_generate_with_top_p(model):
    idx = torch.randint(0, 30, (3, 4), generator=torch.Generator().manual_seed(2))
    kw = dict(temperature=0.9, top_k=20, top_p=0.8)
    a = generate(model, idx, 25, generator=torch.Generator().manual_seed(1), **kw)  # past block_size=16
    b = generate(model, idx, 25, use_cache=True, generator=torch.Generator().manual_seed(1), **kw)
    assert torch.equal(a, b)
    assert not torch.equal(a, generate(model, idx, 25, temperature=0.9, top_k=20,
                                       generator=torch.Generator().manual_seed(1)))  # top_p changes the draws
    greedy = generate(model, idx, 25, temperature=0)
    assert torch.equal(generate(model, idx, 25, top_p=1e-9, generator=torch.Generator().manual_seed(3)), greedy)


@pytest.mark.parametrize("bad,error,message", [
    (0, ValueError, r"top_p=0 must be in \(0, 1\]: the probability the kept tokens must reach; 1 keeps every token"),
    (-0.1, ValueError, r"top_p=-0.1 must be in \(0, 1\]"),
    (1.5, ValueError, r"top_p=1.5 must be in \(0, 1\]"),
    (float("nan"), ValueError, r"top_p=nan must be a finite number \(in \(0, 1\]"),
    ("0.9", TypeError, r"top_p='0.9' must be a number or None, got str"),
    (True, TypeError, r"top_p=True must be a number or None, got bool"),
])
def test_bad_top_p_is_named(model, bad, error, message):
    with pytest.raises(error, match=message):
        next_token_probs(torch.zeros(2, 30), top_p=bad)
    with pytest.raises(error, match=message):
        sample_next(torch.zeros(2, 30), temperature=0, top_p=bad)  # checked for greedy decoding too
    with pytest.raises(error, match=message):
        generate(model, torch.zeros(1, 1, dtype=torch.long), 3, top_p=bad)


# --- the compiled decode step (issue 18) ------------------------------------------------------------


def test_compile_needs_the_cache_and_a_bool(model):
    idx = torch.zeros(1, 1, dtype=torch.long)
    with pytest.raises(ValueError, match="compile=True compiles the cached one-token step; it needs use_cache=True"):
        generate(model, idx, 2, compile=True)
    with pytest.raises(TypeError, match="compile='yes' must be True or False"):
        generate(model, idx, 2, use_cache=True, compile="yes")


def _failing_compile(calls):
    """A stand-in for torch.compile whose compiled function first moves the cache on, then fails."""
    def fake_compile(fn, **options):
        assert options == {"fullgraph": True, "options": kv_cache.compile_options()}

        def compiled(model, idx, cache):
            calls.append(cache.length)
            for layer in cache.layers:
                layer.length += 1  # a half-done step: the fallback must undo it
            raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found\nmore lines")
        return compiled
    return fake_compile


def test_compile_falls_back_to_the_eager_step_with_a_warning(model, monkeypatch):
    calls = []
    monkeypatch.setattr(torch, "compile", _failing_compile(calls))
    idx = torch.randint(0, 30, (2, 3), generator=torch.Generator().manual_seed(0))
    expected = generate(model, idx, 20, temperature=0)  # crosses block_size=16: the window slides
    with pytest.warns(RuntimeWarning, match=r"cannot compile the decode step here \(RuntimeError: InvalidCxxCompiler: "
                                            r"No working C\+\+ compiler found\); decoding without compiling"):
        got = generate(model, idx, 20, temperature=0, use_cache=True, compile=True)
    assert torch.equal(got, expected)
    assert calls == [3]  # tried once in the call, at the first one-token step (after the 3-token prefill)
    # Nothing is remembered between calls (no state of the process): the next call tries once and says so again.
    with pytest.warns(RuntimeWarning, match="cannot compile the decode step here"):
        again = generate(model, idx, 20, temperature=0.8, top_k=5, use_cache=True, compile=True,
                         generator=torch.Generator().manual_seed(1))
    assert calls == [3, 3]
    assert torch.equal(again, generate(model, idx, 20, temperature=0.8, top_k=5,
                                       generator=torch.Generator().manual_seed(1)))


def test_a_compiled_step_remembers_its_own_failure(model, monkeypatch):
    calls = []
    monkeypatch.setattr(torch, "compile", _failing_compile(calls))
    step = kv_cache.CompiledDecodeStep()
    cache = kv_cache.KVCache.for_model(model, batch_size=1)
    model.eval()
    with torch.no_grad():
        model(torch.tensor([[1, 2]]), kv_cache=cache)
        with pytest.warns(RuntimeWarning, match="cannot compile"):
            first = step(model, torch.tensor([[3]]), cache)
        second = step(model, torch.tensor([[4]]), cache)  # no second try, no second warning
    assert calls == [2] and step.failure.startswith("RuntimeError: InvalidCxxCompiler") and cache.length == 4
    full, _ = model(torch.tensor([[1, 2, 3, 4]]))
    assert torch.allclose(first, full[:, 2], atol=1e-5) and torch.allclose(second, full[:, 3], atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("attn_impl", ["sdpa", "naive"])
def test_compiled_decoding_gives_the_same_tokens_and_compiles_once(attn_impl):
    """torch.compile of the one-token step (Inductor; needs a C++ compiler): the same greedy and sampled
    tokens as without a cache, past block_size too; the first call's two compilations (its first length,
    then the length as a symbol) serve every later call."""
    torch.manual_seed(7)
    m = GPT(30, 32, 4, 2, 16, attn_impl=attn_impl)
    idx = torch.randint(0, 30, (3, 5))  # batch 3, not 1 or n_layer=2: those sizes would be compiled apart
    sampled = dict(temperature=0.8, top_k=5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        assert torch.equal(generate(m, idx, 8, temperature=0, use_cache=True, compile=True),
                           generate(m, idx, 8, temperature=0))
        with torch._dynamo.config.patch(error_on_recompile=True):  # a second compilation would raise
            for new in (3, 30):  # 30 runs past block_size=16: the window slides, the cache is rebuilt
                assert torch.equal(generate(m, idx, new, temperature=0, use_cache=True, compile=True),
                                   generate(m, idx, new, temperature=0))
            for seed in (1, 2):
                assert torch.equal(
                    generate(m, idx, 25, use_cache=True, compile=True, generator=torch.Generator().manual_seed(seed),
                             **sampled),
                    generate(m, idx, 25, generator=torch.Generator().manual_seed(seed), **sampled))
    fallbacks = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert not fallbacks, fallbacks


@pytest.mark.slow
def test_compile_without_a_cxx_compiler_falls_back(tmp_path):
    """The real failure, in a fresh process: Inductor finds no C++ compiler (and no compiled graph in its cache)."""
    code = textwrap.dedent("""
        import warnings, torch
        from gpt_lesson import GPT
        from gpt_lesson.sampling import generate
        torch.manual_seed(0)
        m = GPT(20, 16, 2, 1, 8)
        idx = torch.tensor([[1, 2, 3]])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", RuntimeWarning)
            got = generate(m, idx, 12, temperature=0, use_cache=True, compile=True)
        print("identical", torch.equal(got, generate(m, idx, 12, temperature=0)))
        print("warnings", [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)])
    """)
    env = {**os.environ, "CXX": str(tmp_path / "no-such-compiler"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "TORCHINDUCTOR_FX_GRAPH_CACHE": "0", "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "identical True" in out.stdout
    assert "cannot compile the decode step here" in out.stdout and "decoding without compiling" in out.stdout


@pytest.mark.parametrize("capability", ["AVX2", "DEFAULT"])
@pytest.mark.parametrize("variable", [None, "default"])
def test_compile_options_follow_the_cpu(monkeypatch, capability, variable):
    """The one-row matmul pass only where PyTorch runs vector kernels; no on-disk graph cache under
    ATEN_CPU_CAPABILITY. PyTorch's public account of the CPU decides (no private Inductor module)."""
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    if variable:
        monkeypatch.setenv("ATEN_CPU_CAPABILITY", variable)
    else:
        monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    options = kv_cache.compile_options()
    assert ("post_grad_fusion_options" in options) == (capability != "DEFAULT")
    if capability != "DEFAULT":
        assert options["post_grad_fusion_options"] == {"decompose_mm_pass": {}}
    assert options.get("fx_graph_cache", True) is (variable is None)


def test_the_compile_options_on_this_cpu_unless_told_not_to():
    """In a fresh process: this machine has vector instructions; ATEN_CPU_CAPABILITY=default turns them off."""
    code = "from gpt_lesson.kv_cache import compile_options; print('post_grad_fusion_options' in compile_options())"
    for capability, expected in ((None, "True"), ("default", "False")):
        env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
        if capability:
            env["ATEN_CPU_CAPABILITY"] = capability
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.strip() == expected, (capability, out.stdout)


@pytest.mark.slow
def test_compile_after_a_native_compile_under_aten_cpu_capability_default(tmp_path):
    """Inductor's on-disk graph cache ignores ATEN_CPU_CAPABILITY: a graph cached by a native run came back
    vectorised and failed to build as plain C++ (then the step fell back). Without that cache it compiles."""
    code = textwrap.dedent("""
        import warnings, torch
        from gpt_lesson import GPT
        from gpt_lesson.sampling import generate
        torch.manual_seed(0)
        m = GPT(65, 128, 4, 2, 64, attn_impl="sdpa", dropout=0.0)
        idx = torch.randint(0, 65, (1, 4), generator=torch.Generator().manual_seed(1))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", RuntimeWarning)
            got = generate(m, idx, 12, temperature=0, use_cache=True, compile=True)
        print("identical", torch.equal(got, generate(m, idx, 12, temperature=0)))
        print("warnings", [str(w.message) for w in caught])
    """)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    env.pop("ATEN_CPU_CAPABILITY", None)
    for capability in (None, "default"):  # the native run fills the cache, the second would read it
        if capability:
            env["ATEN_CPU_CAPABILITY"] = capability
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        assert "identical True" in out.stdout and "warnings []" in out.stdout, (capability, out.stdout[-2000:])


def test_generate_leaves_the_process_settings_alone_and_the_caller_chooses(model):
    """generate() changes no thread count and no oneDNN switch; runtime.decode_settings() is the caller's choice."""
    onednn, threads = torch.backends.mkldnn.enabled, torch.get_num_threads()
    seen = []
    original = model.forward

    def spy(*args, **kwargs):
        seen.append((torch.backends.mkldnn.enabled, torch.get_num_threads()))
        return original(*args, **kwargs)

    model.forward = spy
    torch.set_num_threads(2)
    try:
        for use_cache in (True, False):
            seen.clear()
            generate(model, torch.zeros(1, 1, dtype=torch.long), 3, use_cache=use_cache)
            assert seen == [(onednn, 2)] * 3
        seen.clear()
        with decode_settings():
            generate(model, torch.zeros(1, 1, dtype=torch.long), 3, use_cache=True)
        assert seen == [(False, 1)] * 3
        assert torch.backends.mkldnn.enabled == onednn and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)


def test_generate_names_a_model_it_cannot_drive():
    with pytest.raises(TypeError, match="model must be a language model of the course .*got a Linear"):
        generate(torch.nn.Linear(2, 2), torch.zeros(1, 1, dtype=torch.long), 3)
    with pytest.raises(TypeError, match="model must be a language model .*got str"):
        generate("gpt", torch.zeros(1, 1, dtype=torch.long), 3)
