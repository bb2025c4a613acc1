"""Tokenizer, the Tiny Shakespeare loader (local copy, cache, download checks) and batches."""
import hashlib
import http.server
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from gpt_lesson import data as D
from gpt_lesson.data import CharTokenizer, get_batch, load_tiny_shakespeare, train_val_split


def test_tokenizer_round_trip_and_vocab():
    text = "First Citizen:\nBefore we proceed any further, hear me speak."
    tok = CharTokenizer(text)
    assert tok.vocab_size == len(set(text))
    assert tok.chars == sorted(set(text))
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert tok.decode(torch.tensor(ids)) == text
    assert ids[:5] == [tok.stoi[c] for c in "First"]
    assert tok.encode("") == [] and tok.decode([]) == ""


def test_shared_file_length_and_checksum(shakespeare_path):
    text = load_tiny_shakespeare(shakespeare_path)
    assert len(text) == 1_115_394
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == D.TINY_SHAKESPEARE_SHA256
    assert text.startswith("First Citizen:")
    tok = CharTokenizer(text)
    assert tok.vocab_size == 65
    assert tok.decode(tok.encode(text[:1000])) == text[:1000]


def test_environment_variable_points_the_loader(shakespeare_path, monkeypatch, tmp_path):
    monkeypatch.setenv(D.DATA_ENV, str(shakespeare_path))
    monkeypatch.setenv(D.CACHE_ENV, str(tmp_path / "empty-cache"))
    assert len(load_tiny_shakespeare()) == 1_115_394
    assert not (tmp_path / "empty-cache").exists()  # nothing downloaded or copied


def test_corrupt_local_copy_is_rejected(shakespeare_path, tmp_path):
    bad = tmp_path / "tiny.txt"
    raw = bytearray(Path(shakespeare_path).read_bytes())
    raw[1000] ^= 1  # one flipped bit
    bad.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="tiny.txt has the right size but other content .*sha256 .* expected "
                                         "86c4e6aa.*it is corrupt"):
        load_tiny_shakespeare(bad)
    truncated = tmp_path / "short.txt"
    truncated.write_bytes(bytes(raw[:5000]))
    with pytest.raises(ValueError, match="short.txt has 5,000 bytes instead of 1,115,394 .*it is truncated"):
        load_tiny_shakespeare(truncated)
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty.txt is empty \(0 bytes\); replace it with a fresh copy"):
        load_tiny_shakespeare(empty)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.txt", "short.txt", "tiny.txt"]  # nothing touched


def test_missing_file_with_no_network_says_how_to_provide_it(monkeypatch, tmp_path):
    monkeypatch.delenv(D.DATA_ENV, raising=False)
    monkeypatch.setenv(D.CACHE_ENV, str(tmp_path))
    with pytest.raises(FileNotFoundError) as e:
        load_tiny_shakespeare(url="http://127.0.0.1:9/tinyshakespeare.txt")  # port 9: nothing listens
    msg = str(e.value)
    assert "GPT_LESSON_DATA" in msg and str(tmp_path / "tinyshakespeare.txt") in msg and "1,115,394 bytes" in msg
    assert list(tmp_path.iterdir()) == []  # no partial file left behind


def test_missing_explicit_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="no Tiny Shakespeare file at .*nope.txt"):
        load_tiny_shakespeare(tmp_path / "nope.txt")


@pytest.fixture
def file_server(tmp_path):
    """A local HTTP server (127.0.0.1 only) serving files from a temp folder."""
    root = tmp_path / "served"
    root.mkdir()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(root), **kw)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_download_verifies_and_caches(file_server, shakespeare_path, monkeypatch, tmp_path):
    root, base = file_server
    (root / "input.txt").write_bytes(Path(shakespeare_path).read_bytes())
    cache = tmp_path / "cache"
    monkeypatch.delenv(D.DATA_ENV, raising=False)
    monkeypatch.setenv(D.CACHE_ENV, str(cache))
    text = load_tiny_shakespeare(url=f"{base}/input.txt")
    assert len(text) == 1_115_394
    assert sorted(p.name for p in cache.iterdir()) == ["tinyshakespeare.txt"]
    (root / "input.txt").unlink()  # second call must use the cache, not the network
    assert load_tiny_shakespeare(url=f"{base}/input.txt") == text


