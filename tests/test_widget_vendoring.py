"""The site's copy of ONNX Runtime Web (tools/site_widget.py): fetched at package-lock.json's version
and refused unless its sha512 is the lock's; a local registry (file://) stands in for npm's, so
nothing is downloaded here."""

import base64
import hashlib
import importlib.util
import io
import json
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("site_widget", ROOT / "tools" / "site_widget.py")
site_widget = importlib.util.module_from_spec(spec)
spec.loader.exec_module(site_widget)


def tarball(version: str, files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in {"package.json": json.dumps({"version": version}).encode(), **files}.items():
            info = tarfile.TarInfo(f"package/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def registry(tmp_path: Path, data: bytes, version: str) -> str:
    folder = tmp_path / "registry" / site_widget.PACKAGE / "-"
    folder.mkdir(parents=True)
    (folder / f"{site_widget.PACKAGE}-{version}.tgz").write_bytes(data)
    return (tmp_path / "registry").as_uri()


def test_the_lock_pins_a_version_and_a_sha512():
    pinned = site_widget.locked_runtime()
    assert pinned["integrity"].startswith("sha512-") and pinned["version"].count(".") == 2


def test_the_runtime_is_taken_only_with_the_locks_checksum(tmp_path, monkeypatch):
    version = site_widget.locked_runtime()["version"]
    runtime = {f"dist/{name}": name.encode() * 10 for name in site_widget.RUNTIME_FILES}
    good = tarball(version, {**runtime, "dist/ort.webgpu.min.js": b"not needed"})
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(good).digest()).decode()
    monkeypatch.setattr(site_widget, "locked_runtime", lambda: {"version": version, "integrity": integrity})

    monkeypatch.setenv("npm_config_registry", registry(tmp_path / "bad", good + b"\0", version))
    with pytest.raises(RuntimeError, match="sha512 .* is not package-lock.json's"):
        site_widget.install_runtime(tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("npm-*/.installed")), "a refused tarball must leave nothing installed"

    monkeypatch.setenv("npm_config_registry", registry(tmp_path / "good", good, version))
    dist = site_widget.install_runtime(tmp_path / "cache")
    assert sorted(p.name for p in dist.iterdir()) == sorted(site_widget.RUNTIME_FILES)  # only the backend's files
    assert all((dist / name).read_bytes() == name.encode() * 10 for name in site_widget.RUNTIME_FILES)
