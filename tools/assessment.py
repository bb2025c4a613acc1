"""Summative assessment for the nbgrader course: variants from a teacher's secret seed, the grader's own
cases, a private question bank, the roster and a grades export with the plan's weights.

Used by ``python -m tools.nbgrader_course`` (``--secret-seed``, ``--roster``, ``--export-grades``); see
docs/teaching.md section 7. Nothing here is shipped to students: the builder writes its output into the
teacher's course folder (``grading/``, ``question_bank/``), never into the notebooks.

Which exercises have variants (the check the lesson calls decides):

==========================  ======================================================  ==============
lesson check                variant (``gpt_lesson.checks.variants``)                 lessons
==========================  ======================================================  ==============
``check_attention_scores``  scores / (temperature * d_k ** power), not / sqrt(d_k)   02 #1, 04 #1
``check_softmax_weights``   softmax(scores / temperature)                            02 #2, 04 #2
``check_causal_attention``  a causal head with a sliding window of W positions      03 #1, 03 #2
==========================  ======================================================  ==============

Every other exercise keeps the lesson's task and check in a seeded course (its cases for grading are the
check's ``hidden=True`` cases, which are public in the package): see :data:`NO_VARIANT` for why.
"""
from __future__ import annotations

import ast
import csv
import hashlib
import hmac
import json
import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Variant", "VARIANT_CHECKS", "NO_VARIANT", "derive_rng", "make_variant", "read_secret",
           "QUESTION_KINDS", "question_bank", "write_question_bank", "read_roster", "PLANS", "plan_weights", "rubrics",
           "rubric_markdown",
           "weighted_grades", "write_weighted_grades"]

REPO_ROOT = Path(__file__).resolve().parents[1]

# The lesson checks that have a graded variant, and the variant's check.
VARIANT_CHECKS = {
    "check_attention_scores": "check_variant_scores",
    "check_softmax_weights": "check_variant_softmax",
    "check_causal_attention": "check_variant_window",
}
# Why the other exercises keep the lesson's task in a seeded course (checked by tests/test_assessment.py: every
# check a lesson calls is in VARIANT_CHECKS or here).
NO_VARIANT = {
    "check_tokenizer": "not yet (another vocabulary is the natural twist; its check is not written)",
    "check_embeddings": "not yet (tok_emb + pos_emb has no small twist that keeps the lesson's point)",
    "check_split_heads": "not yet (another head layout is the natural twist)",
    "check_merge_heads": "not yet (as split_heads)",
    "check_feed_forward": "not yet (another expansion factor or activation is the natural twist)",
    "check_layer_norm": "not yet (RMSNorm would be the twist, and lesson 14 teaches it in public)",
    "check_block": "not yet (post-LN to pre-LN is already the lesson's own twist)",
    "check_gpt_forward": "not yet (tied to the lesson's model class)",
    "check_parameter_count": "not yet; the question bank's parameter-count questions vary the sizes",
    "check_load_source_weights": "not yet (tied to the source checkpoint's names)",
    "check_lr_schedule": "not yet (another warm-up or floor is the natural twist)",
    "check_train_step": "not yet (tied to lesson 09's training loop)",
    "check_estimate_loss": "not yet (tied to lesson 09's training loop)",
    "check_grad_accumulation": "not yet; the question bank's gradient-accumulation questions vary the sizes",
    "check_temperature_top_k": "not yet (another k or temperature is the natural twist)",
    "check_top_p": "not yet (another p is the natural twist)",
    "check_decode_step": "not yet (tied to lesson 10's cache layout)",
    "check_cached_attention": "not yet (tied to the model class)",
    "check_kv_cache_memory": "not yet; the question bank's KV-cache questions vary the sizes",
    "check_allreduce_average": "not yet (tied to torch.distributed's semantics)",
    "check_allreduce_bytes": "not yet",
    "check_effective_batch": "not yet; the question bank's gradient-accumulation questions cover it",
    "check_grad_accum_steps": "not yet; the question bank's gradient-accumulation questions cover it",
    "check_bpe_merge": "not yet", "check_bpe_encode": "not yet",
    "check_gpt2_pre_split": "not yet (tied to GPT-2's own pattern)",
    "check_rms_norm": "not yet", "check_rope": "not yet", "check_repeat_kv": "not yet",
    "check_locate": "not yet", "check_grow_table": "not yet", "check_free_sequence_blocks": "not yet",
}

