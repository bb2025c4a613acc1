"""What a classroom of kernels needs: N students run the same lesson at the same moment.

    python -m tools.hub_load notebooks/03_causal_mask.ipynb --kernels 1 2 4 --threads 1

For each N, starts N worker processes at once; each starts its own Jupyter kernel (as a JupyterHub
user's server would), runs the lesson top to bottom with nbclient, and reports its kernel's wall time,
CPU time (user + system, the kernel and its children) and peak resident memory (Linux ``VmHWM``). The
kernels get ``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` = ``--threads`` (what a hub should set per user).
Prints one line per N and, with ``--json``, the raw numbers. The machine's load average is printed
before and after: on a shared machine the wall times say as much about the neighbours as about the
lesson; the CPU seconds and the memory do not.

Extrapolating to a class: memory ~ N x peak RSS; all N students running the lesson together need
N x CPU seconds of CPU, so on C cores the last one finishes after about N x CPU / C seconds.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["run_one", "run_many", "build_parser", "main"]

REPO_ROOT = Path(__file__).resolve().parents[1]


def _proc_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its waited-for children (from /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    utime, stime, cutime, cstime = (int(fields[i]) for i in (11, 12, 13, 14))
    return (utime + stime + cutime + cstime) / ticks


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM for process {pid}")


def run_one(notebook: Path, threads: int, timeout: float = 1200.0) -> dict:
    """Run ``notebook`` in a fresh kernel; its wall time, CPU time and peak memory."""
    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    nb = nbformat.read(notebook, as_version=4)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    km = KernelManager(kernel_name="python3")
    km.start_kernel(env=env, cwd=str(notebook.parent))
    try:
        pid = km.provisioner.process.pid  # type: ignore[union-attr]
        client = NotebookClient(nb, km=km, timeout=timeout, allow_errors=False, resources={
            "metadata": {"path": str(notebook.parent)}})
        start = time.perf_counter()
        client.execute()
        wall = time.perf_counter() - start
        cpu, rss = _proc_cpu_seconds(pid), _peak_rss_mb(pid)
    finally:
        km.shutdown_kernel(now=True)
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "peak_rss_mb": round(rss, 1)}


def run_many(notebook: Path, n: int, threads: int) -> list[dict]:
    """N workers at once, each with its own kernel; their reports."""
    cmd = [sys.executable, "-m", "tools.hub_load", str(notebook), "--worker", "--threads", str(threads)]
    procs = [subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(n)]
    reports = []
    for p in procs:
        out, err = p.communicate()
        if p.returncode != 0:
            raise RuntimeError(f"a worker failed (exit {p.returncode}):\n{err[-3000:]}")
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return reports


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.hub_load", description=__doc__.split("\n\n")[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--kernels", type=int, nargs="+", default=[1, 2, 4], help="numbers of concurrent kernels")
    parser.add_argument("--threads", type=int, default=1, help="OMP/MKL threads per kernel (default: 1)")
    parser.add_argument("--json", type=Path, help="write the raw numbers here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.notebook.is_file():
        parser.error(f"{args.notebook} does not exist")
    if args.threads < 1 or any(n < 1 for n in args.kernels):
        parser.error("--threads and --kernels must be at least 1")
    if args.worker:
        print(json.dumps(run_one(args.notebook.resolve(), args.threads)))
        return 0
    results = {"notebook": str(args.notebook), "threads": args.threads, "cores": os.cpu_count(), "runs": []}
    print(f"{args.notebook.name}, {args.threads} thread(s) per kernel, {os.cpu_count()} cores; "
          f"load average before: {os.getloadavg()[0]:.1f}")
    for n in args.kernels:
        load = os.getloadavg()[0]
        start = time.perf_counter()
        reports = run_many(args.notebook.resolve(), n, args.threads)
        wall = time.perf_counter() - start
        cpu = [r["cpu_s"] for r in reports]
        rss = [r["peak_rss_mb"] for r in reports]
        walls = [r["wall_s"] for r in reports]
        results["runs"].append({"kernels": n, "load_before": round(load, 2), "wall_all_s": round(wall, 1),
                                "reports": reports})
        print(f"{n:3d} kernels: all done in {wall:6.1f} s | per kernel: wall {min(walls):.1f}-{max(walls):.1f} s, "
              f"CPU {sum(cpu) / n:.1f} s, peak RSS {max(rss):.0f} MB (mean {sum(rss) / n:.0f}) | "
              f"load before {load:.1f}")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
