"""Issue 28, files: no lost file, refused before the work, damaged files caught.

Each test feeds a class of bad files or arguments (every member of an archive, every pair of
outputs and inputs, every writer on a full disk) and checks the error names the file or the
option, the value and the rule, and that nothing on disk was lost.
"""
from __future__ import annotations

import errno
import json
import os
import re
import struct
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest
import torch

from gpt_lesson import data as data_mod
from gpt_lesson import shakespeare, train_ddp
from gpt_lesson.checkpoints import CheckpointError, load_checkpoint, save_checkpoint
from gpt_lesson.model import GPT, GPTConfig
from gpt_lesson.training import TrainConfig, train

ROOT = Path(__file__).resolve().parents[1]
# train_ddp.main is wrapped in torchrun's @record, which cannot install its fault handler under pytest's capture.
pytestmark = pytest.mark.filterwarnings("ignore:Unable to enable fault handler")


def tiny(seed: int = 0, **options) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(12, 16, 2, 2, 8, dropout=options.pop("dropout", 0.0), **options))


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    return save_checkpoint(tmp_path / "good.pt", tiny(1, dropout=0.1, attn_scale=0.5))


def member_data_offset(path: Path, info: zipfile.ZipInfo) -> int:
    """Where a stored member's bytes start: after its local header (30 bytes, its name, its extra field)."""
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        header = f.read(30)
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    return info.header_offset + 30 + name_len + extra_len


def flip_bit(path: Path, offset: int, bit: int = 0) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 1 << bit
    path.write_bytes(bytes(raw))


