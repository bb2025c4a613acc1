"""The training loop and checkpoints: reproducible, learning, accumulation-exact, safe on disk."""
from __future__ import annotations

import math
from dataclasses import asdict

import pytest
import torch

from gpt_lesson.data import get_batch
from gpt_lesson.model import GPT
from gpt_lesson.training import (
    History,
    TrainConfig,
    estimate_loss,
    evaluate_split,
    load_checkpoint,
    lr_at,
    micro_batches,
    pick_device,
    save_checkpoint,
    set_seed,
    train,
)

VOCAB = 12


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models gain nothing from intra-op threads, and on a busy 2-core machine they lose a lot."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tokens() -> torch.Tensor:
    """A learnable synthetic text: a repeating pattern with some seeded noise, 4,000 tokens."""
    g = torch.Generator().manual_seed(0)
    pattern = torch.arange(VOCAB).repeat(400)
    noise = torch.randint(0, VOCAB, pattern.shape, generator=g)
    keep = torch.rand(pattern.shape, generator=g) < 0.9
    return torch.where(keep, pattern, noise)


def tiny_model(seed: int = 0, dropout: float = 0.0) -> GPT:
    torch.manual_seed(seed)
    return GPT(VOCAB, 16, 2, 2, 16, dropout=dropout)


def quiet(**kw) -> TrainConfig:
    base = dict(max_steps=6, batch_size=8, eval_interval=3, eval_iters=2, progress=False)
    base.update(kw)
    return TrainConfig(**base)


def without_time(hist: History) -> dict:
    d = hist.to_dict()
    d.pop("seconds")
    return d


def assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


def max_abs_diff(a: torch.nn.Module, b: torch.nn.Module) -> float:
    sb = b.state_dict()
    return max((v - sb[k]).abs().max().item() for k, v in a.state_dict().items())


# --- reproducibility and learning ----------------------------------------------------------

def test_same_seed_gives_identical_runs(tokens):
    train_data, val_data = tokens[:3500], tokens[3500:]
    cfg = quiet(grad_accum_steps=2)
    a, b = tiny_model(dropout=0.1), tiny_model(dropout=0.1)  # dropout draws from the seeded RNG
    ha, hb = train(a, train_data, val_data, cfg), train(b, train_data, val_data, cfg)
    assert_same_weights(a, b)
    assert without_time(ha) == without_time(hb)
    c = tiny_model(dropout=0.1)
    hc = train(c, train_data, val_data, quiet(grad_accum_steps=2, seed=7))
    assert hc.loss != ha.loss and max_abs_diff(a, c) > 1e-4


def test_loss_goes_down_on_a_tiny_model(tokens):
    model = tiny_model()
    hist = train(model, tokens[:3500], tokens[3500:],
                 quiet(max_steps=80, batch_size=16, learning_rate=1e-2, eval_interval=40, eval_iters=4))
    assert hist.val[0] == pytest.approx(math.log(VOCAB), abs=0.1)  # near-uniform predictions at first
    assert hist.val[-1] < hist.val[0] - 1.0
    assert sum(hist.loss[-10:]) / 10 < sum(hist.loss[:10]) / 10 - 1.0
    assert hist.step == list(range(1, 81)) and hist.eval_step == [0, 40, 80]
    assert hist.tokens == 80 * 16 * 16


def test_grad_accumulation_equals_one_big_batch(tokens):
    train_data, val_data = tokens[:3500], tokens[3500:]
    one, four = tiny_model(), tiny_model()
    h1 = train(one, train_data, val_data, quiet(batch_size=16, grad_accum_steps=1))
    h4 = train(four, train_data, val_data, quiet(batch_size=16, grad_accum_steps=4))
    assert max_abs_diff(one, four) < 1e-6
    assert h1.loss == pytest.approx(h4.loss, abs=1e-6)
    assert h1.tokens == h4.tokens == 6 * 16 * 16