_SECRET_MIN = 8


def read_secret(seed: str | None = None, seed_file: str | Path | None = None) -> bytes:
    """The teacher's secret, from ``--secret-seed`` or the first line of ``--secret-seed-file``."""
    if (seed is None) == (seed_file is None):
        raise ValueError("give exactly one of a secret seed and a seed file")
    if seed_file is not None:
        path = Path(seed_file)
        if not path.is_file():
            raise ValueError(f"seed file {path} does not exist")
        lines = path.read_text(encoding="utf-8").splitlines()
        seed = lines[0].strip() if lines else ""
    if not isinstance(seed, str) or len(seed) < _SECRET_MIN:
        raise ValueError(f"the secret seed must be a string of at least {_SECRET_MIN} characters (a guessable "
                         f"seed gives guessable variants), got {len(seed or '')} characters")
    return seed.encode("utf-8")


def derive_rng(secret: bytes, *parts: str) -> random.Random:
    """A random generator for one use of the secret (an exercise, a question kind): HMAC-SHA256 of the parts."""
    digest = hmac.new(secret, "/".join(parts).encode("utf-8"), hashlib.sha256).digest()
    return random.Random(int.from_bytes(digest, "big"))


# ----------------------------------------------------------------------------------------------
# Exercise variants


@dataclass
class Variant:
    """One exercise's variant: the check and its keyword arguments, the graded cases, the task and solution."""

    lesson_check: str
    check: str
    kwargs: dict  # the twist (power, temperature, window) and the visible sizes
    grading: list[dict]  # the grader's own cases: each the full keyword arguments of one more call
    task_key: str
    task_fields: dict
    solution: str
    rules: dict = field(default_factory=dict)  # the lesson's without=/using=, kept

    def call(self, fn: str, module: str) -> str:
        args = [fn] + [f"{k}={v!r}" for k, v in {**self.kwargs, **self.rules}.items()] + ["strict=True"]
        return f"{module}.{self.check}({', '.join(args)})"


def _sizes(rng: random.Random, n: int, shape: str, first_seed: int, *, min_t: int = 2) -> list[list]:
    out = []
    for i in range(n):
        seed = rng.randrange(1000, 10**6)
        B = rng.randint(1, 4)
        T = rng.randint(min_t, min_t + 5)
        if shape == "BT":
            out.append([seed, [B, T]])
        else:
            d = T if i == 0 and first_seed == 0 else rng.choice([d for d in (2, 4, 6, 8, 12, 16) if d != T])
            out.append([seed, [B, T, d]])
    return out


_SCALES = [(1.0, 1.0), (0.5, 2.0), (0.5, 0.5), (1.0, 2.0), (1.0, 0.5), (0.5, 4.0)]
_TEMPERATURES = [0.5, 2.0, 4.0, 0.25, 1.5, 3.0]


def _parse_call(call: str) -> tuple[str, str, dict]:
    node = ast.parse(call, mode="eval").body
    fn = ast.unparse(node.args[0]) if node.args else "fn"
    rules = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg in ("without", "using")}
    return node.func.id, fn, rules


