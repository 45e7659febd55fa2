from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support import reference_packages

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
reference_packages.use()  # PyTorch for the references, before anything imports transformers


@pytest.fixture(scope="session", autouse=True)
def _model_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Converted models go to a per-run cache unless the caller chose one (to reuse across runs)."""
    if "LOGITSCOPE_CACHE_DIR" not in os.environ:
        os.environ["LOGITSCOPE_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.support.tiny_model import write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama")


@pytest.fixture(scope="session")
def tiny(tiny_folder: Path):
    from engine.models.load import load

    return load(str(tiny_folder))


@pytest.fixture(scope="session")
def smollm():
    from engine.models.load import load

    return load("default")


@pytest.fixture
def profile(tmp_path):
    """A fresh profile for the app: its database path and its ``QSettings`` (an ini file)."""
    from PySide6.QtCore import QSettings

    return tmp_path / "db.sqlite3", QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)


@pytest.fixture(scope="module")
def tiny_server(tiny_folder, tmp_path_factory: pytest.TempPathFactory):
    """A real ``mlx_lm.server`` serving the tiny model folder (its model id is the folder's path)."""
    from tests.support.local_server import mlx_lm_server

    with mlx_lm_server(Path(tiny_folder), tmp_path_factory.mktemp("mlx-server")) as url:
        yield url


@pytest.fixture(scope="module")
def vllm_like():
    """The vLLM-like stand-in of ``tests/support/vllm_like.py`` on 127.0.0.1; ``.bodies`` holds what it was sent."""
    import threading
    from http.server import ThreadingHTTPServer

    from tests.support.vllm_like import VllmLike

    server = ThreadingHTTPServer(("127.0.0.1", 0), VllmLike)
    server.daemon_threads = True
    server.bodies = []  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


# The files that take minutes (real models loaded, servers started) start first, one per
# worker as they come free: ``make test`` keeps this order (``--no-loadscope-reorder``), where
# xdist would otherwise start the files with the most tests first and leave the longest one
# running alone at the end (13 to 19 minutes depending on where it fell).
HEAVY_FIRST = (
    "test_remote_pieces.py",  # ~3.5 min: the default model through mlx_lm.server, in pieces and whole
    "test_cli.py",  # ~3 min: a process per run of the default model, and mlx-lm beside it
    "test_fidelity_real.py",  # ~2.5 min: Gemma 3 past its sliding window, against kept references
    "test_bundle.py",  # ~2 min: the packaged app built and its self-test run
    "test_bench_smoke.py",
    "test_mirostat_replay.py",
    "test_remote_sampled_reply.py",
    "test_remote_distributed.py",  # ~1 min: two distributed mlx_lm.servers and a plain one
    "test_speculative.py",
    "test_remote_mlx_server.py",
    "test_gguf_fuzz.py",
    "test_lens.py",
    "test_engine_fuzz.py",
)


def pytest_collection_modifyitems(session, config, items) -> None:
    items.sort(
        key=lambda item: HEAVY_FIRST.index(item.path.name) if item.path.name in HEAVY_FIRST else len(HEAVY_FIRST)
    )


# A test over a minute says why in its docstring ("Slow: ..."). Durations depend on the
# machine, so this is a note at the end of the run, never a failure (docs/TESTING.md).
SLOW_S = 60.0
_SLOW_WITHOUT_REASON = "slow_without_reason"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.duration > SLOW_S and not has_slow_reason(item):
        report.user_properties.append((_SLOW_WITHOUT_REASON, round(report.duration, 1)))


def has_slow_reason(item) -> bool:
    """Whether the test's docstring has a paragraph saying why it is slow (``Slow: ...``)."""
    doc = getattr(getattr(item, "function", None), "__doc__", None) or ""
    return "Slow:" in doc


_unexplained: list[tuple[str, float]] = []


def pytest_runtest_logreport(report) -> None:
    # Runs where the reports arrive (the controller under xdist), so the note sees every worker's.
    _unexplained.extend(
        (report.nodeid, seconds) for key, seconds in report.user_properties if key == _SLOW_WITHOUT_REASON
    )


def pytest_terminal_summary(terminalreporter) -> None:
    if _unexplained:
        terminalreporter.section(f"tests over {SLOW_S:.0f} s without a 'Slow:' reason in their docstring")
        for nodeid, seconds in sorted(_unexplained, key=lambda n: -n[1]):
            terminalreporter.write_line(f"{seconds:7.1f} s  {nodeid}")
