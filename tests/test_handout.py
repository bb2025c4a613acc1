"""A hand-out works anywhere: lesson 08 (which compares the library with the source model) runs from a
copy of the notebook outside the repository, in a kernel whose network is off, with only the installed
package - the case of a JupyterHub copy, an e-mailed notebook or a USB stick in a lab."""
from __future__ import annotations

import os
import shutil
import textwrap

import nbformat
import pytest
from conftest import ROOT

# Started by the kernel before anything else (PYTHONPATH): every connection that leaves this machine
# fails as it does with the network cable pulled. The kernel's own ZeroMQ sockets are not Python sockets.
NO_NETWORK = textwrap.dedent("""
    import socket
    _connect = socket.socket.connect
    def _local_only(self, address):
        host = address[0] if isinstance(address, tuple) else address
        if isinstance(host, str) and host not in ("127.0.0.1", "localhost", "::1") and "/" not in host:
            raise OSError(101, f"network is unreachable (test: no network for {host})")
        return _connect(self, address)
    socket.socket.connect = _local_only
""")


@pytest.mark.slow
def test_lesson_08_runs_outside_the_repository_with_the_network_off(tmp_path, shakespeare_path):
    from nbclient import NotebookClient

    handout = tmp_path / "handout"
    handout.mkdir()
    shutil.copy(ROOT / "notebooks" / "08_full_gpt.ipynb", handout)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NO_NETWORK)
    env = {**os.environ, "PYTHONPATH": str(site), "GPT_LESSON_CACHE": str(tmp_path / "cache")}

    # The kernel proves it is cut off before the lesson runs (so a pass below means something).
    probe = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import urllib.request\n"
        "try:\n"
        "    urllib.request.urlopen('http://192.0.2.1/', timeout=5)  # an address, no name lookup\n"
        "    print('online')\n"
        "except OSError as err:\n"
        "    print('offline', err)")])
    NotebookClient(probe, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(handout)}},
                   ).execute(env=env)
    assert "test: no network" in probe.cells[0].outputs[0]["text"]

    nb = nbformat.read(handout / "08_full_gpt.ipynb", as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(handout)}},
                   ).execute(env=env)  # raises CellExecutionError on the first failing cell
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