def make_variant(secret: bytes, lesson: str, number: int, call: str) -> Variant | None:
    """The variant of exercise ``number`` of ``lesson`` (its check call ``call``), or None if it has none."""
    name, fn, rules = _parse_call(call)
    if name not in VARIANT_CHECKS:
        return None
    rng = derive_rng(secret, "variant", lesson, str(number))
    if name == "check_attention_scores":
        power, temperature = rng.choice(_SCALES)
        from gpt_lesson.checks.variants import divisor_text

        divisor = divisor_text(power, temperature)
        sizes = _sizes(rng, 4, "BTD", 0, min_t=3)
        expr = f"d_k ** {power!r}" if power != 0.5 else "d_k ** 0.5"
        expr = expr if temperature == 1 else f"({temperature!r} * {expr})"
        solution = (f"def {fn}(q, k):\n    d_k = q.size(-1)\n    return q @ k.transpose(-2, -1) / {expr}\n")
        return Variant(name, VARIANT_CHECKS[name], {"power": power, "temperature": temperature, "sizes": sizes[:2]},
                       [{"power": power, "temperature": temperature, "sizes": sizes[2:]}],
                       "variant_scores", {"fn": fn, "divisor": divisor}, solution, rules)
    if name == "check_softmax_weights":
        t = rng.choice(_TEMPERATURES)
        sizes = _sizes(rng, 4, "BT", 1, min_t=2)
        solution = (f"def {fn}(scores):\n    s = scores / {t!r}\n    e = (s - s.amax(dim=-1, keepdim=True)).exp()\n"
                    "    return e / e.sum(dim=-1, keepdim=True)\n")
        return Variant(name, VARIANT_CHECKS[name], {"temperature": t, "sizes": sizes[:2]},
                       [{"temperature": t, "sizes": sizes[2:]}], "variant_softmax", {"fn": fn, "temperature": t},
                       solution, rules)
    window = rng.randint(2, 4)
    sizes = _sizes(rng, 4, "BTD", 0, min_t=window + 2)
    mask = ("    ones = torch.ones(T, T, dtype=torch.bool)\n"
            f"    visible = torch.tril(ones) & torch.triu(ones, diagonal=-{window - 1})  # t - {window - 1} .. t\n")
    if rules.get("using") == "sdpa":
        solution = (f"def {fn}(q, k, v):\n    T = q.size(-2)\n{mask}"
                    "    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=visible)\n")
    else:
        solution = (f"def {fn}(q, k, v):\n    T, d_k = q.size(-2), q.size(-1)\n{mask}"
                    "    scores = (q @ k.transpose(-2, -1)) / d_k ** 0.5\n"
                    "    scores = scores.masked_fill(~visible, float(\"-inf\"))\n"
                    "    return torch.softmax(scores, dim=-1) @ v\n")
    return Variant(name, VARIANT_CHECKS[name], {"window": window, "sizes": sizes[:2]},
                   [{"window": window, "sizes": sizes[2:]}], "variant_window",
                   {"fn": fn, "window": window, "back": window - 1}, solution, rules)


# ----------------------------------------------------------------------------------------------
# The question bank: exam questions with worked answers, computed by gpt_lesson


def _q_attention_weight(rng: random.Random) -> dict:
    import torch

    from gpt_lesson.attention import attention_scores, attention_weights

    d = rng.choice([2, 3])
    q = [rng.randint(-2, 2) for _ in range(d)]
    keys = [[rng.randint(-2, 2) for _ in range(d)] for _ in range(3)]
    qt, kt = torch.tensor([[q]], dtype=torch.float64), torch.tensor([keys], dtype=torch.float64)
    scores = attention_scores(qt, kt)[0, 0]
    weights = attention_weights(scores)
    text = (f"A query q = {q} attends to three keys k1 = {keys[0]}, k2 = {keys[1]}, k3 = {keys[2]} (d_k = {d}, no "
            "mask). Give the scaled scores q.k / sqrt(d_k) and the softmax weight of k1, to 3 decimals.")
    answer = (f"scores = {[round(s, 3) for s in scores.tolist()]}; weights = softmax(scores) = "
              f"{[round(w, 3) for w in weights.tolist()]}; the weight of k1 is {weights[0].item():.3f}.")
    return {"question": text, "answer": answer, "value": round(weights[0].item(), 3)}


def _q_mask(rng: random.Random) -> dict:
    from gpt_lesson.attention import causal_mask

    T = rng.randint(4, 12)
    mask = causal_mask(T)
    hidden = int((mask == 0).sum().item())
    text = (f"A causal mask for T = {T} tokens: what is its shape, and how many of its entries are set to -inf in "
            "the scores before the softmax?")
    answer = (f"shape ({T}, {T}); the entries above the diagonal are hidden: T (T - 1) / 2 = {hidden}; "
              f"row t sees t + 1 positions, {int(mask.sum().item())} visible entries in all.")
    return {"question": text, "answer": answer, "value": hidden}


def _q_parameters(rng: random.Random) -> dict:
    from gpt_lesson.model import GPT, GPTConfig, count_parameters_by_part

    cfg = GPTConfig(vocab_size=rng.choice([65, 100, 256]), n_embd=rng.choice([16, 32, 48, 64]),
                    n_head=rng.choice([2, 4]), n_layer=rng.randint(1, 4), block_size=rng.choice([16, 32, 64]),
                    dropout=0.0)
    model = GPT(cfg)
    total, parts = model.num_parameters(), count_parameters_by_part(model)
    text = (f"A GPT of lesson 08 with vocab_size = {cfg.vocab_size}, block_size = {cfg.block_size}, "
            f"n_embd = {cfg.n_embd}, n_head = {cfg.n_head}, n_layer = {cfg.n_layer} (as lesson 08 builds it, "
            "with its own lm_head). How many trainable parameters does it have, and how many of them are in attention?")
    breakdown = ", ".join(f"{k} {v:,}" for k, v in parts.items())
    answer = (f"{total:,} in all ({breakdown}); attention holds {parts['attention']:,}. Computed by gpt_lesson.model.count_parameters_by_part.")
    return {"question": text, "answer": answer, "value": total}


