"""The installed package works outside a checkout: build a wheel, install it into a fresh virtual
environment in a temporary folder, import every module there and compare with the source model.

Slow (a new venv and a torch install from the pinned requirements, about a minute), so it is marked
``slow``; CI runs it.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROBE = textwrap.dedent('''
    import importlib, pkgutil, sys
    from pathlib import Path
    import torch
    import gpt_lesson
    here = Path(gpt_lesson.__file__).resolve()
    assert "site-packages" in here.parts, f"gpt_lesson imported from {here}, not from the installed wheel"
    names = [m.name for m in pkgutil.walk_packages(gpt_lesson.__path__, "gpt_lesson.")]
    for name in names:
        importlib.import_module(name)
    # the source-model comparison, as tests/test_source_compat.py does it in the checkout
    from gpt_lesson.reference import GPT as SourceGPT
    torch.manual_seed(0)
    source = SourceGPT(1000, 64, 4, 3, 128).eval()
    ours = gpt_lesson.GPT(1000, 64, 4, 3, 128).eval()
    ours.load_state_dict(source.state_dict(), strict=True)
    idx = torch.randint(0, 1000, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        diff = (ours(idx)[0] - source(idx)[0]).abs().max().item()
    assert diff < 1e-6, diff
    assert ours.num_parameters() == 286_504
    print("modules", len(names), "version", gpt_lesson.__version__, "max diff", diff)
''')


@pytest.mark.slow
def test_wheel_installs_and_runs_in_a_fresh_venv(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(dist), str(ROOT)], check=True, cwd=tmp_path)
    wheels = list(dist.glob("gpt_lesson-*.whl"))
    assert len(wheels) == 1, wheels
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    # The pinned requirements as constraints: the same torch (the CPU build) as the course.
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "-c", str(ROOT / "requirements.txt"), str(wheels[0])], check=True, cwd=tmp_path)
    out = subprocess.run([str(python), "-c", PROBE], check=True, cwd=tmp_path, capture_output=True, text=True)
    assert "max diff" in out.stdout, out.stdout + out.stderr
