"""tools/hub_load.py: N kernels running a notebook at once, with their CPU time and peak memory."""
from __future__ import annotations

import json

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from tools import hub_load


def _notebook(tmp_path, code: str):
    path = tmp_path / "tiny.ipynb"
    nb = new_notebook(cells=[new_code_cell(code)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


def test_two_kernels_report_cpu_memory_and_threads(tmp_path, capsys):
    # About 0.3 s of CPU and a 200 MB array in each kernel; the kernel sees the thread limit.
    path = _notebook(tmp_path, "import os, time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
                               "x = bytearray(200 * 2**20)\nassert os.environ['OMP_NUM_THREADS'] == '1'")
    reports = hub_load.run_many(path, 2, threads=1)
    assert len(reports) == 2
    for r in reports:
        assert r["cpu_s"] >= 0.3 and r["peak_rss_mb"] >= 200 and r["wall_s"] >= 0.3
    assert hub_load.main([str(path), "--kernels", "1", "--json", str(tmp_path / "out.json")]) == 0
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["threads"] == 1 and [r["kernels"] for r in out["runs"]] == [1]
    assert "1 kernels: all done in" in capsys.readouterr().out


def test_a_failing_notebook_fails_the_run(tmp_path):
    path = _notebook(tmp_path, "raise RuntimeError('boom')")
    with pytest.raises(RuntimeError, match="a worker failed"):
        hub_load.run_many(path, 1, threads=1)


@pytest.mark.parametrize("args, message", [
    (["missing.ipynb"], "missing.ipynb does not exist"),
    (["{nb}", "--threads", "0"], "must be at least 1"),
    (["{nb}", "--kernels", "2", "0"], "must be at least 1"),
])
def test_bad_arguments(tmp_path, capsys, args, message):
    path = _notebook(tmp_path, "1")
    with pytest.raises(SystemExit):
        hub_load.main([a.format(nb=path) for a in args])
    assert message in capsys.readouterr().err