@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
def test_bad_download_is_rejected_and_leaves_no_file(file_server, shakespeare_path, monkeypatch, tmp_path, damage):
    root, base = file_server
    raw = Path(shakespeare_path).read_bytes()
    served = raw[: len(raw) // 2] if damage == "truncated" else raw.replace(b"Citizen", b"Citizan", 1)
    (root / "input.txt").write_bytes(served)
    cache = tmp_path / "cache"
    monkeypatch.delenv(D.DATA_ENV, raising=False)
    monkeypatch.setenv(D.CACHE_ENV, str(cache))
    with pytest.raises(ValueError) as e:
        load_tiny_shakespeare(url=f"{base}/input.txt")
    msg = str(e.value)
    assert f"the file downloaded from {base}/input.txt" in msg
    assert ("it is truncated" if damage == "truncated" else "it is corrupt") in msg
    assert ".part" not in msg  # the temp file is gone: the message names what the learner can find
    assert f"copy the file (1,115,394 bytes) to {cache / 'tinyshakespeare.txt'}" in msg and "GPT_LESSON_DATA" in msg
    assert list(cache.iterdir()) == []  # neither the file nor a .part remains


def test_split_is_90_10_and_ordered():
    data = torch.arange(1000)
    train, val = train_val_split(data)
    assert len(train) == 900 and len(val) == 100
    assert torch.equal(torch.cat([train, val]), data)


def test_get_batch_targets_are_shifted_inputs():
    data = torch.arange(500)
    g = torch.Generator().manual_seed(0)
    x, y = get_batch(data, block_size=16, batch_size=8, generator=g)
    assert x.shape == y.shape == (8, 16)
    assert torch.equal(y, x + 1)  # with data = 0..499 the next token is the id plus one
    g2 = torch.Generator().manual_seed(0)
    x2, _ = get_batch(data, 16, 8, g2)
    assert torch.equal(x, x2)  # seeded: repeatable


# --- what a learner's copy of the file can be, and what they are told ----------------------------

def test_windows_line_endings_are_named_with_the_fix(shakespeare_path, tmp_path):
    crlf = tmp_path / "tiny.txt"
    crlf.write_bytes(Path(shakespeare_path).read_bytes().replace(b"\n", b"\r\n"))
    with pytest.raises(ValueError) as e:
        load_tiny_shakespeare(crlf)
    msg = str(e.value)
    assert msg.startswith(f"{crlf} has Windows line endings (CRLF, \\r\\n)") and f"dos2unix {crlf}" in msg
    assert "truncated" not in msg and "corrupt" not in msg
    # The fix the message gives, run as written, makes the file load.
    snippet = msg.split("in Python: ")[1].split("; or ")[0]
    exec(snippet, {"pathlib": __import__("pathlib")})
    assert len(load_tiny_shakespeare(crlf)) == D.TINY_SHAKESPEARE_SIZE


def test_an_html_page_is_named(file_server, monkeypatch, tmp_path):
    root, base = file_server
    (root / "input.txt").write_bytes(b"<!DOCTYPE html><html><body>Please log in to the Wi-Fi</body></html>")
    monkeypatch.delenv(D.DATA_ENV, raising=False)
    monkeypatch.setenv(D.CACHE_ENV, str(tmp_path / "cache"))
    with pytest.raises(ValueError, match="is an HTML page, not the text: a proxy, login page"):
        load_tiny_shakespeare(url=f"{base}/input.txt")
    assert list((tmp_path / "cache").iterdir()) == []


def test_tilde_in_the_environment_variables_is_expanded(shakespeare_path, monkeypatch, tmp_path):
    home = tmp_path / "home"
    (home / "data").mkdir(parents=True)
    (home / "data" / "tiny.txt").write_bytes(Path(shakespeare_path).read_bytes())
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv(D.DATA_ENV, "~/data/tiny.txt")
    assert len(load_tiny_shakespeare()) == D.TINY_SHAKESPEARE_SIZE
    monkeypatch.setenv(D.CACHE_ENV, "~/my-cache")
    assert D.cache_dir() == home / "my-cache"
    assert len(load_tiny_shakespeare("~/data/tiny.txt")) == D.TINY_SHAKESPEARE_SIZE  # the path argument too


def test_an_unwritable_cache_is_not_called_a_download_failure(monkeypatch, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    cache = blocker / "cache"  # a folder can never be made below a file, whoever runs the test
    monkeypatch.delenv(D.DATA_ENV, raising=False)
    monkeypatch.setenv(D.CACHE_ENV, str(cache))
    with pytest.raises(OSError) as e:
        load_tiny_shakespeare(url="http://127.0.0.1:9/never-asked.txt")
    msg = str(e.value)
    assert isinstance(e.value, NotADirectoryError) and not isinstance(e.value, FileNotFoundError)
    assert f"in the folder {cache}" in msg and "Set $GPT_LESSON_CACHE to a folder you can write to" in msg
    assert "could not download" not in msg and f"to {cache / 'tinyshakespeare.txt'}" not in msg
    assert blocker.read_text() == "not a folder"


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root can write any folder")
def test_a_read_only_cache_folder_is_named(monkeypatch, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o500)
    monkeypatch.delenv(D.DATA_ENV, raising=False)
    monkeypatch.setenv(D.CACHE_ENV, str(cache))
    try:
        with pytest.raises(PermissionError, match=f"in the folder {cache}.*GPT_LESSON_CACHE"):
            load_tiny_shakespeare(url="http://127.0.0.1:9/never-asked.txt")
    finally:
        cache.chmod(0o700)


@pytest.fixture
def umask():
    """Set the process umask for one test and restore it after."""
    old = os.umask(0o022)
    yield lambda mask: os.umask(mask)
    os.umask(old)


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o002, 0o664)])
def test_downloaded_file_respects_the_umask(file_server, shakespeare_path, monkeypatch, tmp_path, umask, mask, mode):
    root, base = file_server
    (root / "input.txt").write_bytes(Path(shakespeare_path).read_bytes())
    monkeypatch.delenv(D.DATA_ENV, raising=False)
    monkeypatch.setenv(D.CACHE_ENV, str(tmp_path / "cache"))
    umask(mask)
    load_tiny_shakespeare(url=f"{base}/input.txt")
    assert (tmp_path / "cache" / "tinyshakespeare.txt").stat().st_mode & 0o777 == mode  # not mkstemp's 0o600


