"""tools/hub_load.py: N kernels running a notebook at once, with their CPU time and peak memory."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from tools import hub_load


def _notebook(tmp_path, code: str | list[str], name: str = "tiny.ipynb"):
    path = tmp_path / name
    nb = new_notebook(cells=[new_code_cell(c) for c in ([code] if isinstance(code, str) else code)])
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
        assert r["cpu_s"] >= 0.3 and r["kernel_hwm_mb"] >= 200 and r["wall_s"] >= 0.3
        assert r["peak_tree_mb"] >= r["kernel_hwm_mb"] and r["samples"] >= 2
    assert hub_load.main([str(path), "--kernels", "1", "--json", str(tmp_path / "out.json")]) == 0
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["threads"] == 1 and [r["kernels"] for r in out["runs"]] == [1]
    assert "load_after" in out["runs"][0]
    assert "1 kernels: all done in" in capsys.readouterr().out
    # the same numbers as a Markdown table
    assert hub_load.main(["--table", str(tmp_path / "out.json")]) == 0
    header, rule, row = capsys.readouterr().out.strip().splitlines()
    report = out["runs"][0]["reports"][0]
    assert header.startswith("| Notebook | Kernels | Peak, kernel + children") and rule.startswith("|---|")
    assert row.startswith("| tiny | 1 | ") and f"{report['peak_tree_mb']:,.0f} MB" in row, row


# A child process holds 200 MB (pages written, so resident) for 1.5 s while the kernel itself stays small.
CHILD = ("import subprocess, sys\n"
         "code = 'import time; x = b\"x\" * (200 * 2**20); time.sleep(1.5)'\n"
         "subprocess.run([sys.executable, '-c', code], check=True)")


def test_a_child_process_memory_and_cpu_are_counted(tmp_path):
    report = hub_load.run_one(_notebook(tmp_path, ["x = 1", CHILD, "y = 2"]), threads=1, interval=0.05)
    assert report["kernel_hwm_mb"] < 190, report  # the kernel alone never held the 200 MB
    assert report["peak_tree_mb"] >= report["kernel_hwm_mb"] + 190, report  # the child's 200 MB are in the sum
    # the peak is named in the cell that started the child (cell 1), not in the cells around it
    assert report["peak_cell"] == 1 and report["cell_peaks_mb"][1] >= report["cell_peaks_mb"][2] + 190, report


def test_a_grandchild_still_alive_is_in_the_tree(tmp_path):
    # a shell whose child sleeps: both are descendants of this process
    proc = subprocess.Popen(["sh", "-c", "sleep 5 & wait"])
    try:
        deadline = time.time() + 5
        while time.time() < deadline and len(hub_load.process_tree(proc.pid)) < 2:
            time.sleep(0.05)
        tree = hub_load.process_tree(os.getpid())
        assert proc.pid in tree and len(hub_load.process_tree(proc.pid)) == 2
        assert hub_load.tree_rss_mb(proc.pid) > 0 and hub_load.tree_cpu_seconds(proc.pid) >= 0
    finally:
        proc.kill()
        proc.wait()


def test_several_notebooks_and_pinning_to_one_core(tmp_path, capsys):
    code = "import os\nassert os.sched_getaffinity(0) == {0}, os.sched_getaffinity(0)"
    a, b = _notebook(tmp_path, code, "a.ipynb"), _notebook(tmp_path, code, "b.ipynb")
    out = tmp_path / "both.json"
    assert hub_load.main([str(a), str(b), "--kernels", "1", "--cpus", "0", "--json", str(out)]) == 0
    both = json.loads(out.read_text())
    assert [r["notebook"] for r in both] == [str(a), str(b)] and both[0]["cpus"] == [0]
    assert "pinned to cores [0]" in capsys.readouterr().out


def test_a_failing_notebook_fails_the_run(tmp_path):
    path = _notebook(tmp_path, "raise RuntimeError('boom')")
    with pytest.raises(RuntimeError, match="a worker failed"):
        hub_load.run_many(path, 1, threads=1)


@pytest.mark.parametrize("args, message", [
    (["missing.ipynb"], "missing.ipynb does not exist"),
    (["{nb}", "--threads", "0"], "must be at least 1"),
    (["{nb}", "--kernels", "2", "0"], "must be at least 1"),
    (["{nb}", "--interval", "0"], "--interval must be in (0, 10] seconds, got 0.0"),
    (["{nb}", "--cpus", "4096"], "--cpus [4096]: this machine offers cores"),
])
def test_bad_arguments(tmp_path, capsys, args, message):
    path = _notebook(tmp_path, "1")
    with pytest.raises(SystemExit):
        hub_load.main([a.format(nb=path) for a in args])
    assert message in capsys.readouterr().err


def test_the_sampler_sees_memory_that_comes_and_goes():
    proc = subprocess.Popen([sys.executable, "-c", "import time; x = b'x' * (100 * 2**20); time.sleep(1); del x; "
                                                   "time.sleep(1)"])
    try:
        sampler = hub_load.TreeSampler(proc.pid, 0.05)
        sampler.start()
        proc.wait()
        peak = sampler.stop()
    finally:
        proc.kill()
    assert peak >= 100 and sampler.samples >= 10


def test_the_idle_server_is_measured(tmp_path, capsys):
    out = tmp_path / "server.json"
    assert hub_load.main(["--server", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    # a Python process with jupyter_server and JupyterLab's extensions imported: tens of MB at least
    assert 40 < report["server_rss_mb"] < 1000 and report["processes"] >= 1, report
    assert "an idle jupyter lab server:" in capsys.readouterr().out


def test_no_notebook_and_no_server_is_an_error(capsys):
    with pytest.raises(SystemExit):
        hub_load.main([])
    assert "name at least one notebook (or --server)" in capsys.readouterr().err


def test_the_guide_sizes_the_hub_from_the_measurements():
    # docs/teaching.md section 8 advises a mem_limit; every lesson measured in benchmarks/results/hub_load/
    # must fit under it with the Jupyter server's share, and every row of the guide's table is in the results.
    import re
    from pathlib import Path

    root = Path(hub_load.REPO_ROOT)
    guide = (root / "docs" / "teaching.md").read_text()
    limits = set(re.findall(r'c\.Spawner\.mem_limit = "([0-9.]+)G"', guide))
    assert len(limits) == 1, limits  # the advice and the config snippet say the same
    limit_mb = float(limits.pop()) * 1024
    server = json.loads((root / "benchmarks/results/hub_load/server.json").read_text())["server_rss_mb"]
    results = json.loads((root / "benchmarks/results/hub_load/en.json").read_text())
    for result in results:
        peak = result["runs"][0]["reports"][0]["peak_tree_mb"]
        assert peak + server <= limit_mb, (result["notebook"], peak, server, limit_mb)
    for row in hub_load.markdown_rows(results):
        assert row in guide, row


def test_the_image_has_the_compiler_lesson_10_compiles_with():
    """Lesson 10's compile section builds C++ (torch.compile's Inductor): the Binder/repo2docker image installs
    a compiler from binder/apt.txt, and the guide's hub sizing says so."""
    from pathlib import Path

    root = Path(hub_load.REPO_ROOT)
    packages = [ln.strip() for ln in (root / "binder" / "apt.txt").read_text().splitlines()
                if ln.strip() and not ln.startswith("#")]
    assert "g++" in packages
    guide = (root / "docs" / "teaching.md").read_text()
    hub = guide[guide.index("## 8. Running the course on a JupyterHub"):guide.index("## 9.")]
    assert "apt-get install g++" in hub and "`binder/apt.txt`" in hub