def _q_kv_cache(rng: random.Random) -> dict:
    from gpt_lesson.experiments import kv_cache_bytes

    n_layer, n_embd = rng.choice([(12, 768), (24, 1024), (32, 4096), (6, 384)])
    T, batch = rng.choice([1024, 2048, 4096]), rng.choice([1, 4, 8])
    nbytes = rng.choice([2, 4])
    size = kv_cache_bytes(n_layer, T, n_embd, bytes_per_number=nbytes, batch_size=batch)
    text = (f"A decoder with n_layer = {n_layer}, n_embd = {n_embd} keeps a KV cache for {batch} sequence(s) of "
            f"T = {T} tokens, {nbytes} bytes per number. How large is the cache, in MiB?")
    answer = (f"2 (K and V) x {n_layer} x {T} x {n_embd} x {nbytes} bytes x {batch} = {size:,} bytes = "
              f"{size / 2**20:,.1f} MiB (gpt_lesson.experiments.kv_cache_bytes).")
    return {"question": text, "answer": answer, "value": size}


def _q_split_heads(rng: random.Random) -> dict:
    import torch

    from gpt_lesson.attention import split_heads

    n_head = rng.choice([2, 4, 8])
    head = rng.choice([4, 8, 16])
    B, T = rng.randint(1, 8), rng.randint(3, 64)
    shape = tuple(split_heads(torch.zeros(B, T, n_head * head), n_head).shape)
    text = (f"q has shape (B, T, C) = ({B}, {T}, {n_head * head}) and the layer has {n_head} heads. What shape does "
            "it have after the split into heads, and what is d_k?")
    answer = f"{shape} (B, n_head, T, head_size); d_k = head_size = C / n_head = {head}."
    return {"question": text, "answer": answer, "value": list(shape)}


def _q_effective_batch(rng: random.Random) -> dict:
    from gpt_lesson.distributed import effective_batch, grad_accum_steps_for

    micro, world = rng.choice([4, 8, 16]), rng.choice([2, 4, 8])
    target = micro * world * rng.choice([2, 4, 8])
    steps = grad_accum_steps_for(target, micro, world)
    text = (f"Training keeps a global batch of {target} sequences on {world} processes with micro-batches of "
            f"{micro}. How many gradient-accumulation steps does each process take per optimizer step?")
    answer = (f"{target} / ({micro} x {world}) = {steps} steps; check: effective batch = "
              f"{effective_batch(micro, steps, world)} (gpt_lesson.distributed).")
    return {"question": text, "answer": answer, "value": steps}


QUESTION_KINDS = {
    "attention_weight": _q_attention_weight,
    "causal_mask": _q_mask,
    "parameter_count": _q_parameters,
    "kv_cache_size": _q_kv_cache,
    "head_shapes": _q_split_heads,
    "grad_accumulation": _q_effective_batch,
}


def question_bank(secret: bytes, variants: int = 4) -> dict[str, list[dict]]:
    """``variants`` questions of each kind in :data:`QUESTION_KINDS`, drawn from the secret, with worked answers."""
    if isinstance(variants, bool) or not isinstance(variants, int) or not 1 <= variants <= 50:
        raise ValueError(f"variants must be a whole number from 1 to 50, got {variants!r}")
    return {kind: [make(derive_rng(secret, "question", kind, str(i))) for i in range(variants)]
            for kind, make in QUESTION_KINDS.items()}


