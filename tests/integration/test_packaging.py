"""The Mac release build, checked where it can be on Linux: the workflow runs only make targets
that exist (and signs only with secrets), the spec sets what the .app's Info.plist needs, the
icon is a real .icns, and the release targets do what packaging/README.md says. The bundle
itself is built and run through these targets in tests/integration/test_bundle.py."""

from __future__ import annotations

import importlib.metadata
import os
import re
import stat
import struct
import subprocess
import sys
import types
import zipfile
from pathlib import Path

import pytest
import yaml
from PySide6.QtGui import QImage

from tests.support.make_util import outside_make
from tests.support.paths import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "macos.yml"
SIGNING_STEPS = {"make app-sign", "make app-notarize"}


def makefile_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z0-9_.-]+):(?!=)", text, re.M))


def workflow_steps() -> list[dict]:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    (job,) = workflow["jobs"].values()
    return job["steps"]


def test_workflow_runs_only_make_targets_that_exist():
    targets = makefile_targets()
    runs = [step["run"].strip() for step in workflow_steps() if "run" in step]
    assert runs, "the workflow runs nothing"
    for run in runs:
        match = re.fullmatch(r"make ([A-Za-z0-9_.-]+)", run)
        assert match, f"not a single make target: {run!r}"
        assert match.group(1) in targets, f"{run!r}: no such target in the Makefile"
    # The release steps in their order: the signed app is tested again, and the zip holds the
    # app as signed and stapled.
    assert runs == [
        "make test-fast",
        "make app",
        "make app-selftest",
        "make app-sign",
        "make app-selftest",
        "make app-notarize",
        "make app-zip",
    ]


def test_workflow_runs_on_apple_silicon_with_python_311_and_uploads_the_zip():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    assert {"push", "pull_request", "workflow_dispatch"} <= set(triggers)
    assert "v*" in triggers["push"]["tags"]
    (job,) = workflow["jobs"].values()
    assert job["runs-on"] in ("macos-14", "macos-15")  # GitHub's arm64 (M1) runners
    steps = workflow_steps()
    python = next(s for s in steps if s.get("uses", "").startswith("actions/setup-python@"))
    assert str(python["with"]["python-version"]) == "3.11" and python["with"]["cache"] == "pip"
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["with"]["path"] == "dist/Logitscope-*-macos-arm64.zip"
    assert upload["with"]["if-no-files-found"] == "error"


def test_signing_steps_run_only_with_their_secrets():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    (job,) = workflow["jobs"].values()
    flags = job["env"]
    for step in workflow_steps():
        run = step.get("run", "")
        secrets = set(re.findall(r"secrets\.(\w+)", yaml.safe_dump(step)))
        if run in SIGNING_STEPS:
            guard = step.get("if", "")
            names = re.findall(r"env\.(\w+) == 'true'", guard)
            assert names, f"{run} has no guard"
            guarded_by = set().union(*(re.findall(r"secrets\.(\w+)", flags[name]) for name in names))
            assert secrets and secrets <= guarded_by, (run, secrets, guarded_by)
        else:
            # The secrets reach only the steps that sign: not the tests, not the build.
            assert not secrets, (run or step.get("uses"), secrets)
    assert "APPLE_SIGNING_IDENTITY" in flags["CAN_SIGN"] and "APPLE_CERTIFICATE_P12" in flags["CAN_SIGN"]
    assert "APPLE_APP_PASSWORD" in flags["CAN_NOTARIZE"] and "APPLE_API_KEY" in flags["CAN_NOTARIZE"]


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
    # The default model goes inside, under models/ (engine.models.load.bundled_model_path).
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


def make(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=outside_make(env),
        timeout=120,
    )


linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Linux side of the targets")


@linux_only
def test_sign_and_notarize_targets_skip_on_linux_saying_so():
    for target, tool in (("app-sign", "codesign"), ("app-notarize", "notarytool")):
        done = make("-s", target)
        assert done.returncode == 0, done.stderr
        assert f"{target}: skipped" in done.stdout and tool in done.stdout


@pytest.mark.parametrize(
    ("script", "env", "missing"),
    [
        ("sign.sh", {}, "APPLE_SIGNING_IDENTITY"),
        (
            "sign.sh",
            {"APPLE_SIGNING_IDENTITY": "Developer ID", "APPLE_CERTIFICATE_P12": "cDEy"},
            "APPLE_CERTIFICATE_PASSWORD",
        ),
        ("notarize.sh", {}, "APPLE_ID"),
        ("notarize.sh", {"APPLE_ID": "me@example.com", "APPLE_APP_PASSWORD": "x"}, "APPLE_TEAM_ID"),
        ("notarize.sh", {"APPLE_API_KEY": "a2V5"}, "APPLE_API_KEY_ID"),
    ],
)
def test_sign_and_notarize_name_the_missing_variable(tmp_path, script, env, missing):
    # Checked before any macOS tool is called, so this runs anywhere.
    done = subprocess.run(
        ["bash", str(ROOT / "packaging" / "macos" / script), str(tmp_path / "Logitscope.app"), str(tmp_path)],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **env},
        timeout=60,
    )
    assert done.returncode == 2
    assert f"{missing} is not set" in done.stderr
    assert list(tmp_path.iterdir()) == []  # nothing made before the check


