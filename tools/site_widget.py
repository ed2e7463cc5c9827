"""The files of the page that translates in the browser (issue 49), made by the site build.

    python tools/site_widget.py OUT [--cache DIR]

writes into the folder ``OUT`` (the site serves it as ``_static/widget/``):

    widget.js widget.css       the widget (web/): its text box, decoding, pieces and heatmap; the
    decoding.js tokenizer.js   only files a page with the widget loads before its first use are these two
    ort.wasm.min.js            ONNX Runtime Web's WebAssembly backend, from the npm registry at the
    ort-wasm-simd-threaded.mjs version and sha512 checksum package-lock.json pins: only the
    ort-wasm-simd-threaded.wasm  files this backend loads (ort.wasm.min.js opens with its MIT licence)
    encoder.onnx decoder.onnx  the shipped model as ONNX (``transformer_lib.cli.onnx_export``), made here
    tokenizer.json model.json  from ``transformer_lib/weights``: git holds no build output
    widget.json                what this step vendored and exported (versions, checksums, sizes)

Both expensive parts are cached in ``--cache`` (default ``_build/.widget_cache``): the npm
fetch, by the checksum of package-lock.json; the export (about 40 s), by the checksums of the shipped
weights and of the exporter's source, and the versions of torch and onnx. ``_ext/book_site.py`` calls
:func:`write_widget` when Sphinx starts, so ``make site`` and ``make book`` run it.
The runtime is fetched once per lock (``make setup`` does it: ``--runtime-only``); nothing else is
downloaded, and the site build downloads nothing once it is there.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WEB = ROOT / "web"
PACKAGE = "onnxruntime-web"
# The WebAssembly backend alone (ort.wasm.min.js is ONNX Runtime's API with that backend, 50 kB; it
# loads the Emscripten glue, .mjs, which loads the .wasm): not WebGL, WebGPU, WebNN or JSPI (139 MB).
RUNTIME_FILES = ("ort.wasm.min.js", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm")
WEB_FILES = ("widget.js", "widget.css", "decoding.js", "tokenizer.js")
MODEL_FILES = ("encoder.onnx", "decoder.onnx", "tokenizer.json", "model.json")
MANIFEST = "widget.json"
DEFAULT_CACHE = ROOT / "_build" / ".widget_cache"  # not under .site_assets, which the site copies whole


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _copy(source: Path, target: Path) -> None:
    """Copy unless ``target`` already holds the same bytes (Sphinx then sees nothing new)."""
    if target.is_file() and target.stat().st_size == source.stat().st_size and target.read_bytes() == source.read_bytes():
        return
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    shutil.copyfile(source, partial)
    partial.replace(target)


def locked_runtime() -> dict[str, str]:
    """``onnxruntime-web``'s version and sha512 integrity as package-lock.json pins them."""
    lock = json.loads((ROOT / "package-lock.json").read_text(encoding="utf-8"))
    entry = lock["packages"][f"node_modules/{PACKAGE}"]
    wanted = json.loads((ROOT / "package.json").read_text(encoding="utf-8"))["dependencies"][PACKAGE]
    if entry["version"] != wanted:
        raise RuntimeError(f"package-lock.json pins {PACKAGE} {entry['version']}, package.json asks for {wanted}: "
                           "run `npm install --package-lock-only` and commit both")
    if not entry.get("integrity", "").startswith("sha512-"):
        raise RuntimeError(f"package-lock.json has no sha512 checksum for {PACKAGE}")
    return {"version": entry["version"], "integrity": entry["integrity"]}


REGISTRY = "https://registry.npmjs.org"


