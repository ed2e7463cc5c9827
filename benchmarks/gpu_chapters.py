"""Execute every section of the book on a GPU, in both profiles, and report each one's time (issue 28 item 5).

Made for the GPU machine without internet (``../shared/gpu/README.md``): run it from a checkout
whose missing packages were carried as wheels and installed into a folder on ``PYTHONPATH``, with the
Multi30k files in ``MULTI30K_DIR``. Each section runs in its own kernel through nbclient (the same
executor the site build and the Colab-like test use), under ``TRANSFORMER_BOOK_PROFILE``; a failing
section is reported with its error and the run goes on. Nothing is written into the checkout.

    python benchmarks/gpu_chapters.py --profiles fast full --budget 540 --json $OUT/chapters.json

Tried on CPU with ``--profiles fast --only 01_attention`` before spending GPU minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def sections(only: list[str]) -> list[Path]:
    found = sorted(ROOT.glob("book/0*/[0-9]*.ipynb"))
    return [path for path in found if not only or any(part in str(path) for part in only)]


def run_section(path: Path, profile: str, timeout: int) -> dict:
    import nbformat
    from nbclient import NotebookClient

    os.environ["TRANSFORMER_BOOK_PROFILE"] = profile
    notebook = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    try:
        NotebookClient(notebook, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
        error = None
    except Exception as failure:  # noqa: BLE001 - report every kind, go on with the next section
        error = f"{type(failure).__name__}: {str(failure).strip().splitlines()[-1][:300] if str(failure).strip() else ''}"
    return {"section": str(path.relative_to(ROOT)), "profile": profile, "seconds": round(time.perf_counter() - start, 1), "error": error}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", nargs="+", default=["fast", "full"], choices=["fast", "full"])
    parser.add_argument("--only", nargs="*", default=[], help="run only sections whose path contains one of these")
    parser.add_argument("--budget", type=float, default=540, help="stop starting sections after this many seconds")
    parser.add_argument("--timeout", type=int, default=300, help="seconds a cell may run")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    import torch

    print(f"torch {torch.__version__}, cuda {torch.cuda.is_available()} "
          f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else ''}", flush=True)
    results, start = [], time.perf_counter()
    for profile in args.profiles:
        for path in sections(args.only):
            if time.perf_counter() - start > args.budget:
                results.append({"section": str(path.relative_to(ROOT)), "profile": profile, "seconds": None, "error": "not run: budget spent"})
                continue
            results.append(run_section(path, profile, args.timeout))
            row = results[-1]
            print(f"{row['profile']:4} {row['section']:45} {row['seconds']:7.1f} s  {row['error'] or 'ok'}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    failed = [r for r in results if r["error"]]
    print(f"{len(results) - len(failed)} of {len(results)} sections ran; {sum(r['seconds'] or 0 for r in results):.0f} s in all")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