@pytest.fixture
def slow_server(shakespeare_path):
    """Serves the first 64 KB of the file at once, then waits (until released) before the rest."""
    raw = Path(shakespeare_path).read_bytes()
    release = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw[:65536])
            self.wfile.flush()
            if self.path == "/cut":  # close the connection half way
                return
            release.wait(60)
            self.wfile.write(raw[65536:])

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    release.set()
    server.shutdown()


def test_a_killed_download_leaves_a_part_file_the_next_attempt_removes(slow_server, file_server, shakespeare_path,
                                                                       monkeypatch, tmp_path):
    cache = tmp_path / "cache"
    dest = cache / "tinyshakespeare.txt"
    child = subprocess.Popen([sys.executable, "-c", "import sys; from gpt_lesson.data import download; "
                              "download(sys.argv[1], sys.argv[2], 'x' * 64)", f"{slow_server}/slow", str(dest)])
    try:
        deadline = time.time() + 60
        while not any(p.stat().st_size > 0 for p in cache.glob("*.part")) if cache.exists() else True:
            assert time.time() < deadline and child.poll() is None, "the child never started writing"
            time.sleep(0.05)
    finally:
        os.kill(child.pid, signal.SIGKILL)  # the kernel dies mid-download: no finally block runs
        child.wait()
    left = list(cache.glob("*.part"))
    assert len(left) == 1 and left[0].name.startswith(f"tinyshakespeare.txt.{child.pid}@")
    # Temp files of writers that may still be alive are kept: another machine's recent one, a live process's.
    other_host = cache / "tinyshakespeare.txt.4242@elsewhere.0123abcd.part"
    other_host.write_bytes(b"someone else's download in progress")
    alive = cache / f"tinyshakespeare.txt.{os.getpid()}@{socket.gethostname()}.0123abcd.part"
    alive.write_bytes(b"ours, in progress")
    old = cache / "tinyshakespeare.txt.k3j4h5ab.part"  # the name an older version used, untouched for an hour
    old.write_bytes(b"stale")
    os.utime(old, (time.time() - 3600, time.time() - 3600))

    root, base = file_server
    (root / "input.txt").write_bytes(Path(shakespeare_path).read_bytes())
    monkeypatch.delenv(D.DATA_ENV, raising=False)
    monkeypatch.setenv(D.CACHE_ENV, str(cache))
    assert len(load_tiny_shakespeare(url=f"{base}/input.txt")) == D.TINY_SHAKESPEARE_SIZE
    assert sorted(p.name for p in cache.iterdir()) == sorted([dest.name, other_host.name, alive.name])


def test_a_download_cut_off_mid_way_gives_the_offline_advice(slow_server, monkeypatch, tmp_path):
    cache = tmp_path / "cache"
    monkeypatch.delenv(D.DATA_ENV, raising=False)
    monkeypatch.setenv(D.CACHE_ENV, str(cache))
    with pytest.raises(FileNotFoundError) as e:
        load_tiny_shakespeare(url=f"{slow_server}/cut")
    msg = str(e.value)
    assert f"the download of {slow_server}/cut was cut off after 65,536 bytes" in msg
    assert "Without a network: copy the file" in msg and ".part" not in msg
    assert list(cache.iterdir()) == []


def test_download_arguments_are_checked(tmp_path):
    with pytest.raises(TypeError, match="url must be a str, got int"):
        D.download(5, tmp_path / "x", "00")
    with pytest.raises(TypeError, match=r"dest=None must be a file path"):
        D.download("http://127.0.0.1:9/x", None, "00")
    with pytest.raises(ValueError, match="timeout=0 must be > 0"):
        D.download("http://127.0.0.1:9/x", tmp_path / "x", "00", timeout=0)
    with pytest.raises(ValueError, match="url='nowhere' cannot be downloaded"):
        D.download("nowhere", tmp_path / "x", "00")
    with pytest.raises(TypeError, match="download_if_missing='no' must be True or False"):
        load_tiny_shakespeare(download_if_missing="no")
    assert list(tmp_path.iterdir()) == []


def test_tests_never_download():
    """conftest blocks every URL that is not on this machine, so no test can reach the network."""
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.URLError, match="tests never download"):
        urllib.request.urlopen("https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt")
