"""The training loop and checkpoints: reproducible, learning, accumulation-exact, safe on disk."""
from __future__ import annotations

import dataclasses
import math
import os
import re
import socket
import subprocess
import sys
import time
import warnings
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch

from gpt_lesson.data import get_batch
from gpt_lesson.model import GPT, GPTConfig
from gpt_lesson.training import (
    CheckpointError,
    History,
    TrainConfig,
    TrainingDiverged,
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
    assert set(raw) == {"model", "config", "extra", "digest"} and raw["extra"] == {"note": "hi", "step": 7}
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
        f.write(b"half a checkpoint")  # save_checkpoint hands torch.save the open temp file
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


def test_pick_device(monkeypatch):
    # The preference order cuda > mps > cpu, whatever this machine has.
    for cuda, mps, best in ((False, False, "cpu"), (False, True, "mps"), (True, True, "cuda"), (True, False, "cuda")):
        monkeypatch.setattr(torch.cuda, "is_available", lambda cuda=cuda: cuda)
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda mps=mps: mps)
        assert pick_device() == best
    monkeypatch.undo()
    assert pick_device("cpu") == "cpu"
    with pytest.raises(ValueError, match=r"device='tpu' is not a device: use one of \('cpu', 'cuda', 'mps'\)"):
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
    (dict(warmup_steps=-1), "warmup_steps=-1 must be >= 0"),
    (dict(learning_rate=0.0), "learning_rate=0.0 must be > 0"),
    (dict(learning_rate=-1e-3), "learning_rate=-0.001 must be > 0"),
    (dict(min_lr=2e-3), r"min_lr=0.002 must be in \[0, learning_rate=0.001\]"),
    (dict(min_lr=-1e-5), r"min_lr=-1e-05 must be in \[0, learning_rate=0.001\]"),
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


# --- every field of TrainConfig is checked (issue 13) -------------------------------------------

@pytest.mark.parametrize("kw, error, message", [
    (dict(grad_clip=-1.0), ValueError, r"grad_clip=-1.0 must be > 0 \(the largest gradient norm\), or None"),
    (dict(grad_clip=0), ValueError, r"grad_clip=0 must be > 0"),  # 0 would freeze training
    (dict(grad_clip=float("nan")), ValueError, r"grad_clip=nan must be a finite number"),
    (dict(grad_clip="1"), TypeError, r"grad_clip='1' must be a number or None, got str"),
    (dict(learning_rate=float("inf")), ValueError, r"learning_rate=inf must be a finite number \(> 0\)"),
    (dict(learning_rate=float("nan")), ValueError, r"learning_rate=nan must be a finite number"),
    (dict(learning_rate="3e-4"), TypeError, r"learning_rate='3e-4' must be a number, got str"),
    (dict(min_lr=float("nan")), ValueError, r"min_lr=nan must be a finite number"),
    (dict(weight_decay=-0.1), ValueError, r"weight_decay=-0.1 must be >= 0"),
    (dict(weight_decay="0.1"), TypeError, r"weight_decay='0.1' must be a number"),
    (dict(beta2=1.0), ValueError, r"beta2=1.0 must be in \[0, 1\)"),
    (dict(beta2=1.5), ValueError, r"beta2=1.5 must be in \[0, 1\)"),
    (dict(beta2=-0.1), ValueError, r"beta2=-0.1 must be in \[0, 1\)"),
    (dict(warmup_steps=1.5), TypeError, r"warmup_steps=1.5 must be an integer, got float"),
    (dict(warmup_steps=True), TypeError, r"warmup_steps=True must be an integer, got bool"),
    (dict(device="gpu"), ValueError, r"device='gpu' is not a device: use one of \('cpu', 'cuda', 'mps'\)"),
    (dict(device="meta"), ValueError, r"device='meta' is not one of \('cpu', 'cuda', 'mps'\)"),
    (dict(device=0), TypeError, r"device=0 must be a device name such as 'cpu'"),
    (dict(seed="a"), TypeError, r"seed='a' must be an integer, got str"),
    (dict(seed=-1), ValueError, r"seed=-1 must be >= 0"),
    (dict(seed=2**64), ValueError, r"seed=18446744073709551616 must be <= 9223372036854775807"),
    (dict(progress="yes"), TypeError, r"progress='yes' must be True or False"),
    (dict(checkpoint_path=5), TypeError, r"checkpoint_path=5 must be a file path \(str or pathlib.Path\) or None"),
    (dict(checkpoint_path=""), ValueError, r"checkpoint_path='' must be a file path, got an empty name"),
])
def test_train_config_checks_every_field(kw, error, message):
    with pytest.raises(error, match=message):
        TrainConfig(**kw)


