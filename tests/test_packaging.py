"""The Mac bundle's identity, checked on Linux: the spec sets what the .app's Info.plist needs
and the icon is a real .icns."""

from __future__ import annotations

import importlib.metadata
import re
import struct
import sys
import types
from pathlib import Path

from PySide6.QtGui import QImage

ROOT = Path(__file__).resolve().parent.parent


def run_spec(monkeypatch, tmp_path: Path, mlx_wheel_tag: str | None = None) -> dict:
    """Runs packaging/logitscope.spec as PyInstaller would on a Mac, with PyInstaller's build
    steps recorded instead of run: what the spec hands to BUNDLE is what the .app gets. The mlx
    and mlx-metal wheels look installed with ``mlx_wheel_tag`` (None: not installed)."""
    real = importlib.metadata.distribution

    def distribution(name: str):
        if name not in ("mlx", "mlx-metal"):
            return real(name)
        if mlx_wheel_tag is None:
            raise importlib.metadata.PackageNotFoundError(name)
        return types.SimpleNamespace(read_text=lambda file: f"Wheel-Version: 1.0\nTag: {mlx_wheel_tag}\n")

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)
    calls: dict = {}

    def recorder(kind: str):
        def record(*args, **kwargs):
            calls[kind] = kwargs
            return types.SimpleNamespace(pure=[], scripts=[], binaries=[], datas=kwargs.get("datas", []))

        return record

    hooks = types.ModuleType("PyInstaller.utils.hooks")
    for name in ("collect_data_files", "collect_dynamic_libs", "collect_submodules", "copy_metadata"):
        setattr(hooks, name, lambda *args, **kwargs: [])
    monkeypatch.setitem(sys.modules, "PyInstaller.utils.hooks", hooks)
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setenv("LOGITSCOPE_BUILD_DIR", str(tmp_path))
    spec = ROOT / "packaging" / "logitscope.spec"
    names = {"SPECPATH": str(spec.parent), "__file__": str(spec)}
    names.update({kind: recorder(kind) for kind in ("Analysis", "PYZ", "EXE", "COLLECT", "BUNDLE")})
    exec(compile(spec.read_text(), str(spec), "exec"), names)
    return calls


def icns_entries(path: Path) -> dict[bytes, bytes]:
    data = path.read_bytes()
    assert data[:4] == b"icns" and struct.unpack(">I", data[4:8])[0] == len(data)
    entries, at = {}, 8
    while at < len(data):
        kind, length = data[at : at + 4], struct.unpack(">I", data[at + 4 : at + 8])[0]
        entries[kind] = data[at + 8 : at + length]
        at += length
    return entries


def test_spec_gives_the_mac_bundle_its_identity_version_icon_minimum_and_model(monkeypatch, tmp_path):
    calls = run_spec(monkeypatch, tmp_path)
    bundle = calls["BUNDLE"]
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert bundle["name"] == "Logitscope.app"
    assert bundle["bundle_identifier"] == "org.logitscope.Logitscope"
    assert bundle["version"] == version
    plist = bundle["info_plist"]
    assert plist["CFBundleShortVersionString"] == version and plist["CFBundleVersion"] == version
    assert plist["NSHighResolutionCapable"] is True
    # No MLX wheel tagged for macOS (as on Linux): the floor, the macOS MLX's wheels start at.
    assert plist["LSMinimumSystemVersion"] == "14.0"
    assert calls["EXE"]["target_arch"] == "arm64" and calls["EXE"]["icon"] == bundle["icon"]
    # The icon: every size macOS asks for, each a PNG of that size.
    icon = Path(bundle["icon"])
    assert icon.suffix == ".icns" and icon.parent == tmp_path
    entries = icns_entries(icon)
    sizes = {b"ic11": 32, b"ic12": 64, b"ic07": 128, b"ic13": 256, b"ic08": 256, b"ic14": 512, b"ic09": 512}
    assert set(sizes) | {b"ic10"} == set(entries)
    for kind, pixels in {**sizes, b"ic10": 1024}.items():
        image = QImage.fromData(entries[kind], "PNG")
        assert (image.width(), image.height()) == (pixels, pixels), kind
    # The default model goes inside, under models/ (engine.models.bundled_model_path).
    models = [source for source, dest in calls["Analysis"]["datas"] if dest == "models"]
    assert [Path(source).name for source in models] == ["SmolLM2-135M-Instruct.Q4_1.gguf"]
    assert Path(models[0]).is_file()


def test_spec_asks_for_the_macos_that_the_mlx_wheels_it_ships_need(monkeypatch, tmp_path):
    # As pip installs them on a macOS 15 build machine: the app then needs macOS 15.
    plist = run_spec(monkeypatch, tmp_path, "py3-none-macosx_15_0_arm64")["BUNDLE"]["info_plist"]
    assert plist["LSMinimumSystemVersion"] == "15.0"
    # An older wheel never takes the app below MLX's floor.
    plist = run_spec(monkeypatch, tmp_path, "cp311-cp311-macosx_13_0_arm64")["BUNDLE"]["info_plist"]
    assert plist["LSMinimumSystemVersion"] == "14.0"
