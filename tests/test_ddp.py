"""Data-parallel training: 2 gloo processes under torchrun equal 1 process, a crashed rank saves nothing.

The two torchrun tests start real processes (about 10-20 s each on a busy 2-core machine).
"""
from __future__ import annotations

import json
import os
import random
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from gpt_lesson import checks, distributed, train_ddp
from gpt_lesson.checks import distributed as dist_checks
from gpt_lesson.checks.verdicts import CALLED_LIBRARY, NOT_ATTEMPTED, RAISED
from gpt_lesson.model import GPT
from gpt_lesson.training import TrainConfig, load_checkpoint, train

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
            "-m", "gpt_lesson.train_ddp"]
# A few steps of a tiny model; a global batch of 8 rows = 2 ranks x 2 micro-batches x 2 rows.
TINY = ["--n-layer", "2", "--n-head", "2", "--n-embd", "32", "--block-size", "16", "--max-steps", "6",
        "--batch-size", "8", "--eval-interval", "3", "--eval-iters", "2", "--lr", "3e-3", "--no-progress"]
# train_ddp.main is wrapped in torchrun's @record, which cannot install its fault handler under pytest's capture.
pytestmark = pytest.mark.filterwarnings("ignore:Unable to enable fault handler")
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                 "GROUP_RANK", "ROLE_RANK", "TORCHELASTIC_RUN_ID")


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # as the child processes (OMP_NUM_THREADS=1): 2 cores, 2 ranks
    yield
    torch.set_num_threads(before)


@pytest.fixture
def text_file(tmp_path: Path) -> Path:
    """A small seeded text of made-up words (about 20,000 characters)."""
    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 6))) for _ in range(60)]
    path = tmp_path / "text.txt"
    path.write_text(" ".join(rng.choice(words) for _ in range(4000)), encoding="utf-8")
    return path


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARS}
    env["OMP_NUM_THREADS"] = "1"  # 2 ranks on 2 cores: one thread each, no oversubscription
    return env


