"""gpt_lesson.runtime: process-wide PyTorch settings changed only inside a block the caller writes."""
import pytest
import torch

from gpt_lesson.runtime import decode_settings, num_threads, one_thread, onednn


def test_each_setting_is_restored_after_the_block_even_after_an_error():
    threads, mkldnn = torch.get_num_threads(), torch.backends.mkldnn.enabled
    target = 1 if threads != 1 else 2
    with pytest.raises(RuntimeError, match="boom"):
        with num_threads(target):
            assert torch.get_num_threads() == target
            raise RuntimeError("boom")
    assert torch.get_num_threads() == threads
    with onednn(not mkldnn):
        assert torch.backends.mkldnn.enabled is (not mkldnn)
    assert torch.backends.mkldnn.enabled == mkldnn
    with decode_settings():
        assert torch.get_num_threads() == 1 and torch.backends.mkldnn.enabled is False
    with one_thread():
        assert torch.get_num_threads() == 1
    assert (torch.get_num_threads(), torch.backends.mkldnn.enabled) == (threads, mkldnn)


def test_bad_settings_are_named_before_anything_changes():
    threads = torch.get_num_threads()
    with pytest.raises(ValueError, match="n=0 must be a positive integer"):
        with num_threads(0):
            pass
    with pytest.raises(TypeError, match="enabled='no' must be True or False"):
        with onednn("no"):
            pass
    assert torch.get_num_threads() == threads