def test_single_process_train_is_the_plain_loop_bit_for_bit(tokens):
    """No process group: train() must do exactly the plain loop (the DDP hooks are no-ops)."""
    train_data, val_data = tokens[:3500], tokens[3500:]
    cfg = quiet(max_steps=5, grad_accum_steps=2, warmup_steps=2, min_lr=1e-4, weight_decay=0.1)
    model = tiny_model(dropout=0.1)
    hist = train(model, train_data, val_data, cfg)

    ref = tiny_model(dropout=0.1)
    set_seed(cfg.seed)
    opt = torch.optim.AdamW(ref.parameters(), lr=cfg.learning_rate, betas=(0.9, cfg.beta2),
                            weight_decay=cfg.weight_decay)
    gen = torch.Generator().manual_seed(cfg.seed)
    losses = []
    for step in range(cfg.max_steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        x, y = get_batch(train_data, 16, cfg.batch_size, gen)
        total = 0.0
        for xb, yb in zip(x.chunk(2), y.chunk(2)):
            _, loss = ref(xb, yb)
            (loss / 2).backward()
            total += loss.item() / 2
        torch.nn.utils.clip_grad_norm_(ref.parameters(), cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(total)
    assert_same_weights(model, ref)
    assert hist.loss == losses


def test_callback_sees_every_step(tokens):
    seen = []
    train(tiny_model(), tokens[:3500], tokens[3500:], quiet(max_steps=4),
          callback=lambda step, hist: seen.append((step, len(hist.loss))))
    assert seen == [(1, 1), (2, 2), (3, 3), (4, 4)]


def test_estimate_loss_is_reproducible_and_restores_the_mode(tokens):
    model = tiny_model(dropout=0.1)
    model.train()
    splits = {"train": tokens[:3500], "val": tokens[3500:]}
    a = estimate_loss(model, splits, batch_size=4, eval_iters=3, seed=5)
    b = estimate_loss(model, splits, batch_size=4, eval_iters=3, seed=5)
    assert a == b and set(a) == {"train", "val"}
    assert model.training


def test_evaluate_split_is_the_mean_over_all_windows(tokens):
    model = tiny_model()
    data = tokens[:16 * 5 + 1]
    x, y = data[:-1].view(5, 16), data[1:].view(5, 16)
    _, loss = model.eval()(x, y)
    assert evaluate_split(model, data, batch_size=2) == pytest.approx(loss.item(), abs=1e-6)


# --- the learning-rate schedule ---------------------------------------------------------------

def test_lr_at_warmup_then_cosine():
    cfg = TrainConfig(max_steps=110, learning_rate=1e-3, min_lr=1e-4, warmup_steps=10)
    assert lr_at(0, cfg) == pytest.approx(1e-4)  # (0 + 1) / 10 of the peak
    assert lr_at(4, cfg) == pytest.approx(5e-4)
    assert lr_at(9, cfg) == pytest.approx(1e-3)
    assert lr_at(10, cfg) == pytest.approx(1e-3)  # cosine starts at the peak
    assert lr_at(60, cfg) == pytest.approx(5.5e-4)  # half way: the mean of peak and floor
    assert lr_at(110, cfg) == pytest.approx(1e-4)
    assert lr_at(500, cfg) == pytest.approx(1e-4)  # stays at the floor past max_steps
    lrs = [lr_at(s, cfg) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))


def test_lr_at_constant_without_min_lr():
    cfg = TrainConfig(max_steps=50, learning_rate=3e-3)
    assert {lr_at(s, cfg) for s in (0, 1, 25, 49, 100)} == {3e-3}


# --- checkpoints -------------------------------------------------------------------------

def test_checkpoint_round_trip_with_weights_only(tmp_path):
    model = tiny_model(seed=3)
    path = save_checkpoint(tmp_path / "sub" / "ckpt.pt", model, extra={"note": "hi", "step": 7})
    raw = torch.load(path, weights_only=True)  # plain tensors, dicts and numbers only
    assert set(raw) == {"model", "config", "extra"} and raw["extra"] == {"note": "hi", "step": 7}
    loaded, ckpt = load_checkpoint(path)  # builds the model from the stored config
    assert loaded.config == model.config
    assert_same_weights(loaded, model)
    other = tiny_model(seed=4)
    same, _ = load_checkpoint(path, model=other)
    assert same is other
    assert_same_weights(other, model)


def test_train_writes_a_checkpoint_with_history_and_config(tmp_path, tokens):
    path = tmp_path / "run.pt"
    model = tiny_model()
    cfg = quiet(checkpoint_path=str(path))
    hist = train(model, tokens[:3500], tokens[3500:], cfg)
    loaded, ckpt = load_checkpoint(path)
    assert_same_weights(loaded, model)
    assert ckpt["extra"]["history"]["loss"] == hist.loss
    assert ckpt["extra"]["train_config"] == asdict(cfg)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.pt"]


def test_atomic_write_leaves_no_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, tiny_model(seed=1))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]
    before = path.read_bytes()

    def crash_half_way(obj, f, *args, **kwargs):
        with open(f, "wb") as out:
            out.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash_half_way)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, tiny_model(seed=2))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]
    assert path.read_bytes() == before  # the old checkpoint is untouched
    with pytest.raises(OSError):
        save_checkpoint(tmp_path / "new.pt", tiny_model(seed=2))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]