def write_question_bank(bank: dict[str, list[dict]], folder: Path) -> list[Path]:
    """``questions.md`` (for an exam paper), ``answers.md`` (the key) and ``bank.json`` in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    q_lines, a_lines = ["# Question bank: questions\n"], ["# Question bank: answer key (teacher only)\n"]
    for kind, items in bank.items():
        q_lines.append(f"\n## {kind.replace('_', ' ')}\n")
        a_lines.append(f"\n## {kind.replace('_', ' ')}\n")
        for i, item in enumerate(items, 1):
            q_lines.append(f"{i}. {item['question']}\n")
            a_lines.append(f"{i}. {item['answer']}\n")
    paths = [folder / "questions.md", folder / "answers.md", folder / "bank.json"]
    paths[0].write_text("".join(q_lines), encoding="utf-8")
    paths[1].write_text("".join(a_lines), encoding="utf-8")
    paths[2].write_text(json.dumps(bank, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return paths


# ----------------------------------------------------------------------------------------------
# Roster and grades


_STUDENT_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]*")


def read_roster(path: str | Path) -> list[dict]:
    """Students from a CSV with an ``id`` column (and optionally ``first_name``, ``last_name``, ``email``:
    the columns of ``nbgrader db student import``)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"roster {path} does not exist")
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None or "id" not in reader.fieldnames:
            raise ValueError(f"roster {path}: the first row must name the columns, one of them 'id' (also "
                             f"first_name, last_name, email), got {reader.fieldnames!r}")
        rows = list(reader)
    students, seen = [], set()
    for n, row in enumerate(rows, 2):
        sid = (row.get("id") or "").strip()
        if not _STUDENT_ID_RE.fullmatch(sid):
            raise ValueError(f"roster {path}, line {n}: student id {sid!r} must be letters, digits, '_', '.', '@' "
                             "or '-' (it names the student's folder in submitted/)")
        if sid in seen:
            raise ValueError(f"roster {path}, line {n}: student id {sid!r} appears twice")
        seen.add(sid)
        students.append({"id": sid, **{k: (row.get(k) or "").strip() or None
                                       for k in ("first_name", "last_name", "email")}})
    if not students:
        raise ValueError(f"roster {path} lists no student")
    return students


_WEIGHT_ROW_RE = re.compile(r"^\|\s*([^|]+?)\s*\|\s*(\d+(?:\.\d+)?)\s*%\s*\|\s*([^|]*)\|\s*([^|]*)\|", re.M)
_LESSONS_RE = re.compile(r"lessons?\s+(\d\d)(?:-(\d\d))?")
_ASSIGNMENT_RE = re.compile(r"assignment `([\w-]+)`")
_BONUS_RE = re.compile(r"Lesson (\d\d)'s assignment counts as bonus points towards the (\w+) part")
_PLAN_RE = re.compile(r"^### Plan `(\w+)`[^\n]*\n", re.M)
PLANS = ("exam", "project")  # the plans of docs/teaching.md section 2; the first is the default


def _section(teaching: str | Path, number: int) -> str:
    text = Path(teaching).read_text(encoding="utf-8")
    m = re.search(rf"^## {number}\. [^\n]*\n(.*?)(?=^## {number + 1}\.|\Z)", text, re.S | re.M)
    if m is None:
        raise ValueError(f"{teaching}: no '## {number}.' section")
    return m.group(1)


def plan_weights(teaching: str | Path = REPO_ROOT / "docs" / "teaching.md", plan: str = "exam") -> dict:
    """An assessment plan's parts, read from section 2 of docs/teaching.md (the one source of truth):
    ``{"parts": [{"name", "weight", "lessons", "assignments"}], "bonus": {lesson: part}}``. The section holds
    one table per plan, each under a ``### Plan `NAME` ...`` heading (a section with a single table and no such
    heading is the ``exam`` plan). A part whose "How it is graded" column does not name nbgrader has no lessons
    (its grades come from elsewhere); a part that names ``assignment `NAME` `` grades that nbgrader assignment."""
    text = Path(teaching).read_text(encoding="utf-8")
    m = re.search(r"^## 2\. Assessment plan\n(.*?)^## 3\.", text, re.S | re.M)
    if m is None:
        raise ValueError(f"{teaching}: no '## 2. Assessment plan' section")
    section = m.group(1)
    pieces = _PLAN_RE.split(section)  # [before, name1, body1, name2, body2, ...]
    tables = {pieces[i]: pieces[i + 1] for i in range(1, len(pieces), 2)} or {"exam": section}
    if plan not in tables:
        raise ValueError(f"{teaching}: no plan {plan!r} in section 2 (its plans: {', '.join(sorted(tables))})")
    parts = []
    for name, weight, what, how in _WEIGHT_ROW_RE.findall(tables[plan]):
        lessons: list[str] = []
        lm = _LESSONS_RE.search(what)
        if lm and "nbgrader" in how:  # a part graded elsewhere (the oral exam) has no assignments
            a, b = int(lm.group(1)), int(lm.group(2) or lm.group(1))
            lessons = [f"{n:02d}" for n in range(a, b + 1)]
        named = _ASSIGNMENT_RE.findall(what) if "nbgrader" in how else []
        parts.append({"name": name, "weight": float(weight), "lessons": lessons, "assignments": named})
    total = sum(p["weight"] for p in parts)
    if not parts or not math.isclose(total, 100.0):
        raise ValueError(f"{teaching}: the {plan} plan's weights must add up to 100 %, got {total} from {parts}")
    bonus = {lesson: part for lesson, part in _BONUS_RE.findall(section)}
    return {"parts": parts, "bonus": bonus}