def rezip(src: Path, dst: Path, change) -> Path:
    """Copy the archive member by member through ``change(name, bytes)``: every CRC-32 is recomputed, right."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, change(info.filename, zin.read(info.filename)))
    return dst


# --- damaged checkpoints ---------------------------------------------------------------------

def test_a_flipped_bit_in_any_member_of_the_archive_is_caught_by_its_crc(ckpt, tmp_path):
    with zipfile.ZipFile(ckpt) as z:
        members = [i for i in z.infolist() if i.file_size > 0]
    assert len(members) > 10  # the pickle, the format files and every tensor
    for info in members:
        bad = tmp_path / "bad.pt"
        bad.write_bytes(ckpt.read_bytes())
        flip_bit(bad, member_data_offset(bad, info) + info.file_size // 2, bit=3)
        with pytest.raises(CheckpointError, match=rf"cannot load the checkpoint {bad}: the file is damaged: the "
                                                  rf"archive member '{info.filename}' fails its CRC-32 check"):
            load_checkpoint(bad)


def test_a_changed_weight_inside_a_rezipped_archive_is_caught_by_the_digest(ckpt, tmp_path):
    with zipfile.ZipFile(ckpt) as z:
        tensors = [n for n in z.namelist() if "/data/" in n]
    for k, member in enumerate(tensors):
        def change(name, data, member=member):
            if name != member:
                return data
            b = bytearray(data)
            b[len(b) // 2] ^= 0x01  # one bit of one number: finite, the shape unchanged
            return bytes(b)
        bad = rezip(ckpt, tmp_path / f"w{k}.pt", change)
        assert zipfile.ZipFile(bad).testzip() is None  # the CRC is right
        with pytest.raises(CheckpointError) as e:
            load_checkpoint(bad)
        if ".tril in the checkpoint is not the lower-triangular" in str(e.value):  # the mask's own check is first
            assert "The checkpoint is damaged or was edited" in str(e.value)
        else:
            assert re.search(r"the file is damaged: the sha256 digest stored when it was saved no longer matches "
                             r"[a-z_.0-9]+ \(changed after saving\)", str(e.value)), str(e.value)


@pytest.mark.parametrize("old, new, what", [
    (b"causal" + b"r", None, "causal True -> False"),
    (struct.pack(">d", 0.1), struct.pack(">d", 0.1)[:-1] + bytes([struct.pack(">d", 0.1)[-1] ^ 1]), "dropout"),
    (struct.pack(">d", 0.5), struct.pack(">d", 0.5)[:-1] + bytes([1]), "attn_scale"),
], ids=["causal", "dropout", "attn_scale"])
def test_a_changed_config_inside_a_rezipped_archive_is_refused(ckpt, tmp_path, old, new, what):
    def change(name, data):
        if not name.endswith("data.pkl"):
            return data
        at = data.index(old)
        if new is None:  # the NEWTRUE opcode after the key 'causal' (and its memo) becomes NEWFALSE
            true_at = data.index(b"\x88", at)
            return data[:true_at] + b"\x89" + data[true_at + 1:]
        assert data.count(old) == 1
        return data[:at] + new + data[at + len(old):]
    bad = rezip(ckpt, tmp_path / "c.pt", change)
    with pytest.raises(CheckpointError, match=r"the file is damaged"):
        load_checkpoint(bad)


@pytest.mark.parametrize("edit", [
    lambda e: e.__setitem__("step", 8),
    lambda e: e.__setitem__("step", 7.0),  # equal to 7 under ==, still not what was saved
    lambda e: e["losses"].__setitem__(0, e["losses"][0] + 1e-3),
    lambda e: e.__setitem__("tags", list(e["tags"])),
    lambda e: e.pop("tags"),
], ids=["int", "int-to-float", "tensor", "tuple-to-list", "removed"])
def test_an_edited_extra_value_is_caught_by_the_digest(tmp_path, edit):
    """The digest covers ``extra`` too: a step count or a loss curve edited after saving is refused."""
    path = save_checkpoint(tmp_path / "e.pt", tiny(4), extra={"step": 7, "losses": torch.tensor([2.5, 2.25]),
                                                              "tags": ("a", 1)})
    raw = torch.load(path, weights_only=True)
    load_checkpoint(path)  # as saved: loads
    edit(raw["extra"])
    torch.save(raw, path)
    with pytest.raises(CheckpointError, match=r"the sha256 digest stored when it was saved no longer matches its "
                                              r"extra values \(changed after saving\)"):
        load_checkpoint(path)


def test_a_checkpoint_whose_digest_predates_extra_still_loads(tmp_path):
    """Checkpoints saved before the digest covered ``extra`` (stop 33's format) load, their extra unchecked."""
    path = save_checkpoint(tmp_path / "o.pt", tiny(5), extra={"step": 3})
    raw = torch.load(path, weights_only=True)
    raw["digest"].pop("extra")
    raw["extra"]["step"] = 4
    torch.save(raw, path)
    _, got = load_checkpoint(path)
    assert got["extra"] == {"step": 4}
    raw["digest"]["extra"] = 5  # not a hex string: not what save_checkpoint writes
    torch.save(raw, path)
    with pytest.raises(CheckpointError, match=r"its 'digest' entry is not the one save_checkpoint writes"):
        load_checkpoint(path)


def test_a_checkpoint_saved_before_digests_still_loads(tmp_path):
    model = tiny(2)
    old = tmp_path / "old.pt"
    torch.save({"model": model.state_dict(), "config": model.config.to_dict(), "extra": {}}, old)
    loaded, raw = load_checkpoint(old)
    assert "digest" not in raw
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values()))


def test_options_that_change_the_function_are_refused_when_loading_into_a_model(tmp_path):
    path = save_checkpoint(tmp_path / "m.pt", tiny(3))
    for option, value in (("causal", False), ("attn_scale", 1.0)):
        other = tiny(3, **{option: value})
        with pytest.raises(CheckpointError, match=rf"saved from a model with {option}="):
            load_checkpoint(path, model=other)


def test_files_that_are_not_a_checkpoint_are_named_for_what_they_are(ckpt, tmp_path):
    raw = ckpt.read_bytes()
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"#!/bin/sh\nrm -rf x\n" * 4 + raw)
    legacy = tmp_path / "legacy.pt"
    with tarfile.open(legacy, "w") as t:
        info = tarfile.TarInfo("storages")
        info.size = 64
        t.addfile(info, __import__("io").BytesIO(b"\0" * 64))
    noise = tmp_path / "noise.pt"
    noise.write_bytes(bytes(range(256)) * 8)
    cases = {
        junk: r"76 bytes of something else \(starting b'#!/bin/sh\\nrm -rf'\) come before its zip archive",
        legacy: r"it is a PyTorch checkpoint in the legacy \.tar format",
        noise: r"neither the zip archive torch\.save writes nor a pickle",
    }
    for path, problem in cases.items():
        with pytest.raises(CheckpointError) as e:
            load_checkpoint(path)
        msg = str(e.value)
        assert re.search(problem, msg), msg
        assert "could run code" not in msg and "interrupted" not in msg


