# SPDX-License-Identifier: Apache-2.0
"""The forced-path reruns of the CUDA kernel tests, one pytest process per
forced value, all at once: what test_cuda_paths and test_cuda_prefill_paths
do one path after another in a subprocess that reports only at its end. On a
GPU session whose budget may stop them, each process here writes its own log
as it goes, so a stopped run still reports every case it finished.

    python -m tests.kernels.path_reruns --out DIR [--timeout S] [--threads N]
    python -m tests.kernels.path_reruns --dry-run

Prints one line per process, `path-rerun NAME: <outcome>`, and exits 0 when
every process passed (one stopped by --timeout has not). The paths and the
tests come from the test files (CUDA_PATHS / CUDA_PATH_TESTS and
CUDA_PATH_GRAPH_TESTS,
PREFILL_PATHS / PREFILL_PATH_TESTS[_COMMON]): nothing is listed twice.
tools/gpu/device_session.sh's `paths` stage runs this.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]


@dataclass(frozen=True)
class Rerun:
    name: str  # also the log's file name
    env: dict[str, str]
    files: tuple[str, ...]
    selection: str  # pytest -k

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "pytest", *self.files, "-v", "-rfE",
            "-p", "no:cacheprovider", "-k", self.selection,
        ]  # fmt: skip


def _any_of(names: tuple[str, ...]) -> str:
    return " or ".join(names)


def reruns() -> list[Rerun]:
    from tests.kernels.attention import test_paged_attention_cuda as attn
    from tests.kernels.quantization import test_w4a16_gemm as w4a16

    w4a16_file = str(Path(w4a16.__file__).relative_to(REPO_ROOT))
    attn_files = tuple(
        str(Path(f).relative_to(REPO_ROOT)) for f in (attn._COMMON_FILE, attn.__file__)
    )
    out = [
        Rerun(
            f"w4a16_{p}",
            {w4a16.CUDA_PATH_ENV: p},
            (w4a16_file,),
            f"cuda and ({_any_of(w4a16.CUDA_PATH_TESTS + w4a16.CUDA_PATH_GRAPH_TESTS)})",
        )
        for p in w4a16.CUDA_PATHS
    ]
    selection = (
        f"cuda and ({_any_of(attn.PREFILL_PATH_TESTS + attn.PREFILL_PATH_GRAPH_TESTS)} or "
        f"{_any_of(attn.PREFILL_PATH_TESTS_COMMON)})"
    )
    out += [
        Rerun(f"prefill_{p}", {attn.PREFILL_PATH_ENV: p}, attn_files, selection)
        for p in attn.PREFILL_PATHS
    ]
    return out


_SUMMARY = re.compile(r"^=+ (.+) in [0-9.]+s( \(.*\))? =+$", re.MULTILINE)


def outcome(log_text: str, returncode: int | None) -> tuple[bool, str]:
    """(passed, one line) from a pytest -v log and its exit status (None:
    stopped at the timeout)."""
    m = None
    for m in _SUMMARY.finditer(log_text):
        pass
    summary = m.group(1) if m else "no pytest summary"
    failed = [ln for ln in log_text.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    if returncode is None:
        return False, f"stopped at the timeout; {summary}"
    text = summary if not failed else f"{summary}; first: {failed[0]}"
    return returncode == 0, text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="a log per process here")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds for all")
    ap.add_argument(
        "--threads", type=int, default=2, help="OMP_NUM_THREADS of each process"
    )
    ap.add_argument(
        "--only",
        default="",
        help="comma list of rerun names (as --dry-run prints them); default: all",
    )
    ap.add_argument("--dry-run", action="store_true", help="print the commands")
    args = ap.parse_args(argv)
    runs = reruns()
    if args.only:
        wanted = [n for n in args.only.split(",") if n]
        unknown = sorted(set(wanted) - {r.name for r in runs})
        if unknown:
            ap.error(
                f"--only: unknown rerun(s) {unknown}; known: {[r.name for r in runs]}"
            )
        runs = [r for r in runs if r.name in wanted]
    if args.dry_run:
        for r in runs:
            env = " ".join(f"{k}={v}" for k, v in r.env.items())
            print(f"{r.name}: {env} {' '.join(r.command()[1:])}")
        return 0
    if args.out is None:
        ap.error("--out is required (or --dry-run)")
    args.out.mkdir(parents=True, exist_ok=True)
    procs = []
    for r in runs:
        env = dict(os.environ, **r.env, OMP_NUM_THREADS=str(args.threads))
        env.pop("PYTEST_ADDOPTS", None)
        log = open(args.out / f"{r.name}.log", "w")  # noqa: SIM115 (closed below)
        procs.append((r, log, subprocess.Popen(r.command(), cwd=REPO_ROOT, env=env,
                                               stdout=log, stderr=subprocess.STDOUT)))  # fmt: skip
    deadline = time.monotonic() + args.timeout
    codes: dict[str, int | None] = {}
    for r, log, proc in procs:
        try:
            codes[r.name] = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            codes[r.name] = None
            proc.send_signal(signal.SIGINT)  # pytest prints its summary
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
    ok_all = True
    for r, _, _ in procs:
        ok, text = outcome((args.out / f"{r.name}.log").read_text(), codes[r.name])
        ok_all &= ok
        print(f"path-rerun {r.name}: {'ok' if ok else 'NOT OK'}: {text}")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