def test_train_config_accepts_devices_and_paths_and_stores_plain_values(tmp_path):
    cfg = TrainConfig(device=torch.device("cpu"), checkpoint_path=tmp_path / "run.pt", grad_clip=None)
    assert cfg.device == "cpu" and cfg.checkpoint_path == str(tmp_path / "run.pt")
    assert isinstance(cfg.checkpoint_path, str)  # a Path in the saved train_config would not load weights_only


def test_a_train_config_is_checked_once_and_cannot_change_after(tokens, tmp_path):
    cfg = quiet(checkpoint_path=str(tmp_path / "run.pt"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.grad_clip = -1.0  # gradient ascent, had it run
    assert cfg.grad_clip == 1.0
    model = tiny_model()
    with pytest.raises(TypeError, match="cfg must be a TrainConfig, got dict"):
        train(model, tokens[:3500], tokens[3500:], {"max_steps": 3})
    with pytest.raises(TypeError, match="model must be a language model .*got a Linear without them"):
        train(torch.nn.Linear(2, 2), tokens[:3500], tokens[3500:], quiet())
    with pytest.raises(TypeError, match="callback must be a function of \\(step, history\\) or None, got int"):
        train(model, tokens[:3500], tokens[3500:], quiet(), callback=5)
    assert list(tmp_path.iterdir()) == []


def test_train_takes_any_language_model_of_the_course(tokens):
    """Not only a GPT: a module with config.vocab_size/block_size whose forward(x, y) returns (logits, loss)."""

    class Bigram(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.config = GPTConfig(VOCAB, 16, 2, 1, 16)
            self.table = torch.nn.Embedding(VOCAB, VOCAB)

        def forward(self, idx, targets=None):
            logits = self.table(idx)
            loss = None if targets is None else torch.nn.functional.cross_entropy(logits.view(-1, VOCAB),
                                                                                 targets.reshape(-1))
            return logits, loss

    torch.manual_seed(0)
    model = Bigram()
    hist = train(model, tokens[:3500], tokens[3500:], quiet(max_steps=30, learning_rate=0.1))
    assert hist.val[-1] < hist.val[0] - 0.3
    with pytest.raises(TypeError, match="checkpoint_path needs a gpt_lesson GPT .*got Bigram"):
        train(model, tokens[:3500], tokens[3500:], quiet(checkpoint_path="x.pt"))


def test_train_names_bad_token_data(tokens):
    model = tiny_model()
    with pytest.raises(TypeError, match=r"train_data must hold integer token ids .*train_data.long\(\)"):
        train(model, tokens[:3500].float(), tokens[3500:], quiet())
    bad_val = tokens[3500:].clone()
    bad_val[7] = VOCAB + 3
    with pytest.raises(ValueError, match=rf"val_data holds token id {VOCAB + 3}, out of range: ids must be in "
                                         rf"\[0, vocab_size={VOCAB}\)"):
        train(model, tokens[:3500], bad_val, quiet())
    with pytest.raises(ValueError, match="val_data has 16 tokens; it needs more than block_size=16"):
        train(model, tokens[:3500], tokens[:16], quiet())


# --- a diverged run stops, and never replaces a good checkpoint (issue 13) ----------------------

def poison_at(step: int, model: GPT):
    """A callback that makes one weight NaN after optimizer step ``step`` (as a too-large update would)."""
    def callback(s: int, hist: History) -> None:
        if s == step:
            with torch.no_grad():
                model.lm_head.weight[0, 0] = float("nan")
    return callback


def test_a_non_finite_loss_stops_the_run_and_keeps_the_good_checkpoint(tokens, tmp_path):
    path = tmp_path / "run.pt"
    good = train(tiny_model(), tokens[:3500], tokens[3500:], quiet(checkpoint_path=str(path)))
    before = path.read_bytes()
    model = tiny_model(seed=1)
    with pytest.raises(TrainingDiverged) as e:
        train(model, tokens[:3500], tokens[3500:], quiet(checkpoint_path=str(path)), callback=poison_at(2, model))
    msg = str(e.value)
    assert msg.startswith("training stopped at step 3: the loss is nan")
    assert f"{path} was left as it was" in msg and "lower learning_rate" in msg
    assert e.value.step == 3 and e.value.history.step == [1, 2]  # what ran before is kept for a look
    assert isinstance(e.value, FloatingPointError)
    assert path.read_bytes() == before  # the good checkpoint is untouched...
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.pt"]  # ...and no temp file is left
    loaded, ckpt = load_checkpoint(path)
    assert ckpt["extra"]["history"]["loss"] == good.loss


def test_weights_made_non_finite_by_the_last_update_are_not_saved(tokens, tmp_path):
    path = tmp_path / "run.pt"
    model = tiny_model()
    with pytest.raises(TrainingDiverged, match="training stopped at step 6: the last update made the weights "
                                               r"non-finite \(NaN or inf in lm_head.weight\)"):
        train(model, tokens[:3500], tokens[3500:], quiet(checkpoint_path=str(path)), callback=poison_at(6, model))
    assert list(tmp_path.iterdir()) == []


def test_save_checkpoint_refuses_non_finite_weights_and_keeps_the_old_file(tmp_path):
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, tiny_model(seed=1))
    before = path.read_bytes()
    broken = tiny_model(seed=2)
    with torch.no_grad():
        broken.blocks[0].sa.c_attn.weight[1, 1] = float("inf")
    with pytest.raises(ValueError, match=r"model has NaN or infinite weights \(in blocks.0.sa.c_attn.weight\): "
                                         rf"refusing to save them to {path}; {path} was left as it was"):
        save_checkpoint(path, broken)
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]


def test_save_checkpoint_refuses_what_weights_only_could_not_load(tmp_path):
    with pytest.raises(TypeError, match=r"extra\['where'\] is a PosixPath: a checkpoint holds only tensors"):
        save_checkpoint(tmp_path / "c.pt", tiny_model(), extra={"where": tmp_path})
    with pytest.raises(TypeError, match="model must be a GPT, got str"):
        save_checkpoint(tmp_path / "c.pt", "model")
    with pytest.raises(TypeError, match="path=None must be a file path"):
        save_checkpoint(None, tiny_model())
    assert list(tmp_path.iterdir()) == []
    # A config with a Path, through train(): stored as a str, so the checkpoint loads.
    save_checkpoint(tmp_path / "c.pt", tiny_model(), extra={"train_config": asdict(TrainConfig(checkpoint_path=tmp_path))})
    assert load_checkpoint(tmp_path / "c.pt")[1]["extra"]["train_config"]["checkpoint_path"] == str(tmp_path)


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o002, 0o664)])
def test_checkpoint_files_respect_the_umask(tmp_path, mask, mode):
    old = os.umask(mask)
    try:
        path = save_checkpoint(tmp_path / "ckpt.pt", tiny_model())
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == mode  # readable by the class when the umask says so