def test_a_nul_byte_in_a_path_is_refused_by_name_everywhere(tmp_path):
    bad = str(tmp_path / "a\0b.pt")
    calls = {
        "path": [lambda: save_checkpoint(bad, tiny()), lambda: load_checkpoint(bad),
                 lambda: shakespeare.load_trained(path=bad, train_if_missing=False)],
        "checkpoint_path": [lambda: TrainConfig(checkpoint_path=bad)],
    }
    for name, fns in calls.items():
        for fn in fns:
            with pytest.raises(ValueError, match=rf"{name}='.*a\\x00b\.pt' holds a NUL byte"):
                fn()
    from gpt_lesson.widgets import MaskExplorer
    with pytest.raises(ValueError, match=r"path='.*a\\x00b\.png' holds a NUL byte"):
        MaskExplorer(T=3).save_png(str(tmp_path / "a\0b.png"))


def test_a_self_referencing_extra_is_refused_and_the_old_file_kept(ckpt):
    before = ckpt.read_bytes()
    loop: dict = {"a": 1}
    loop["self"] = loop
    lst: list = [1]
    lst.append(lst)
    deep: dict = {"x": {"y": []}}
    deep["x"]["y"].append(deep)
    for extra, where in ((loop, r"extra\['self'\]"), ({"l": lst}, r"extra\['l'\]\[1\]"),
                         (deep, r"extra\['x'\]\['y'\]\[0\]")):
        with pytest.raises(ValueError, match=rf"{where} refers back to a dict or list that contains it \(a cycle\)"):
            save_checkpoint(ckpt, tiny(), extra=extra)
        assert ckpt.read_bytes() == before
    shared = [1, 2]  # the same list twice is no cycle
    save_checkpoint(ckpt, tiny(), extra={"a": shared, "b": shared})
    assert load_checkpoint(ckpt)[1]["extra"] == {"a": [1, 2], "b": [1, 2]}


# --- train_ddp: outputs that would destroy a file, arguments that cannot work ----------------

@pytest.fixture
def text_file(tmp_path: Path) -> Path:
    path = tmp_path / "text.txt"
    path.write_text("to be or not to be, that is the question. " * 200, encoding="utf-8")
    return path


TINY = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "8", "--max-steps", "2",
        "--batch-size", "4", "--eval-interval", "2", "--eval-iters", "1", "--no-progress"]