# A question's rubric line, "- Q1 (topic): what earns it (1); ...", in the guide's English or Chinese (full-width
# parentheses, colon and semicolons: "- Q1（主题）：……（1）；……（1）。").
_QUESTION_RUBRIC_RE = re.compile(r"^- (Q\d+) ?[(（][^\n]*?[)）][:：](.*?)(?=^- |^\n|\Z)", re.S | re.M)
_CRITERION_RE = re.compile(r"\s*(.+?)\s*[(（](\d+)[)）]\s*(?:[;；]|[.。]?\s*$)", re.S)
_PROJECT_ROW_RE = re.compile(r"^\|\s*([^|]+?)\s*\|\s*(\d+)\s*\|\s*([^|]+?)\s*\|\s*([^|]+?)\s*\|\s*([^|]+?)\s*\|\s*$",
                             re.M)
_PROJECT_TABLE_RE = re.compile(r"^\| (?:Criterion \| Points \| Full \| Partial \| None|评分项 \| 分值 \| 完全达到 \| "
                               r"部分达到 \| 未达到) \|\n\|[-| ]+\|\n((?:\|.*\n?)+)", re.M)
# The teacher's guide of each edition: the rubrics of a course in that language come from it.
TEACHING = {"en": REPO_ROOT / "docs" / "teaching.md", "zh": REPO_ROOT / "docs" / "teaching.zh-CN.md"}


def rubrics(teaching: str | Path = TEACHING["en"]) -> dict[str, list[dict]]:
    """The rubrics of the work graded by hand, read from the teacher's guide (docs/teaching.md, or
    docs/teaching.zh-CN.md for the Chinese course): lesson 11's questions (section 2, "Rubric for Q1-Q3":
    ``{"Q1": [{"criterion", "points"}, ...]}``) and the project (section 1's table:
    ``{"project": [{"criterion", "points", "full", "partial", "none"}, ...]}``)."""
    out: dict[str, list[dict]] = {}
    plan = _section(teaching, 2)
    for question, body in _QUESTION_RUBRIC_RE.findall(plan):
        body = " ".join(body.split())
        criteria = [{"criterion": c.strip(), "points": int(p)} for c, p in _CRITERION_RE.findall(body)]
        if not criteria or sum(len(c["criterion"]) for c in criteria) < len(body) // 2:
            raise ValueError(f"{teaching}: {question}'s rubric must list criteria as 'what earns it (N); ...', "
                             f"got {body[:80]!r}")
        out[question] = criteria
    glance = _section(teaching, 1)
    m = _PROJECT_TABLE_RE.search(glance)
    if m is not None:
        out["project"] = [{"criterion": c, "points": int(p), "full": f, "partial": part, "none": none}
                          for c, p, f, part, none in _PROJECT_ROW_RE.findall(m.group(1))]
    for key, criteria in out.items():
        if not criteria or any(c["points"] < 1 for c in criteria):
            raise ValueError(f"{teaching}: the rubric of {key} must have criteria of at least 1 point each, "
                             f"got {criteria}")
    return out


