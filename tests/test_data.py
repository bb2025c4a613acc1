"""Tokenizer, the Tiny Shakespeare loader (local copy, cache, download checks) and batches."""
import hashlib
import http.server
import threading
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
    with pytest.raises(ValueError, match="sha256 .* expected 86c4e6aa"):
        load_tiny_shakespeare(bad)
    truncated = tmp_path / "short.txt"
    truncated.write_bytes(bytes(raw[:5000]))
    with pytest.raises(ValueError, match="corrupt or truncated"):
        load_tiny_shakespeare(truncated)


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
    with pytest.raises(ValueError, match="corrupt or truncated"):
        load_tiny_shakespeare(url=f"{base}/input.txt")
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