# --- every error the loop raises ------------------------------------------------------------

@pytest.mark.parametrize("seed", [1.5, "1", True, None])
def test_set_seed_rejects_non_integers(seed):
    with pytest.raises(TypeError, match="must be an integer"):
        set_seed(seed)


def test_pick_device():
    assert pick_device() in ("cuda", "mps", "cpu")
    assert pick_device("cpu") == "cpu"
    with pytest.raises(ValueError, match=r"device='tpu' is not one of \('cuda', 'mps', 'cpu'\)"):
        pick_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device='cuda' was asked for"):
            pick_device("cuda")
    if not torch.backends.mps.is_available():
        with pytest.raises(ValueError, match="device='mps' was asked for"):
            pick_device("mps")


@pytest.mark.parametrize("name", ["max_steps", "batch_size", "grad_accum_steps", "eval_interval", "eval_iters"])
def test_train_config_positive_ints(name):
    with pytest.raises(ValueError, match=f"{name}=0 must be a positive integer"):
        TrainConfig(**{name: 0})
    with pytest.raises(TypeError, match=f"{name}=2.0 must be an integer"):
        TrainConfig(**{name: 2.0})
    with pytest.raises(TypeError, match=f"{name}=True must be an integer"):
        TrainConfig(**{name: True})


@pytest.mark.parametrize("kw, message", [
    (dict(warmup_steps=-1), "warmup_steps=-1 must be an integer >= 0"),
    (dict(warmup_steps=1.5), "warmup_steps=1.5 must be an integer >= 0"),
    (dict(warmup_steps=True), "warmup_steps=True must be an integer >= 0"),
    (dict(learning_rate=0.0), "learning_rate=0.0 must be > 0"),
    (dict(learning_rate=-1e-3), "learning_rate=-0.001 must be > 0"),
    (dict(min_lr=2e-3), r"min_lr=0.002 must be between 0 and learning_rate=0.001"),
    (dict(min_lr=-1e-5), r"min_lr=-1e-05 must be between 0 and learning_rate=0.001"),
    (dict(batch_size=12, grad_accum_steps=5), "batch_size=12 is not divisible by grad_accum_steps=5"),
])
def test_train_config_rejects(kw, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**kw)


def test_micro_batches_cuts_and_rejects():
    x = torch.arange(12).view(12, 1)
    parts = micro_batches(x, x + 100, 2, rank=1, world_size=3)
    assert [p[0][:, 0].tolist() for p in parts] == [[4, 5], [6, 7]]  # rank 1 of 3 holds rows 4..7
    assert torch.equal(parts[0][1], parts[0][0] + 100)
    with pytest.raises(ValueError, match="batch of 12 rows cannot be cut into 5 ranks x 1 micro-batches"):
        micro_batches(x, x, 1, rank=0, world_size=5)


def test_evaluate_split_rejects():
    model = tiny_model()
    with pytest.raises(TypeError, match="data must be a torch.Tensor"):
        evaluate_split(model, [1, 2, 3])
    with pytest.raises(ValueError, match="data must have 1 dimensions"):
        evaluate_split(model, torch.zeros(4, 20, dtype=torch.long))
    with pytest.raises(ValueError, match="data has 16 tokens; it needs more than block_size=16"):
        evaluate_split(model, torch.zeros(16, dtype=torch.long))


def test_train_rejects_bad_data(tokens):
    model = tiny_model()
    with pytest.raises(TypeError, match="train_data must be a torch.Tensor, got list"):
        train(model, tokens.tolist(), tokens, quiet())
    with pytest.raises(ValueError, match="val_data must have 1 dimensions"):
        train(model, tokens, tokens.view(2, -1), quiet())


def test_load_checkpoint_rejects(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        load_checkpoint(tmp_path / "missing.pt")
    bad = tmp_path / "bad.pt"
    torch.save({"weights": torch.zeros(1)}, bad)
    with pytest.raises(ValueError, match="is not a gpt_lesson checkpoint"):
        load_checkpoint(bad)
