"""What a classroom of kernels needs: N students run the same lesson at the same moment.

    python -m tools.hub_load notebooks/03_causal_mask.ipynb --kernels 1 2 4 --threads 1
    python -m tools.hub_load notebooks/*.ipynb --kernels 1 --json benchmarks/results/hub_load_en.json

For each notebook and each N, starts N worker processes at once; each starts its own Jupyter kernel (as a
JupyterHub user's server would), runs the lesson top to bottom with nbclient, and reports:

- ``peak_tree_mb``: the peak of the SUM of the resident memory (``VmRSS``) of the kernel and every process
  it started (torchrun's workers in lesson 12, compile workers in lesson 10, ...), sampled every
  ``--interval`` seconds (default 0.05) from ``/proc``. This is what a per-user ``mem_limit`` (a cgroup)
  sees. A child that lives for less than one interval can be missed; its memory then shows only if it
  is larger than the gap between two samples;
- ``kernel_hwm_mb``: the kernel process's own peak (Linux ``VmHWM``, exact, not sampled);
- ``cpu_s``: CPU seconds (user + system) of the kernel, its waited-for children, and every process of
  its tree still alive at the end;
- ``wall_s``: the notebook's run time;
- ``peak_cell``: the index of the cell during which the tree's peak was sampled, and ``cell_peaks_mb``
  the largest sum sampled during each cell (the memory a cell leaves behind shows in the later ones too).

The kernels get ``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` = ``--threads`` (what a hub should set per user);
``--cpus 0`` pins every kernel (and its children) to those cores, like ``taskset -c 0``, to see what a
hub's ``cpu_limit = 1`` does to a lesson's run time. The machine's load average is printed before and
after each run: on a shared machine the wall times say as much about the neighbours as about the lesson;
the CPU seconds and the memory do not.

Extrapolating to a class: memory ~ N x peak tree memory; all N students running the lesson together need
N x CPU seconds of CPU, so on C cores the last one finishes after about N x CPU / C seconds.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

__all__ = ["run_one", "run_many", "build_parser", "main"]

REPO_ROOT = Path(__file__).resolve().parents[1]
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _proc_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its waited-for children (from /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    utime, stime, cutime, cstime = (int(fields[i]) for i in (11, 12, 13, 14))
    return (utime + stime + cutime + cstime) / ticks


def _peak_rss_mb(pid: int) -> float:
    """The process's own peak resident memory in MB (Linux ``VmHWM``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM for process {pid}")


def _parents() -> dict[int, int]:
    """Every process's parent, {pid: ppid}, read from /proc (processes that vanish meanwhile are skipped)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    return parents


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its living descendants."""
    children: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(children.get(p, []))
    return tree


def _rss_bytes(pid: int) -> int:
    """Resident memory of one process (``/proc/PID/statm``'s second field), 0 once it has gone."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0



def tree_rss_mb(pid: int) -> float:
    """The summed resident memory of ``pid`` and its descendants right now, in MB."""
    return sum(_rss_bytes(p) for p in process_tree(pid)) / 2**20


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of ``pid`` (with its waited-for children) plus those of its still-living descendants."""
    total = 0.0
    for p in process_tree(pid):
        try:
            total += _proc_cpu_seconds(p)
        except (OSError, IndexError, ValueError):
            continue  # it ended between the listing and the reading
    return total


class TreeSampler(threading.Thread):
    """Samples the summed RSS of a process tree every ``interval`` seconds; ``peak_mb`` is the largest sum."""

    def __init__(self, pid: int, interval: float) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.peak_mb, self.samples = 0.0, 0
        self.cell: int | None = None  # the cell running now (set by the notebook client's hook)
        self.cell_peaks: dict[int, float] = {}  # the largest sum seen while each cell ran
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.sample()
            self._stop_event.wait(self.interval)

    def sample(self) -> None:
        mb, cell = tree_rss_mb(self.pid), self.cell
        self.peak_mb = max(self.peak_mb, mb)
        if cell is not None:
            self.cell_peaks[cell] = max(self.cell_peaks.get(cell, 0.0), mb)
        self.samples += 1

    def on_cell_start(self, cell, cell_index: int) -> None:
        self.cell = cell_index

    def stop(self) -> float:
        self._stop_event.set()
        self.join()
        self.sample()
        return self.peak_mb