def run_main(argv, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as e:
        train_ddp.main(argv)
    return e.value.code, capsys.readouterr().err


def test_train_ddp_refuses_outputs_that_are_the_same_file_as_an_input_or_another_output(
        text_file, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "link.txt").symlink_to(text_file)
    os.link(text_file, tmp_path / "hard.txt")
    (tmp_path / "sub").mkdir()
    out = str(tmp_path / "out.pt")
    cases = [  # (--data, --checkpoint, --history, the option refused, the one it would destroy)
        (str(text_file), str(text_file), None, "--checkpoint", "--data"),
        (str(text_file), None, str(text_file), "--history", "--data"),
        (str(text_file), out, out, "--history", "--checkpoint"),
        (str(text_file), "link.txt", None, "--checkpoint", "--data"),  # a symlink, relative
        (str(text_file), "sub/../text.txt", None, "--checkpoint", "--data"),  # relative, with ..
        ("text.txt", str(tmp_path / "hard.txt"), None, "--checkpoint", "--data"),  # a hard link
        (str(text_file), "out.pt", str(tmp_path / "sub" / ".." / "out.pt"), "--history", "--checkpoint"),
    ]
    before = text_file.read_bytes()
    for data, checkpoint, history, refused, destroyed in cases:
        argv = TINY + ["--data", data] + (["--checkpoint", checkpoint] if checkpoint else []) + (
            ["--history", history] if history else [])
        code, err = run_main(argv, capsys)
        assert code == 2, (argv, err)
        assert re.search(rf"error: {refused}='.*' is the same file as {destroyed}='.*' \(.*\): writing {refused} "
                         "would destroy it", err), err
        assert text_file.read_bytes() == before and not Path(out).exists()


def test_train_ddp_refuses_an_output_over_the_default_data(tmp_path, capsys, monkeypatch):
    data = tmp_path / "shakespeare.txt"
    data.write_text("x" * 2000, encoding="utf-8")
    monkeypatch.setenv("GPT_LESSON_DATA", str(data))
    code, err = run_main(TINY + ["--checkpoint", str(data)], capsys)
    assert code == 2 and "is the same file as --data (from $GPT_LESSON_DATA)" in err
    assert data.read_text() == "x" * 2000


def test_train_ddp_arguments_that_cannot_work_exit_with_the_parsers_message(text_file, tmp_path, capsys):
    cases = [
        (["--max-chars", "5"], r"--max-chars=5 gives 5 tokens: the validation split \(10%\) and the training split "
                               r"\(90%\) each need more than --block-size=8 tokens, so use at least 81 characters"),
        (["--micro-batch-size", "3"], r"--micro-batch-size=3 does not divide --batch-size=4 over 1 process"),
        (["--grad-accum-steps", "3"], r"--batch-size=4 cannot be cut into 1 process\(es\) x --grad-accum-steps=3"),
        (["--checkpoint", str(tmp_path)], r"--checkpoint='.*' is a folder: the checkpoint needs a file path"),
        (["--history", str(text_file / "h.json")], r"--history='.*h\.json' cannot be written: .*text\.txt is a file, not a folder"),
    ]
    for extra, message in cases:
        code, err = run_main(TINY + ["--data", str(text_file)] + extra, capsys)
        assert code == 2 and re.search(r"error: " + message, err), (extra, err)
        assert "Traceback" not in err
    # the smallest text that works does work: the message's number is right
    code = train_ddp.main(TINY + ["--data", str(text_file), "--max-chars", "81"])
    assert code == 0


def test_train_ddp_bad_arguments_on_the_command_line_give_no_traceback(text_file):
    for extra in (["--max-chars", "5"], ["--micro-batch-size", "3"]):
        out = subprocess.run([sys.executable, "-m", "gpt_lesson.train_ddp", *TINY, "--data", str(text_file), *extra],
                             capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert out.returncode == 2 and "error: " + extra[0] in out.stderr, out.stderr
        assert "Traceback" not in out.stderr


# --- train(): an unusable checkpoint_path is found before the first step ---------------------

def token_data(n: int = 400) -> torch.Tensor:
    return torch.arange(n) % 12


def test_train_refuses_an_unusable_checkpoint_path_before_the_first_step(tmp_path):
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    cases = {
        str(tmp_path): r"checkpoint_path='.*' is a folder: the checkpoint needs a file path",
        str(a_file / "run.pt"): r"checkpoint_path='.*run\.pt' cannot be written: .*file\.txt is a file, not a folder",
        str(a_file / "sub" / "run.pt"): r"checkpoint_path='.*run\.pt' cannot be written: .*file\.txt is a file",
        "/proc/gpt_lesson_run.pt": r"checkpoint_path='/proc/gpt_lesson_run\.pt' cannot be written",
    }
    for path, message in cases.items():
        steps: list[int] = []
        cfg = TrainConfig(max_steps=3, batch_size=4, eval_interval=3, eval_iters=1, progress=False,
                          checkpoint_path=path)
        with pytest.raises(OSError, match=message):
            train(tiny(), token_data(), token_data(), cfg, callback=lambda step, hist, steps=steps: steps.append(step))
        assert steps == []  # refused before any step
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt"]  # no probe file left behind


def dev_full(monkeypatch) -> None:
    """Every file write_atomically opens writes to /dev/full: the kernel answers ENOSPC, as on a full disk."""
    real = os.fdopen

    def full(fd, mode="r", *args, **kwargs):
        os.close(fd)
        return real(os.open("/dev/full", os.O_WRONLY), mode, *args, **kwargs)
    monkeypatch.setattr(data_mod.os, "fdopen", full)


def full_fsync(monkeypatch) -> None:
    """fsync fails with ENOSPC (a file system that allocates late, as NFS or XFS may)."""
    def fsync(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(data_mod.os, "fsync", fsync)


needs_dev_full = pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this OS")


@needs_dev_full
def test_a_full_disk_at_the_end_of_training_keeps_the_history(tmp_path, monkeypatch):
    path = tmp_path / "run.pt"
    cfg = TrainConfig(max_steps=3, batch_size=4, eval_interval=3, eval_iters=1, progress=False,
                      checkpoint_path=str(path))
    dev_full(monkeypatch)
    with pytest.raises(OSError, match=rf"no space left on the device to write the checkpoint {path}") as e:
        train(tiny(), token_data(), token_data(), cfg)
    assert e.value.errno == errno.ENOSPC and e.value.history.step == [1, 2, 3]
    assert list(tmp_path.iterdir()) == []


# --- full disk: every writer names the file and says "no space left" -------------------------

@needs_dev_full
@pytest.mark.parametrize("simulate", [dev_full, full_fsync], ids=["write", "fsync"])
def test_every_writer_names_the_file_on_a_full_disk_and_keeps_the_old_one(tmp_path, monkeypatch, simulate, capsys):
    from gpt_lesson.widgets import MaskExplorer
    ckpt, png, hist = tmp_path / "m.pt", tmp_path / "view.png", tmp_path / "hist.json"
    save_checkpoint(ckpt, tiny())
    explorer = MaskExplorer(T=3)
    explorer.save_png(png)
    hist.write_text("{}")
    text = tmp_path / "text.txt"
    text.write_text("to be or not to be " * 50)
    old = {p: p.read_bytes() for p in (ckpt, png, hist)}
    simulate(monkeypatch)
    writers = {
        ckpt: ("the checkpoint", lambda: save_checkpoint(ckpt, tiny(4))),
        png: ("the picture", lambda: explorer.save_png(png)),
        hist: ("the history", lambda: train_ddp.main(TINY + ["--data", str(text), "--history", str(hist)])),
    }
    for path, (what, write) in writers.items():
        with pytest.raises(OSError, match=rf"no space left on the device to write {what} {path} \([\d,]+ bytes\); "
                                          rf"the old {path} was left as it was") as e:
            write()
        assert e.value.errno == errno.ENOSPC
        assert path.read_bytes() == old[path]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hist.json", "m.pt", "text.txt", "view.png"]


@needs_dev_full
def test_save_png_is_atomic(tmp_path, monkeypatch):
    from gpt_lesson.widgets import MaskExplorer
    png = tmp_path / "view.png"
    MaskExplorer(T=3).save_png(png)
    before = png.read_bytes()
    dev_full(monkeypatch)  # the write fails half-way
    with pytest.raises(OSError):
        MaskExplorer(T=5).save_png(png)
    assert png.read_bytes() == before  # the old picture, not half of the new one


# --- the shared cache of lesson 09's model ---------------------------------------------------

TINY_CONFIG = GPTConfig(vocab_size=65, n_embd=16, n_head=2, n_layer=1, block_size=8, dropout=0.0)
TINY_TRAIN = TrainConfig(max_steps=40, batch_size=4, eval_interval=40, eval_iters=1, progress=False)

CHILD = """
import hashlib, json, sys, time
from pathlib import Path
from gpt_lesson import shakespeare
from gpt_lesson.model import GPTConfig
from gpt_lesson.training import TrainConfig
path, log, go = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
real = shakespeare.train_model
def counted(*a, **k):
    with open(log, "a") as f:
        f.write("trained\\n")
    time.sleep(1.0)  # a slower trainer: the other process surely finds the cache empty meanwhile
    return real(*a, **k)
shakespeare.train_model = counted
text, tok, tr, va = shakespeare.load_data()
shakespeare.load_data = lambda: (text, tok, tr[:20000], va[:4000])  # a short run: the lock is what is tested
while not go.exists():
    time.sleep(0.01)
cfg = GPTConfig(vocab_size=65, n_embd=16, n_head=2, n_layer=1, block_size=8, dropout=0.0)
tcfg = TrainConfig(max_steps=40, batch_size=4, eval_interval=40, eval_iters=1, progress=False)
model, tok, extra = shakespeare.load_trained(config=cfg, train_config=tcfg, path=path)
print(json.dumps({k: hashlib.sha256(v.numpy().tobytes()).hexdigest() for k, v in model.state_dict().items()}))
"""


@pytest.mark.slow  # two processes, each loading torch and training: about 40 s on a busy 2-core machine
def test_two_processes_on_an_empty_cache_train_once_and_both_load_the_result(tmp_path, shakespeare_path):
    path, log, go = tmp_path / "cache" / "model.pt", tmp_path / "log.txt", tmp_path / "go"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GPT_LESSON_DATA": str(shakespeare_path)}
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(path), str(log), str(go)], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    time.sleep(0.5)
    go.touch()  # both start at once
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    assert log.read_text().splitlines() == ["trained"]  # one trained, the other waited
    assert "another process is training the model for" in outs[0][1] + outs[1][1]
    assert json.loads(outs[0][0]) == json.loads(outs[1][0])  # and loaded the same weights
    assert shakespeare.digest_path(path).is_file()


@pytest.fixture(scope="module")
def short_data(shakespeare_path):
    """Lesson 09's data cut short (the whole validation split takes long to evaluate on a busy machine)."""
    os.environ.setdefault("GPT_LESSON_DATA", str(shakespeare_path))
    text, tok, train_data, val_data = shakespeare.load_data()
    return text, tok, train_data[:20000], val_data[:4000]


@pytest.fixture
def trained(tmp_path, short_data, monkeypatch) -> Path:
    monkeypatch.setattr(shakespeare, "load_data", lambda: short_data)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    path = tmp_path / "cache" / "model.pt"
    try:
        shakespeare.train_model(False, config=TINY_CONFIG, train_config=TINY_TRAIN, path=path)
    finally:
        torch.set_num_threads(threads)
    return path


def load_tiny(path: Path, **kw):
    return shakespeare.load_trained(config=TINY_CONFIG, train_config=TINY_TRAIN, path=path, **kw)


def plant(path: Path) -> None:
    """Replace the cached file with another valid checkpoint of the same settings (other weights)."""
    _, raw = load_checkpoint(path)
    save_checkpoint(path, GPT(TINY_CONFIG), extra=raw["extra"])


def other_owner(path: Path, monkeypatch) -> None:
    """Make ``path`` another user's: chown as root, else pretend this process is another uid."""
    if os.getuid() == 0:
        os.chown(path, 54321, -1)
    else:
        monkeypatch.setattr(shakespeare.os, "getuid", lambda: os.stat(path).st_uid + 1)


def test_a_checkpoint_planted_in_the_shared_cache_is_caught_by_the_trainers_digest(trained, monkeypatch):
    model = load_tiny(trained, train_if_missing=False)[0]  # the trainer's own file loads quietly
    plant(trained)
    with pytest.raises(CheckpointError, match=rf"cannot load the checkpoint {trained}: it does not match the sha256 "
                                              r"its trainer wrote beside it in model\.pt\.sha256"):
        load_tiny(trained, train_if_missing=False)
    with pytest.warns(UserWarning, match="could not be used .*does not match the sha256"):
        again = load_tiny(trained)[0]  # trained again, the same seeded run
    # the same seeded run (up to the rounding of another thread count)
    assert all(torch.allclose(a, b, atol=1e-4) for a, b in zip(again.state_dict().values(), model.state_dict().values()))
    assert load_tiny(trained, train_if_missing=False)  # and trusted again


def test_another_users_checkpoint_is_named_by_its_owner(trained, monkeypatch):
    other_owner(trained, monkeypatch)
    with pytest.warns(UserWarning, match=r"was trained by (user \S+ \()?uid \d+\)?, not by you; it matches the digest"):
        load_tiny(trained, train_if_missing=False)  # the trainer's digest matches: used, and said
    shakespeare.digest_path(trained).unlink()  # no digest: an old cache, or a file planted with none
    with pytest.raises(CheckpointError, match=r"it belongs to (user \S+ \()?uid \d+\)?, not to you, and has no digest"):
        load_tiny(trained, train_if_missing=False)


def test_an_old_cache_of_ones_own_without_a_digest_still_loads(trained, recwarn):
    shakespeare.digest_path(trained).unlink()
    model, _, extra = load_tiny(trained, train_if_missing=False)
    assert extra["val_loss"] > 0 and not [w for w in recwarn if "cached model" in str(w.message)]