_SHEET = {
    "en": {"title": "# Rubrics for grading by hand",
           "intro": "From docs/teaching.md (sections 1 and 2). Grade each answer cell (Q1-Q3 of lesson 11) and each of "
                    "the project's task cells in nbgrader's formgrader; a criterion is met in full or not (the "
                    "project's: full, partial or none).",
           "project": "The project", "question": "Lesson 11, {key}", "points": "{title} ({points} points)",
           "item": "- **{points}**: {criterion}", "levels": ". Full: {full}. Partial: {partial}. None: {none}."},
    "zh": {"title": "# 人工评分的评分标准",
           "intro": "出自 docs/teaching.zh-CN.md（第 1 节和第 2 节）。在 nbgrader 的 formgrader 里给每个答案单元格（第 11 课的 "
                    "Q1–Q3）和项目的每个任务单元格评分；每一条评分项要么完全达到，要么没有达到（项目的评分项分为完全达到、"
                    "部分达到和未达到）。",
           "project": "项目", "question": "第 11 课 {key}", "points": "{title}（{points} 分）",
           "item": "- **{points} 分**：{criterion}", "levels": "。完全达到：{full}。部分达到：{partial}。未达到：{none}。"},
}


def rubric_markdown(rubric: dict[str, list[dict]], lang: str = "en") -> str:
    """The graders' sheet (``grading/rubric.md`` of the course folder): each rubric with its points, in the
    course's language (``"en"`` or ``"zh"``)."""
    if lang not in _SHEET:
        raise ValueError(f"lang must be one of {sorted(_SHEET)}, got {lang!r}")
    words = _SHEET[lang]
    lines = [words["title"], "", words["intro"], ""]
    for key, criteria in rubric.items():
        title = words["project"] if key == "project" else words["question"].format(key=key)
        lines += ["## " + words["points"].format(title=title, points=sum(c["points"] for c in criteria)), ""]
        for c in criteria:
            line = words["item"].format(points=c["points"], criterion=c["criterion"])
            if "full" in c:
                line = line.rstrip("。.") + words["levels"].format(full=c["full"].rstrip("。."),
                                                                  partial=c["partial"].rstrip("。."),
                                                                  none=c["none"].rstrip("。."))
            lines.append(line)
        lines.append("")
    return "\n".join(lines)


def gradebook_path_ready() -> None:
    """nbgrader's Gradebook runs ``alembic`` by name when it opens a database: put this environment's
    scripts on PATH if it is not found (a course tool run as ``python -m`` without the venv activated)."""
    import os
    import shutil
    import sys

    if shutil.which("alembic") is None:
        os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


def weighted_grades(db_url: str, plan: dict) -> tuple[list[str], list[dict]]:
    """One row per student of the gradebook (non-submitters included, with 0): each part's percentage and the
    weighted total of the parts nbgrader grades; a part graded elsewhere (the oral exam) stays empty."""
    from nbgrader.api import Gradebook, MissingEntry

    gradebook_path_ready()
    parts = plan["parts"]
    with Gradebook(db_url) as gb:
        assignments = {a.name: a for a in gb.assignments}
        by_lesson = {name[:2]: name for name in assignments if re.match(r"\d\d_", name)}
        rows = []
        for student in sorted(gb.students, key=lambda s: s.id):
            row = {"student_id": student.id, "last_name": student.last_name or "",
                   "first_name": student.first_name or "", "email": student.email or ""}
            total, graded_weight = 0.0, 0.0
            for part in parts:
                names = [by_lesson[lesson] for lesson in part["lessons"] if lesson in by_lesson]
                names += [a for a in part.get("assignments", []) if a in assignments and a not in names]
                if not names:
                    row[f"{part['name']} (%)"] = ""
                    continue
                score = max_score = 0.0
                for name in names:
                    max_score += assignments[name].max_score
                    try:
                        score += gb.find_submission(name, student.id).score
                    except MissingEntry:
                        pass  # not submitted: 0
                for lesson, target in plan["bonus"].items():
                    if target.lower() == part["name"].lower() and lesson in by_lesson:
                        try:
                            score += gb.find_submission(by_lesson[lesson], student.id).score
                        except MissingEntry:
                            pass
                percent = min(100.0, 100.0 * score / max_score) if max_score else 0.0
                row[f"{part['name']} (%)"] = f"{percent:.1f}"
                total += part["weight"] * percent / 100.0
                graded_weight += part["weight"]
            row["weighted total (of 100)"] = f"{total:.1f}"
            row["weight graded so far (%)"] = f"{graded_weight:g}"
            rows.append(row)
    header = ["student_id", "last_name", "first_name", "email"] + [f"{p['name']} (%)" for p in parts] + [
        "weighted total (of 100)", "weight graded so far (%)"]
    return header, rows


def write_weighted_grades(db_url: str, out: Path, plan: dict) -> int:
    header, rows = weighted_grades(db_url, plan)
    with open(out, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)
    return len(rows)