def install_runtime(cache: Path) -> Path:
    """``onnxruntime-web`` from the npm registry into ``cache``, once per lock: the package's tarball at
    the version package-lock.json pins, refused unless its sha512 is the lock's (what ``npm ci`` checks;
    the runtime's files need none of its dependencies, and npm need not be installed). ``make setup``
    calls it, so the site build downloads nothing. ``$npm_config_registry`` names a mirror. Returns the
    package's ``dist`` folder."""
    import io
    import tarfile
    import urllib.request

    lock_bytes = (ROOT / "package-lock.json").read_bytes()
    folder = cache / f"npm-{_sha256(lock_bytes)[:16]}"
    package = folder / "node_modules" / PACKAGE
    dist = package / "dist"
    stamp = folder / ".installed"
    if not stamp.is_file():
        pinned = locked_runtime()
        registry = os.environ.get("npm_config_registry", REGISTRY).rstrip("/")
        url = f"{registry}/{PACKAGE}/-/{PACKAGE}-{pinned['version']}.tgz"
        with urllib.request.urlopen(url, timeout=300) as response:
            tarball = response.read()
        got = _integrity(tarball)
        if got != pinned["integrity"]:
            raise RuntimeError(f"{url}: sha512 {got} is not package-lock.json's {pinned['integrity']}; nothing installed")
        shutil.rmtree(folder, ignore_errors=True)
        package.mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as archive:
            for member in archive.getmembers():
                name = member.name.split("/", 1)[-1]  # npm's tarballs hold one folder, package/
                if member.isfile() and (name == "package.json" or name == "LICENSE" or name in {f"dist/{f}" for f in RUNTIME_FILES}):
                    target = package / name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(archive.extractfile(member).read())
        stamp.write_text(url + "\n", encoding="utf-8")
    installed = json.loads((package / "package.json").read_text(encoding="utf-8"))["version"]
    if installed != locked_runtime()["version"]:
        raise RuntimeError(f"{folder} holds {PACKAGE} {installed}, the lock pins {locked_runtime()['version']}")
    return dist


def _export_key() -> str:
    import onnx
    import torch

    from transformer_lib import pretrained
    from transformer_lib.cli import onnx_export

    parts = [pretrained.sha256_of(pretrained.shipped_path()), _sha256(Path(onnx_export.__file__).read_bytes()),
             torch.__version__, onnx.__version__]
    return _sha256("\n".join(parts).encode())[:16]


def export_model(cache: Path) -> Path:
    """The shipped model as ONNX (:func:`transformer_lib.cli.onnx_export.export_onnx`), exported once
    per weights, exporter and versions into ``cache``; returns the folder."""
    folder = cache / f"model-{_export_key()}"
    if not (folder / "model.json").is_file():
        from transformer_lib import pretrained
        from transformer_lib.cli.onnx_export import export_onnx

        partial = cache / f".model.{os.getpid()}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        export_onnx(pretrained.load(), partial)
        shutil.rmtree(folder, ignore_errors=True)
        partial.replace(folder)
    return folder


def _integrity(data: bytes) -> str:
    """npm's form of a checksum, as package-lock.json writes it."""
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def write_widget(out: Path, cache: Path = DEFAULT_CACHE) -> dict[str, Any]:
    """Write every file of the widget into ``out`` (made if missing); returns ``widget.json``'s content."""
    out, cache = Path(out), Path(cache)
    out.mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)
    dist = install_runtime(cache)
    model = export_model(cache)
    sources = {name: WEB / name for name in WEB_FILES}
    sources |= {name: dist / name for name in RUNTIME_FILES}
    sources |= {name: model / name for name in MODEL_FILES}
    for name, source in sources.items():
        _copy(source, out / name)
    for stale in out.iterdir():  # a file an older build vendored
        if stale.is_file() and stale.name not in sources and stale.name != MANIFEST:
            stale.unlink()
    manifest = {
        "runtime": {"package": PACKAGE, **locked_runtime()},
        "model": json.loads((model / "model.json").read_text(encoding="utf-8"))["files"],
        "files": {name: {"bytes": (out / name).stat().st_size, "sha512": _integrity((out / name).read_bytes())}
                  for name in sorted(sources)},
    }
    text = json.dumps(manifest, indent=1) + "\n"
    if not (out / MANIFEST).is_file() or (out / MANIFEST).read_text(encoding="utf-8") != text:
        (out / MANIFEST).write_text(text, encoding="utf-8")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/site_widget.py", description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, nargs="?", default=None, help="the folder to write (the site's _static/widget)")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="where the npm install and the export are kept")
    parser.add_argument("--runtime-only", action="store_true",
                        help="only fetch ONNX Runtime Web into the cache (make setup), no OUT written")
    args = parser.parse_args(argv)
    if args.runtime_only:
        print(f"{PACKAGE} {locked_runtime()['version']} in {install_runtime(args.cache).parent}")
        return 0
    if args.out is None:
        parser.error("OUT is required (or --runtime-only)")
    manifest = write_widget(args.out, args.cache)
    total = sum(file["bytes"] for file in manifest["files"].values())
    print(f"{args.out}: {len(manifest['files'])} files, {total / 1e6:.1f} MB ({PACKAGE} {manifest['runtime']['version']})")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