def run_one(notebook: Path, threads: int, timeout: float = 1200.0, interval: float = 0.05) -> dict:
    """Run ``notebook`` in a fresh kernel; its wall time, CPU time, peak tree memory and the kernel's own peak."""
    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    nb = nbformat.read(notebook, as_version=4)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    km = KernelManager(kernel_name="python3")
    km.start_kernel(env=env, cwd=str(notebook.parent))
    try:
        pid = km.provisioner.process.pid  # type: ignore[union-attr]
        sampler = TreeSampler(pid, interval)
        client = NotebookClient(nb, km=km, timeout=timeout, allow_errors=False, resources={
            "metadata": {"path": str(notebook.parent)}}, on_cell_start=sampler.on_cell_start)
        sampler.start()
        start = time.perf_counter()
        try:
            client.execute()
        finally:
            wall = time.perf_counter() - start
            tree_peak = sampler.stop()
        cpu, rss = tree_cpu_seconds(pid), _peak_rss_mb(pid)
        end_mb = tree_rss_mb(pid)
    finally:
        km.shutdown_kernel(now=True)
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "peak_tree_mb": round(max(tree_peak, rss), 1),
            "kernel_hwm_mb": round(rss, 1), "end_tree_mb": round(end_mb, 1), "interval_s": interval,
            "samples": sampler.samples, "peak_cell": max(sampler.cell_peaks, key=sampler.cell_peaks.get, default=None),
            "cell_peaks_mb": {i: round(mb, 1) for i, mb in sorted(sampler.cell_peaks.items())}}


def run_many(notebook: Path, n: int, threads: int, interval: float = 0.05,
             cpus: list[int] | None = None) -> list[dict]:
    """N workers at once, each with its own kernel; their reports."""
    cmd = [sys.executable, "-m", "tools.hub_load", str(notebook), "--worker", "--threads", str(threads),
           "--interval", str(interval)]
    if cpus:
        cmd += ["--cpus", *map(str, cpus)]
    procs = [subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(n)]
    reports = []
    for p in procs:
        out, err = p.communicate()
        if p.returncode != 0:
            raise RuntimeError(f"a worker failed (exit {p.returncode}):\n{err[-3000:]}")
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return reports


def server_rss_mb(port: int = 18765, settle: float = 5.0, timeout: float = 60.0) -> dict:
    """The resident memory of an idle Jupyter server (``jupyter lab``, no kernel), a hub user's share besides kernels.

    Starts ``jupyter lab`` on ``port`` (localhost, no browser), loads the page and the APIs JupyterLab's
    start asks for (so the extensions are imported), waits ``settle`` seconds and sums the RSS of the
    server's process tree. A hub's single-user server is this process (``jupyterhub-singleuser``).
    """
    import tempfile
    import urllib.request

    with tempfile.TemporaryDirectory() as home:
        cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ServerApp.port_retries=0",
               "--ServerApp.ip=127.0.0.1", "--IdentityProvider.token=", f"--ServerApp.root_dir={REPO_ROOT}"]
        if os.geteuid() == 0:
            cmd.append("--allow-root")  # e.g. in a container; a hub's user servers are not root
        env = {**os.environ, "JUPYTER_RUNTIME_DIR": home}
        log = Path(home) / "server.log"
        with log.open("wb") as out:
            server = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline, answered = time.time() + timeout, False
            while not answered:
                try:
                    for url in ("/lab", "/api/kernelspecs", "/api/contents/notebooks", "/lab/api/settings"):
                        urllib.request.urlopen(f"http://127.0.0.1:{port}{url}", timeout=10).read()
                    answered = True
                except OSError:
                    if server.poll() is not None or time.time() > deadline:
                        break
                    time.sleep(0.5)
            if not answered:
                raise RuntimeError(f"jupyter lab did not answer on port {port}: {log.read_text()[-2000:]}")
            time.sleep(settle)
            return {"server_rss_mb": round(tree_rss_mb(server.pid), 1), "server_hwm_mb": round(_peak_rss_mb(server.pid), 1),
                    "processes": len(process_tree(server.pid))}
        finally:
            server.terminate()
            server.wait(timeout=30)