def fake_bundle(dist: Path) -> Path:
    """A stand-in for dist/Logitscope/ whose program reports where and with what it was run."""
    program = dist / "Logitscope" / "Logitscope"
    program.parent.mkdir(parents=True)
    program.write_text('#!/bin/sh\necho "$@"; pwd; env | sort\n')
    program.chmod(0o755)
    (dist / "Logitscope" / "_internal").mkdir()
    (dist / "Logitscope" / "_internal" / "libfake.so.1").write_bytes(b"\0" * 64)
    os.symlink("libfake.so.1", dist / "Logitscope" / "_internal" / "libfake.so")
    return program


@linux_only
def test_app_selftest_runs_the_bundle_elsewhere_with_a_bare_environment(tmp_path):
    fake_bundle(tmp_path / "dist")
    build = tmp_path / "build"
    done = make("app-selftest", f"DIST={tmp_path / 'dist'}", f"BUILD={build}", env={**os.environ, "SECRET_X": "1"})
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    at = out.index("--selftest")
    home = str(build / "selftest-home")
    assert out[at + 1] == home  # run from the empty HOME, not from the checkout
    # Only what the target passes (the shell running the stand-in adds its own PWD, SHLVL, _).
    passed = sorted(line for line in out[at + 2 :] if line.split("=")[0] not in ("PWD", "OLDPWD", "SHLVL", "_"))
    assert passed == [f"HOME={home}", "LANG=C.UTF-8", "PATH=/usr/bin:/bin"]


@linux_only
def test_app_targets_say_to_build_first(tmp_path):
    for target in ("app-selftest", "app-zip"):
        done = make(target, f"DIST={tmp_path}", f"BUILD={tmp_path}")
        assert done.returncode != 0 and "run make app first" in done.stderr


@linux_only
def test_app_zip_keeps_the_program_executable_and_the_links(tmp_path):
    fake_bundle(tmp_path / "dist")
    done = make("app-zip", f"DIST={tmp_path / 'dist'}")
    assert done.returncode == 0, done.stderr
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    name = f"Logitscope-{version}-linux-{os.uname().machine}.zip"
    assert done.stdout.strip().splitlines()[-1] == str(tmp_path / "dist" / name)
    with zipfile.ZipFile(tmp_path / "dist" / name) as archive:
        infos = {info.filename: info for info in archive.infolist()}
        program = infos["Logitscope/Logitscope"]
        assert stat.S_IMODE(program.external_attr >> 16) & 0o111
        link = infos["Logitscope/_internal/libfake.so"]
        assert stat.S_ISLNK(link.external_attr >> 16) and archive.read(link) == b"libfake.so.1"


def test_makefile_on_a_mac_installs_mlx_for_metal_and_works_on_the_app_bundle(tmp_path):
    # The Makefile's macOS side, read on any machine: `uname` answers as an Apple-silicon Mac.
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "uname").write_text('#!/bin/sh\ncase "$1" in -m) echo arm64;; *) echo Darwin;; esac\n')
    (fake / "uname").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:/usr/bin:/bin"}
    env.pop("MLX_BACKEND", None)

    def planned(*args: str) -> str:
        done = make("-n", *args, f"DIST={tmp_path / 'dist'}", env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "MLX backend: metal (macOS)" in planned("backend")
    install = planned("-B", "install")  # no cpu or cuda extra: mlx brings Metal on macOS
    assert 'pip install --quiet -e ".[dev]"' in install and "touch .venv/.installed-metal" in install
    assert "mlx-cpu" not in install and "mlx-cuda" not in install  # no backend switch to undo
    assert "--target .venv/reference" in install  # the tests' PyTorch, apart from the app's
    app = tmp_path / "dist" / "Logitscope.app"
    selftest = planned("app-selftest")
    assert f'"{app}/Contents/MacOS/Logitscope" --selftest' in selftest
    zipped = planned("app-zip")
    assert f"ditto -c -k --keepParent {app} {tmp_path / 'dist'}/Logitscope-" in zipped
    assert "-macos-arm64.zip" in zipped
    assert f"packaging/macos/sign.sh {app}" in planned("app-sign")
    assert f"packaging/macos/notarize.sh {app}" in planned("app-notarize")