def test_stale_temp_files_of_killed_saves_are_removed(tmp_path):
    path = tmp_path / "ckpt.pt"
    tmp_path.joinpath("other.pt.1.tmp").write_bytes(b"not ours")  # another file's temp: never touched
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    killed = tmp_path / f"ckpt.pt.{dead.pid}@{socket.gethostname()}.0123abcd.tmp"
    killed.write_bytes(b"half a checkpoint")
    old = tmp_path / "ckpt.pt.x1y2z3ab.tmp"  # mkstemp's name from an older version, an hour old
    old.write_bytes(b"half a checkpoint")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    recent = tmp_path / "ckpt.pt.4242@elsewhere.0123abcd.tmp"  # another machine, still writing
    recent.write_bytes(b"in progress")
    users = tmp_path / "ckpt.pt.old.tmp"  # a name the learner chose: never ours to delete, however old
    users.write_bytes(b"my backup")
    os.utime(users, (time.time() - 3600, time.time() - 3600))
    save_checkpoint(path, tiny_model())
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["ckpt.pt", "other.pt.1.tmp", recent.name, users.name])


def test_save_into_an_impossible_folder_names_it(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(NotADirectoryError, match=f"cannot write the checkpoint in the folder {blocker / 'sub'}"):
        save_checkpoint(blocker / "sub" / "ckpt.pt", tiny_model())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


# --- unreadable and unfit checkpoints name the file and say what to do (issue 13) ---------------

@pytest.fixture
def good_file(tmp_path) -> Path:
    return save_checkpoint(tmp_path / "good.pt", tiny_model(seed=5))


def write_payload(path: Path, payload) -> Path:
    torch.save(payload, path)
    return path


class Evil:
    """A pickle that runs a command when loaded without weights_only."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_empty_truncated_and_foreign_files_are_named(good_file, tmp_path):
    raw = good_file.read_bytes()
    cases = {
        "empty.pt": (b"", r"the file is empty \(0 bytes\): a save or copy was interrupted"),
        "half.pt": (raw[: len(raw) // 2], r"the file is not a readable PyTorch checkpoint \([\d,]+ bytes; .*cut short"),
        "notes.pt": (b"hello, not a checkpoint\n", r"the file is not a readable PyTorch checkpoint"),
    }
    for name, (content, problem) in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(CheckpointError, match=rf"cannot load the checkpoint {path}: {problem}.*Delete it"):
            load_checkpoint(path)
        assert path.read_bytes() == content  # nothing deleted or rewritten behind the learner's back
    with pytest.raises(IsADirectoryError, match=f"{tmp_path} is a folder, not a checkpoint file"):
        load_checkpoint(tmp_path)
    with pytest.raises(FileNotFoundError, match="no checkpoint at .*missing.pt"):
        load_checkpoint(tmp_path / "missing.pt")


def test_a_malicious_pickle_is_refused_for_safety_without_suggesting_to_turn_the_check_off(tmp_path):
    marker = tmp_path / "pwned"
    path = write_payload(tmp_path / "evil.pt", {"model": Evil(marker), "config": {}})
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(path)
    msg = str(e.value)
    assert f"cannot load the checkpoint {path}: it is not a plain checkpoint" in msg
    assert "refused for safety" in msg and "system" in msg  # names what it asked for (posix.system)
    assert "weights_only=False" not in msg and "weights_only` set to `False" not in msg
    assert e.value.__suppress_context__  # torch's advice to turn the check off is not shown under it
    assert not marker.exists()  # and the command never ran


def test_not_a_gpt_lesson_checkpoint(tmp_path):
    cases = [
        ([1, 2, 3], r"it is not a gpt_lesson checkpoint \(expected keys 'model' and 'config', found list\)"),
        ({"weights": torch.zeros(1)}, r"found \['weights'\]"),
        ({"model": {"a": 1}, "config": {}}, r"its 'model' entry is not a state dict"),
        ({"model": {}, "config": "GPTConfig(vocab_size=12)"}, r"its 'config' is a str, not a dict of GPTConfig"),
        ({"model": {}, "config": {"vocab_size": 12, "n_embed": 16}}, r"its config has unknown keys \['n_embed'\]"),
        ({"model": {}, "config": {"n_embd": "16"}}, r"its config is invalid: n_embd='16' must be an integer"),
        ({"model": {}, "config": {"n_embd": 10, "n_head": 4}}, r"its config is invalid: n_embd=10 is not divisible"),
    ]
    for i, (payload, problem) in enumerate(cases):
        path = write_payload(tmp_path / f"c{i}.pt", payload)
        with pytest.raises(CheckpointError, match=rf"cannot load the checkpoint {re.escape(str(path))}: .*{problem}"):
            load_checkpoint(path)


def _with_config(good_file: Path, tmp_path: Path, name: str, **changes) -> Path:
    ckpt = torch.load(good_file, weights_only=True)
    ckpt.pop("digest")  # a hand-edited file, or one written before checkpoints stored a digest
    ckpt["config"].update(changes)
    return write_payload(tmp_path / name, ckpt)


class CountingGPT(GPT):
    built: list = []

    def __init__(self, *args, **kwargs):
        CountingGPT.built.append(str(torch.get_default_device()))  # "meta" inside load_checkpoint's check
        super().__init__(*args, **kwargs)


def test_a_config_that_does_not_fit_the_tensors_is_refused_before_any_model_is_built(good_file, tmp_path,
                                                                                      monkeypatch):
    import gpt_lesson.checkpoints as C

    monkeypatch.setattr(C, "GPT", CountingGPT)
    CountingGPT.built = []
    cases = [
        # A 40 KB file whose config asks for a model of petabytes: refused at once, nothing allocated.
        (dict(vocab_size=2**40, n_embd=2**12, n_head=4), r"size mismatch for token_embedding_table.weight: copying "
                                                         r"a param with shape torch.Size\(\[12, 16\]\) from checkpoint, "
                                                         r"the shape in current model is torch.Size\(\[1099511627776, 4096\]\)"),
        (dict(n_embd=32), r"its tensors do not fit its config GPTConfig\(vocab_size=12, n_embd=32"),
        (dict(block_size=64), r"size mismatch for position_embedding_table.weight: .*torch.Size\(\[16, 16\]\) from "
                              r"checkpoint, the shape in current model is torch.Size\(\[64, 16\]\)"),
        (dict(n_layer=10**9), r"its config says n_layer=1000000000 but it holds 2 blocks"),
    ]
    for i, (changes, problem) in enumerate(cases):
        path = _with_config(good_file, tmp_path, f"c{i}.pt", **changes)
        assert path.stat().st_size < 50_000
        with pytest.raises(CheckpointError, match=rf"cannot load the checkpoint {re.escape(str(path))}: .*{problem}"):
            load_checkpoint(path)
    assert set(CountingGPT.built) <= {"meta"}  # models of names and shapes only: nothing was allocated
    CountingGPT.built = []
    load_checkpoint(good_file)
    assert CountingGPT.built == ["meta", "cpu"]  # the counter works: a good file builds its model once


def test_missing_and_unexpected_tensors_are_listed(good_file, tmp_path):
    ckpt = torch.load(good_file, weights_only=True)
    del ckpt["model"]["lm_head.bias"]
    ckpt["model"]["extra_head.weight"] = torch.zeros(2)
    path = write_payload(tmp_path / "c.pt", ckpt)
    with pytest.raises(CheckpointError, match=r'Missing key\(s\) in state_dict: "lm_head.bias". '
                                              r'Unexpected key\(s\) in state_dict: "extra_head.weight"\. Delete'):
        load_checkpoint(path)


def test_a_checkpoint_that_does_not_fit_the_given_model(good_file):
    other = GPT(VOCAB, 32, 2, 2, 16, dropout=0.0)
    before = {k: v.clone() for k, v in other.state_dict().items()}
    with pytest.raises(CheckpointError, match=rf"cannot load the checkpoint {good_file}: it was saved from a model "
                                              r"with n_embd=16 \(the model given: 32\)"):
        load_checkpoint(good_file, model=other)
    assert all(torch.equal(before[k], v) for k, v in other.state_dict().items())  # the model is untouched
    with pytest.raises(TypeError, match="model must be a GPT or None, got dict"):
        load_checkpoint(good_file, model={})
    with pytest.raises(ValueError, match="device='gpu' is not a device"):
        load_checkpoint(good_file, device="gpu")


def test_a_checkpoint_is_refused_by_a_model_that_computes_something_else(good_file):
    """Another mask or scale is said out loud (issue 28); another dropout rate or attention kernel is fine."""
    for options, said in [(dict(causal=False), "causal=True \\(the model given: False\\)"),
                          (dict(attn_scale=1.0), "attn_scale=None \\(the model given: 1.0\\)")]:
        with pytest.raises(CheckpointError, match=f"it was saved from a model with {said}"):
            load_checkpoint(good_file, model=GPT(VOCAB, 16, 2, 2, 16, **options))
    same, _ = load_checkpoint(good_file, model=GPT(VOCAB, 16, 2, 2, 16, dropout=0.3, attn_impl="sdpa"))
    assert same.config.attn_impl == "sdpa" and same.config.dropout == 0.3


def test_a_checkpoint_of_an_older_config_with_capture_attention_loads(good_file, tmp_path):
    """capture_attention left GPTConfig (capture is gpt_lesson.capture now); files that carry it still load."""
    for flag in (False, True):
        path = _with_config(good_file, tmp_path, f"old_{flag}.pt", capture_attention=flag)
        model, ckpt = load_checkpoint(path)
        assert ckpt["config"]["capture_attention"] is flag and not hasattr(model.config, "capture_attention")


def test_a_checkpoint_with_nan_weights_is_refused(good_file, tmp_path):
    ckpt = torch.load(good_file, weights_only=True)
    ckpt["model"]["blocks.1.ffwd.net.0.weight"][0, 0] = float("nan")
    path = write_payload(tmp_path / "nan.pt", ckpt)
    with pytest.raises(CheckpointError, match=rf"cannot load the checkpoint {path}: it holds NaN or infinite weights "
                                              r"\(in blocks.1.ffwd.net.0.weight\)"):
        load_checkpoint(path)


def test_a_checkpoint_whose_mask_was_edited_is_refused(good_file, tmp_path):
    ckpt = torch.load(good_file, weights_only=True)
    ckpt["model"]["blocks.0.sa.tril"] = torch.ones(16, 16)  # the future would no longer be hidden
    path = write_payload(tmp_path / "leaky.pt", ckpt)
    with pytest.raises(CheckpointError, match=rf"cannot load the checkpoint {path}: blocks.0.sa.tril in the "
                                              "checkpoint is not the lower-triangular matrix"):
        load_checkpoint(path)


@pytest.mark.parametrize("options", [dict(), dict(attn_impl="sdpa", dropout=0.1, causal=False, attn_scale=1.0)])
@pytest.mark.parametrize("sizes", [(12, 16, 2, 2, 16), (65, 24, 3, 1, 8)])
def test_every_kind_of_model_round_trips_strictly(sizes, options, tmp_path):
    """The shapes checked at load are the model's own (GPT(config) on the meta device), for every option."""
    torch.manual_seed(0)
    model = GPT(*sizes, **options)
    loaded, _ = load_checkpoint(save_checkpoint(tmp_path / "m.pt", model))
    assert loaded.config == model.config
    assert_same_weights(loaded, model)


def test_loading_builds_nothing_on_the_meta_device_that_costs_memory_or_random_numbers(good_file):
    """The check runs on the meta device: no memory, and the global random state moves only as GPT(config)
    moves it (as loading always did), so a lesson's seeded cells after a load give the same numbers."""
    torch.manual_seed(3)
    GPT(VOCAB, 16, 2, 2, 16, dropout=0.0)
    expected = torch.get_rng_state()
    torch.manual_seed(3)
    load_checkpoint(good_file)
    assert torch.equal(torch.get_rng_state(), expected)


def test_loop_helpers_name_their_arguments(tokens):
    x = torch.arange(12).view(12, 1)
    with pytest.raises(ValueError, match="n_micro=0 must be a positive integer"):  # was a ZeroDivisionError
        micro_batches(x, x, 0)
    with pytest.raises(ValueError, match=r"rank=3 must be in \[0, world_size=3\)"):
        micro_batches(x, x, 1, rank=3, world_size=3)
    model = tiny_model()
    with pytest.raises(ValueError, match="eval_iters=0 must be a positive integer"):  # was a ZeroDivisionError
        estimate_loss(model, {"val": tokens}, batch_size=4, eval_iters=0)
    with pytest.raises(ValueError, match="batch_size=0 must be a positive integer"):
        evaluate_split(model, tokens, batch_size=0)


def test_a_checkpoint_whose_config_says_causal_false_over_causal_masks_is_refused(good_file, tmp_path):
    """One flipped bit turning causal=True into False would open the future: the file must agree with itself."""
    ckpt = torch.load(good_file, weights_only=True)
    ckpt["config"]["causal"] = False
    path = write_payload(tmp_path / "flipped.pt", ckpt)
    with pytest.raises(CheckpointError, match=rf"cannot load the checkpoint {path}: its config says causal=False but "
                                              r"blocks.\d.sa.tril is a causal mask"):
        load_checkpoint(path)

def test_a_warmup_longer_than_the_run_is_said():
    """A warm-up that outlasts the run leaves the learning rate below its peak: train() warns, naming both numbers."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=8, n_embd=8, n_head=2, n_layer=1, block_size=4))
    data = torch.randint(0, 8, (200,))
    cfg = TrainConfig(max_steps=2, batch_size=2, warmup_steps=30, learning_rate=1e-3, min_lr=1e-4,
                      eval_interval=2, eval_iters=1, progress=False)
    with pytest.warns(UserWarning, match=r"warmup_steps=30 is more than max_steps=2: the run ends during the warm-up, "
                                         r"so the learning rate never reaches learning_rate=0.001 \(it stops at 6.67e-05\)"):
        train(model, data[:150], data[150:], cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # as long as the run: no warning
        train(model, data[:150], data[150:], replace(cfg, warmup_steps=2))