def markdown_rows(results: list[dict] | dict) -> list[str]:
    """Table rows (Markdown) of ``--json`` results: one per notebook and number of kernels."""
    rows = []
    for result in [results] if isinstance(results, dict) else results:
        name = Path(result["notebook"])
        label = f"{'zh/' if name.parent.name == 'zh' else ''}{name.stem}"
        for run in result["runs"]:
            reports = run["reports"]
            tree, hwm = max(r["peak_tree_mb"] for r in reports), max(r["kernel_hwm_mb"] for r in reports)
            end = max(r["end_tree_mb"] for r in reports)
            cpu = sum(r["cpu_s"] for r in reports) / len(reports)
            walls = sorted(r["wall_s"] for r in reports)
            wall = f"{walls[0]:.0f}" if len(walls) == 1 else f"{walls[0]:.0f}-{walls[-1]:.0f}"
            rows.append(f"| {label} | {run['kernels']} | {tree:,.0f} MB | {hwm:,.0f} MB | {end:,.0f} MB | "
                        f"{reports[0].get('peak_cell') if reports[0].get('peak_cell') is not None else '-'} | {cpu:.1f} s | {wall} s | {run['load_before']:.1f} |")
    return rows


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.hub_load", description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", type=Path, nargs="*")
    parser.add_argument("--server", action="store_true", help="measure an idle Jupyter server's memory instead")
    parser.add_argument("--kernels", type=int, nargs="+", default=[1, 2, 4], help="numbers of concurrent kernels")
    parser.add_argument("--threads", type=int, default=1, help="OMP/MKL threads per kernel (default: 1)")
    parser.add_argument("--interval", type=float, default=0.05,
                        help="seconds between two samples of the process tree's memory (default: 0.05)")
    parser.add_argument("--cpus", type=int, nargs="+", help="pin the kernels to these cores (like taskset -c)")
    parser.add_argument("--json", type=Path, help="write the raw numbers here (rewritten after each notebook)")
    parser.add_argument("--table", type=Path, nargs="+", metavar="JSON",
                        help="print the Markdown rows of earlier --json results instead of measuring")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.table:
        print("| Notebook | Kernels | Peak, kernel + children | Kernel alone (VmHWM) | Held at the end | Peak cell "
              "| CPU per kernel | Wall per kernel | Load before |")
        print("|---|---|---|---|---|---|---|---|---|")
        for path in args.table:
            print("\n".join(markdown_rows(json.loads(path.read_text()))))
        return 0
    if args.server:
        report = server_rss_mb()
        print(f"an idle jupyter lab server: {report['server_rss_mb']:.0f} MB resident "
              f"({report['processes']} process(es), peak {report['server_hwm_mb']:.0f} MB)")
        if args.json:
            args.json.write_text(json.dumps(report, indent=1))
        return 0
    if not args.notebooks:
        parser.error("name at least one notebook (or --server)")
    for notebook in args.notebooks:
        if not notebook.is_file():
            parser.error(f"{notebook} does not exist")
    if args.threads < 1 or any(n < 1 for n in args.kernels):
        parser.error("--threads and --kernels must be at least 1")
    if not 0 < args.interval <= 10:
        parser.error(f"--interval must be in (0, 10] seconds, got {args.interval}")
    if args.cpus is not None and not set(args.cpus) <= os.sched_getaffinity(0):
        parser.error(f"--cpus {args.cpus}: this machine offers cores {sorted(os.sched_getaffinity(0))}")
    if args.worker:
        if args.cpus:
            os.sched_setaffinity(0, args.cpus)  # the kernel and its children inherit it
        print(json.dumps(run_one(args.notebooks[0].resolve(), args.threads, interval=args.interval)))
        return 0
    everything = []
    for notebook in args.notebooks:
        results = {"notebook": str(notebook), "threads": args.threads, "cores": os.cpu_count(),
                   "cpus": args.cpus, "interval_s": args.interval, "runs": []}
        print(f"{notebook}, {args.threads} thread(s) per kernel, {os.cpu_count()} cores"
              f"{f', pinned to cores {args.cpus}' if args.cpus else ''}; "
              f"load average before: {os.getloadavg()[0]:.1f}")
        for n in args.kernels:
            load = os.getloadavg()[0]
            start = time.perf_counter()
            reports = run_many(notebook.resolve(), n, args.threads, args.interval, args.cpus)
            wall = time.perf_counter() - start
            cpu = [r["cpu_s"] for r in reports]
            tree = [r["peak_tree_mb"] for r in reports]
            hwm = [r["kernel_hwm_mb"] for r in reports]
            walls = [r["wall_s"] for r in reports]
            results["runs"].append({"kernels": n, "load_before": round(load, 2), "load_after": round(
                os.getloadavg()[0], 2), "wall_all_s": round(wall, 1), "reports": reports})
            print(f"{n:3d} kernels: all done in {wall:6.1f} s | per kernel: wall {min(walls):.1f}-{max(walls):.1f} s, "
                  f"CPU {sum(cpu) / n:.1f} s, peak tree memory {max(tree):.0f} MB (kernel alone {max(hwm):.0f}) | "
                  f"load before {load:.1f}", flush=True)
        print(f"load average after: {os.getloadavg()[0]:.1f}")
        everything.append(results)
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(everything[0] if len(args.notebooks) == 1 else everything, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