def run_torchrun(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    # About 10-25 s on a busy 2-core machine; the timeout only stops a hung run (no timing is asserted).
    return subprocess.run(TORCHRUN + args, cwd=cwd, env=child_env(), capture_output=True, text=True, timeout=120)


# --- the real thing: torchrun with 2 gloo processes ----------------------------------------

@pytest.mark.filterwarnings("ignore:Unable to enable fault handler")  # @record under pytest's capture
def test_two_processes_equal_one_process_with_the_same_global_batch(tmp_path, text_file, capsys):
    data = ["--data", str(text_file)]
    proc = run_torchrun(TINY + data + ["--micro-batch-size", "2", "--checkpoint", "two.pt",
                                                "--history", "two.json"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("world_size=2 backend=gloo") == 1  # only rank 0 prints
    assert "global batch 8 rows = 2 rank(s) x 2 micro-batch(es) x 2 rows" in proc.stdout

    one_ckpt = tmp_path / "one.pt"
    assert train_ddp.main(TINY + data + ["--checkpoint", str(one_ckpt), "--history", str(tmp_path / "one.json")]) == 0
    assert "world_size=1 backend=none (one process)" in capsys.readouterr().out

    one, _ = load_checkpoint(one_ckpt)
    two, _ = load_checkpoint(tmp_path / "two.pt")
    diffs = [(a - b).abs().max().item() for a, b in zip(one.state_dict().values(), two.state_dict().values())]
    assert max(diffs) < 1e-5
    start, _ = load_checkpoint(one_ckpt)  # the run moved the weights well beyond that tolerance
    torch.manual_seed(1337)
    fresh = GPT(start.config)
    assert max((a - b).abs().max().item() for a, b in zip(fresh.state_dict().values(), one.state_dict().values())) > 1e-3

    h1 = json.loads((tmp_path / "one.json").read_text())
    h2 = json.loads((tmp_path / "two.json").read_text())
    assert (h1["world_size"], h1["grad_accum_steps"], h1["micro_batch_size"]) == (1, 1, 8)
    assert (h2["world_size"], h2["grad_accum_steps"], h2["micro_batch_size"]) == (2, 2, 2)
    assert h2["allreduce_bytes"] == 4 * h2["n_params"] == 4 * one.num_parameters()
    assert h1["history"]["loss"] == pytest.approx(h2["history"]["loss"], abs=1e-5)
    assert h1["history"]["val"] == pytest.approx(h2["history"]["val"], abs=1e-5)
    assert h1["history"]["tokens"] == h2["history"]["tokens"] == 6 * 8 * 16
    assert h2["history"]["loss"][-1] < h2["history"]["loss"][0] - 0.1  # it did learn
    assert len(h2["step_seconds"]) == 6 and h2["median_step_seconds"] > 0


def test_a_failed_rank_stops_the_run_and_writes_no_checkpoint(tmp_path, text_file):
    proc = run_torchrun(TINY + ["--data", str(text_file), "--grad-accum-steps", "2", "--checkpoint",
                                   "run.pt", "--history", "run.json", "--fail-at-step", "2"], tmp_path)
    assert proc.returncode != 0
    assert "InjectedFailure: rank 1: injected failure after step 2 (--fail-at-step)" in proc.stderr
    assert "gpt_lesson.train_ddp FAILED" in proc.stderr
    root_cause = proc.stderr.split("Root Cause (first observed failure):")[1]
    assert "rank      : 1 (local_rank: 1)" in root_cause
    assert sorted(p.name for p in tmp_path.iterdir()) == ["text.txt"]  # no checkpoint, history or temp file


# --- a real one-process group, in this process -----------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_process_group_joins_and_always_leaves(monkeypatch):
    for k, v in dict(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                     MASTER_PORT=str(free_port())).items():
        monkeypatch.setenv(k, v)
    with distributed.process_group("gloo") as ctx:
        assert dist.is_initialized() and dist.get_backend() == "gloo"
        assert (ctx.rank, ctx.local_rank, ctx.world_size, ctx.backend, ctx.device) == (0, 0, 1, "gloo", "cpu")
        assert ctx.is_main and distributed.rank_and_world_size() == (0, 1)
        model = GPT(10, 8, 2, 1, 8, dropout=0.0)
        assert distributed.wrap_model(model) is model  # one rank: no DDP wrapper, nothing to average
        ddp = DDP(model)  # by hand, to see the switch accumulation uses: DDP's own flag, no_sync()'s too
        for sync in (False, True):
            distributed.set_gradient_sync(ddp, sync)
            assert ddp.require_backward_grad_sync is sync
        with ddp.no_sync():
            assert ddp.require_backward_grad_sync is False
    assert not dist.is_initialized()
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    with pytest.raises(RuntimeError, match="boom"):
        with distributed.process_group("gloo"):
            raise RuntimeError("boom")
    assert not dist.is_initialized()


def test_without_torchrun_everything_is_a_no_op(monkeypatch):
    for k in TORCHRUN_VARS:
        monkeypatch.delenv(k, raising=False)
    ctx = distributed.setup()
    assert (ctx.rank, ctx.world_size, ctx.backend) == (0, 1, None) and not dist.is_initialized()
    assert distributed.rank_and_world_size() == (0, 1)
    assert distributed.all_reduce_mean(2.5) == 2.5
    assert distributed.broadcast_floats([1.0, 2.0]) == [1.0, 2.0]
    distributed.barrier()
    model = GPT(10, 8, 2, 1, 8)
    assert distributed.wrap_model(model) is model
    distributed.set_gradient_sync(model, False)  # no DDP: nothing to switch, nothing added to the model
    assert not hasattr(model, "require_backward_grad_sync") and distributed.is_main()


# --- torchrun's variables ---------------------------------------------------------------

GOOD_ENV = dict(RANK="3", WORLD_SIZE="4", LOCAL_RANK="1", MASTER_ADDR="10.0.0.1", MASTER_PORT="29500")


def test_ranks_from_env():
    assert distributed.ranks_from_env({}) is None
    assert distributed.ranks_from_env(GOOD_ENV) == (3, 1, 4)


@pytest.mark.parametrize("change, message", [
    (dict(WORLD_SIZE=None), r"\$WORLD_SIZE is not set; torchrun sets RANK, WORLD_SIZE and LOCAL_RANK together"),
    (dict(LOCAL_RANK=None), r"\$LOCAL_RANK is not set"),
    (dict(RANK="one"), r"\$RANK='one' must be an integer"),
    (dict(WORLD_SIZE="0", RANK="0", LOCAL_RANK="0"), r"\$WORLD_SIZE=0 must be >= 1"),
    (dict(RANK="4"), r"\$RANK=4 must be in \[0, WORLD_SIZE=4\)"),
    (dict(RANK="-1"), r"\$RANK=-1 must be in \[0, WORLD_SIZE=4\)"),
    (dict(LOCAL_RANK="5"), r"\$LOCAL_RANK=5 must be in \[0, RANK=3\]"),
    (dict(MASTER_ADDR=None), r"\$MASTER_ADDR is not set; launch with torchrun"),
    (dict(MASTER_PORT=""), r"\$MASTER_PORT is not set; launch with torchrun"),
])
def test_ranks_from_env_rejects(change, message):
    env = dict(GOOD_ENV)
    for k, v in change.items():
        if v is None:
            env.pop(k)
        else:
            env[k] = v
    with pytest.raises(ValueError, match=message):
        distributed.ranks_from_env(env)


def test_setup_rejects_backends(monkeypatch):
    with pytest.raises(ValueError, match=r"backend='mpi' is not one of \('gloo', 'nccl'\)"):
        distributed.setup("mpi")
    if torch.cuda.is_available():
        return
    for k, v in dict(GOOD_ENV, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0").items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValueError, match="backend='nccl' needs CUDA GPUs"):
        distributed.setup("nccl")
    assert not dist.is_initialized()


def test_train_rejects_a_batch_the_ranks_cannot_share(monkeypatch):
    monkeypatch.setattr(distributed, "rank_and_world_size", lambda: (0, 3))
    data = torch.zeros(100, dtype=torch.long)
    with pytest.raises(ValueError, match="batch_size=8 cannot be cut into world_size=3 ranks x grad_accum_steps=2"):
        train(GPT(10, 8, 2, 1, 8), data, data, TrainConfig(batch_size=8, grad_accum_steps=2, progress=False))


# --- the arithmetic and the lesson's self-checks ------------------------------------------------

def test_batch_arithmetic():
    assert distributed.effective_batch(4, 3, 2) == 24
    assert distributed.grad_accum_steps_for(32, 8, 1) == 4
    assert distributed.grad_accum_steps_for(32, 8, 2) == 2
    with pytest.raises(ValueError, match="batch_size=32 is not divisible by micro_batch_size=8 x world_size=3"):
        distributed.grad_accum_steps_for(32, 8, 3)
    with pytest.raises(ValueError, match="world_size=0 must be a positive integer"):
        distributed.effective_batch(4, 3, 0)
    with pytest.raises(TypeError, match="micro_batch_size=2.0 must be an integer"):
        distributed.grad_accum_steps_for(32, 2.0, 1)


def test_allreduce_bytes_counts_parameters_not_buffers():
    model = GPT(65, 32, 4, 2, 16)
    n_buffer = sum(b.numel() for b in model.buffers())
    assert n_buffer == 2 * 16 * 16  # the tril masks
    assert distributed.allreduce_bytes(model) == 4 * model.num_parameters()
    assert distributed.allreduce_bytes(model, bytes_per_number=2) == 2 * model.num_parameters()
    with pytest.raises(ValueError, match="bytes_per_number=0 must be a positive integer"):
        distributed.allreduce_bytes(model, bytes_per_number=0)


def test_median_step_seconds():
    times = [9.0, 0.1, 0.2, 5.0, 0.3, 0.4]  # step 1 warms up, step 4 evaluated
    assert train_ddp.median_step_seconds(times, [0, 4]) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="no step left to time"):
        train_ddp.median_step_seconds([1.0], [0])


def test_fail_rank_must_exist(text_file):
    args = train_ddp.build_parser().parse_args(TINY + ["--data", str(text_file), "--fail-at-step", "1",
                                                       "--fail-rank", "2"])
    with pytest.raises(ValueError, match="--fail-rank=2 is not a rank of this run"):
        train_ddp.run(args, distributed.DistContext())


# --- the command line names every bad option before anything starts (issue 13) -----------------

@pytest.mark.parametrize("extra, message", [
    (["--max-chars", "-5"], r"--max-chars=-5 must be a positive integer"),  # used to drop the last 5 characters
    (["--max-chars", "0"], r"--max-chars=0 must be a positive integer"),
    (["--lr", "inf"], r"--lr: learning_rate=inf must be a finite number"),
    (["--min-lr", "1"], r"--min-lr: min_lr=1.0 must be in \[0, learning_rate=0.003\]"),
    (["--dropout", "1.5"], r"--dropout: dropout=1.5 must be in \[0, 1\)"),
    (["--n-embd", "31"], r"--n-embd: n_embd=31 is not divisible by n_head=2"),
    (["--seed", "-1"], r"--seed: seed=-1 must be >= 0"),
    (["--max-steps", "0"], r"--max-steps=0 must be a positive integer"),
    (["--fail-rank", "-1"], r"--fail-rank=-1 must be >= 0"),
    (["--checkpoint", ""], r"--checkpoint='' must be a file path, got an empty name"),
])
def test_bad_options_exit_with_a_message_naming_them(extra, message, text_file, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        train_ddp.main(TINY + ["--data", str(text_file), "--history", "h.json"] + extra)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert re.search(message, err), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["text.txt"]  # nothing trained or written


def test_a_binary_data_file_is_named_not_a_unicode_error(tmp_path, capsys, monkeypatch):
    binary = tmp_path / "weights.pt"
    torch.save({"w": torch.randn(100)}, binary)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        train_ddp.main(TINY + ["--data", str(binary), "--checkpoint", "c.pt"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"--data {binary} is not UTF-8 text: byte 0x" in err and "UnicodeDecodeError" not in err
    args = train_ddp.build_parser().parse_args(TINY + ["--data", str(binary)])
    with pytest.raises(ValueError, match=rf"--data {re.escape(str(binary))} is not UTF-8 text"):
        train_ddp.run(args, distributed.DistContext())
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(ValueError, match="--data .*empty.txt is empty"):
        train_ddp.load_tokens(str(empty), None)
    with pytest.raises(FileNotFoundError, match="--data .*nope.txt: no such file"):
        train_ddp.load_tokens(str(tmp_path / "nope.txt"), None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.txt", "weights.pt"]


def test_max_chars_keeps_exactly_the_first_n_characters(text_file):
    data, tok = train_ddp.load_tokens(str(text_file), 1000)
    assert len(data) == 1000 and tok.decode(data.tolist()) == text_file.read_text()[:1000]


def test_every_step_evaluated_still_writes_history_and_checkpoint(text_file, tmp_path, capsys):
    """--max-steps 2 --eval-interval 1 leaves no step to time: say so, do not crash after training."""
    args = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "8", "--batch-size", "4",
            "--max-steps", "2", "--eval-interval", "1", "--eval-iters", "1", "--no-progress", "--data", str(text_file),
            "--checkpoint", str(tmp_path / "c.pt"), "--history", str(tmp_path / "h.json")]
    assert train_ddp.main(args) == 0
    assert "median step not measured (every step but the first evaluated; raise --eval-interval)" in capsys.readouterr().out
    history = json.loads((tmp_path / "h.json").read_text())
    assert history["median_step_seconds"] is None and len(history["step_seconds"]) == 2
    assert history["history"]["eval_step"] == [0, 1, 2]
    load_checkpoint(tmp_path / "c.pt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pt", "h.json", "text.txt"]


def test_output_files_respect_the_umask(text_file, tmp_path):
    old = os.umask(0o022)
    try:
        assert train_ddp.main(TINY + ["--max-steps", "1", "--data", str(text_file), "--checkpoint",
                                      str(tmp_path / "c.pt"), "--history", str(tmp_path / "h.json")]) == 0
    finally:
        os.umask(old)
    assert {p.name: p.stat().st_mode & 0o777 for p in tmp_path.glob("[ch].*")} == {"c.pt": 0o644, "h.json": 0o644}


def test_timed_steps_leaves_out_warmup_and_evaluation():
    assert train_ddp.timed_steps([9.0, 0.1, 0.2, 5.0], [0, 4]) == [0.1, 0.2]
    assert train_ddp.timed_steps([9.0, 5.0], [0, 1, 2]) == []


# --- lesson 12's exercise: averaging the gradients by hand in two forked gloo processes ------------
# Each check forks two ranks (about 1-10 s on a busy 2-core machine): the right answers and the most
# common bugs run in the quick tests, the rest are marked slow.

def average_sum_then_divide(model):
    world = dist.get_world_size()
    for p in model.parameters():
        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
        p.grad /= world


def average_with_avg_op(model):
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad.data, op=dist.ReduceOp.AVG)


def average_one_flat_buffer(model):
    params = [p for p in model.parameters() if p.grad is not None]
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    offset = 0
    for p in params:
        p.grad.copy_(flat[offset:offset + p.numel()].view_as(p.grad))
        offset += p.numel()


def average_async_handles(model):
    handles = [dist.all_reduce(p.grad, async_op=True) for p in model.parameters()]
    for h in handles:
        h.wait()
    for p in model.parameters():
        p.grad.div_(dist.get_world_size())


@pytest.mark.parametrize("fn", [average_sum_then_divide, average_with_avg_op, average_one_flat_buffer,
                                average_async_handles], ids=lambda f: f.__name__)
def test_hand_averaged_gradients_in_every_style_pass(fn):
    result = checks.check_allreduce_average(fn)
    assert result.passed, result.message


def test_hand_averaged_gradients_pass_the_hidden_case():
    assert checks.check_allreduce_average(average_sum_then_divide, hidden=True).passed


def average_summed(model):
    for p in model.parameters():
        dist.all_reduce(p.grad)


def average_divided_twice(model):
    for p in model.parameters():
        dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
        p.grad /= dist.get_world_size()


def average_a_copy(model):
    for p in model.parameters():
        dist.all_reduce(p.grad / dist.get_world_size())


def average_the_weights(model):
    for p in model.parameters():
        dist.all_reduce(p.data)
        p.data /= dist.get_world_size()


def average_first_only(model):
    for p in model.parameters():
        dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
        return


def average_nothing(model):
    for p in model.parameters():
        p.grad.mul_(1.0)


def average_weird(model):
    for p in model.parameters():
        dist.all_reduce(p.grad, op=dist.ReduceOp.MAX)


AVERAGE_BUGS = [
    (average_summed, dist_checks.SUMMED_NOT_AVERAGED, "2 times DDP's"),
    (average_divided_twice, dist_checks.DIVIDED_TWICE_BY_WORLD, "half of DDP's"),
    (average_a_copy, dist_checks.REDUCED_A_COPY, "works in place"),
    (average_the_weights, dist_checks.REDUCED_WEIGHTS, "not the gradients"),
    (average_first_only, dist_checks.SOME_PARAMETERS, "only 1 of the 26 parameters"),
    (average_nothing, dist_checks.NEVER_REDUCED, "never called torch.distributed.all_reduce"),
    (average_weird, "wrong values", "expected (DDP's gradient)"),
]
QUICK = {dist_checks.SUMMED_NOT_AVERAGED, dist_checks.REDUCED_A_COPY}


@pytest.mark.parametrize("fn, label, fragment", [
    pytest.param(*bug, marks=() if bug[1] in QUICK else pytest.mark.slow) for bug in AVERAGE_BUGS],
    ids=[bug[0].__name__ for bug in AVERAGE_BUGS])
def test_hand_averaging_bugs_are_named(fn, label, fragment):
    result = checks.check_allreduce_average(fn)
    assert not result.passed and result.attempted and result.diagnosis == label, result.message
    assert fragment in result.message


def test_hand_averaging_stub_is_not_attempted():
    def stub(model):
        raise NotImplementedError
    result = checks.check_allreduce_average(stub)
    assert not result.attempted and result.diagnosis == NOT_ATTEMPTED


@pytest.mark.slow
def test_hand_averaging_crash_and_library_call_are_reported():
    def crashes(model):
        return 1 / 0

    def wraps_ddp(model):
        torch.nn.parallel.DistributedDataParallel(model)

    result = checks.check_allreduce_average(crashes)
    assert result.diagnosis == RAISED and "ZeroDivisionError: division by zero" in result.message
    assert "On rank 0" in result.message
    assert checks.check_allreduce_average(wraps_ddp).diagnosis == CALLED_LIBRARY


@pytest.mark.slow
def test_a_rank_that_never_joins_is_named_not_waited_for(monkeypatch):
    monkeypatch.setattr(dist_checks, "_SECONDS", 3)  # gloo's timeout in the ranks, and the parent's deadline

    def rank0_only(model):
        if dist.get_rank() == 0:
            for p in model.parameters():
                dist.all_reduce(p.grad)

    def spins(model):
        while True:
            pass

    result = checks.check_allreduce_average(rank0_only)
    assert result.diagnosis == dist_checks.RANKS_HUNG and "no `if rank == 0:`" in result.message
    result = checks.check_allreduce_average(spins)
    assert result.diagnosis == dist_checks.RANKS_HUNG and "did not finish" in result.message


def test_without_fork_the_check_says_why(monkeypatch):
    monkeypatch.setattr(dist_checks.mp, "get_all_start_methods", lambda: ["spawn"])
    result = checks.check_allreduce_average(average_sum_then_divide)
    assert result.diagnosis == dist_checks.NO_PROCESSES and "Windows" in result.message


def test_hand_averaging_leaves_no_process_group_and_no_child_behind():
    import multiprocessing

    assert checks.check_allreduce_average(average_sum_then_divide).passed
    assert not dist.is_initialized()
    assert not [p for p in multiprocessing.active_children() if p.is_alive()]
