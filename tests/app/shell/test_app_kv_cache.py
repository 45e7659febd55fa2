"""Issue 21, item 2 in the app: Models → KV cache (Off, 8-bit, 4-bit) saved per model, sent
with every load (the loaded ``ModelInfo.kv`` says so), shown beside the precision, disabled
for a server, refused for a sliding-window model without losing the model in use; and the
Compare models dialog's KV cache row, down to ``load_second``: the running model against
its own quantized cache (its weights shared), 4-bit moving the logprobs more than 8-bit."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from app.model.kv_cache import (  # noqa: E402
    CHOICES,
    about_kv,
    choice_for,
    kv_label,
    kv_setting,
    read_choices,
    second_kv_label,
    with_choice,
)
from engine.api.kv_quantization import KVQuantization  # noqa: E402
from engine.api.params import SamplingParams  # noqa: E402
from tests.support.app_window import TIMEOUT, assistant_entries, close_window, open_window, send  # noqa: E402
from tests.support.tiny_archs import write_tiny_arch  # noqa: E402

WIDE = {"hidden_size": 128, "num_attention_heads": 2, "num_key_value_heads": 1}  # heads 64 wide
PARAMS = SamplingParams(max_tokens=8, top_logprobs=5)


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    return write_tiny_arch(tmp_path_factory.mktemp("kvapp") / "wide-llama", "llama", overrides=WIDE)


def choose(window, bits: int) -> None:
    """Models → KV cache → ``bits``, as a click does."""
    window.kv_cache.menu.aboutToShow.emit()  # the menu opens: its mark follows the model
    (action,) = [a for a in window.kv_cache.group.actions() if a.data() == bits]
    action.trigger()


def checked(window) -> list[int]:
    window.kv_cache.menu.aboutToShow.emit()
    return [a.data() for a in window.kv_cache.group.actions() if a.isChecked()]


def test_the_words_and_the_saved_choices_tolerate_bad_values():
    assert CHOICES == (0, 8, 4)
    assert read_choices("not json") == {} and read_choices("[8]") == {} and read_choices(None) == {}
    assert read_choices('{"a": 8, "b": 3, "c": "8", "d": true, "e": 4}') == {"a": 8, "e": 4}
    assert choice_for({"a": 8}, "a") == 8 and choice_for({"a": 8}, "b") == 0 and choice_for({}, None) == 0
    assert with_choice({"a": 8, "b": 4}, "a", 0) == {"b": 4}  # off is not stored
    with pytest.raises(ValueError, match="KV cache"):
        with_choice({}, "a", 3)
    assert kv_setting(0) is None and kv_setting(8) == KVQuantization(8, 64, 0)
    assert kv_label(KVQuantization()) == "" and kv_label(None) == ""
    assert kv_label(KVQuantization(8)) == "KV 8-bit"
    assert kv_label(KVQuantization(4, 32, 100)) == "KV 4-bit (group 32) from token 100"
    assert second_kv_label("off") == "" and second_kv_label("4-bit (group 64)") == "KV 4-bit"
    assert about_kv(KVQuantization()) == ""
    assert "8-bit (group 64) from the first token" in about_kv(KVQuantization(8))


def test_the_choice_is_saved_per_model_sent_with_the_load_shown_and_a_change_reloads(
    qtbot,
    profile,
    wide,
):
    from app.model.kv_cache import CHOICE
    from app.shell.window import MainWindow
    from app.views.about import about_text
    from engine.session.session import EngineSession

    asked: list = []

    class Recording(EngineSession):
        def load(self, source, progress=None, precision="auto", kv=None):
            asked.append(kv)
            return super().load(source, progress, precision, kv=kv)

    db, settings = profile
    window = MainWindow(db_path=db, settings=settings, model=str(wide), session_factory=Recording)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.model_info is not None, timeout=TIMEOUT)
    name = window.model_info.name
    assert asked == [None] and not window.model_info.kv.enabled
    assert window.model_label.text() == f"{name} · float32"
    assert "KV cache" not in about_text(window.model_info)
    assert checked(window) == [0]
    assert window.kv_cache.menu.isEnabled()

    choose(window, 8)
    qtbot.waitUntil(lambda: window.model_info.kv.enabled, timeout=TIMEOUT)
    assert asked == [None, KVQuantization(8)] and window.model_info.kv == KVQuantization(8, 64, 0)
    assert window.model_info.precision == "float32"  # the precision choice is sent as before
    assert CHOICE.saved(settings, str(wide)) == 8 and CHOICE.saved(settings, "default") == 0  # per model
    assert checked(window) == [8]
    assert window.model_label.text() == f"{name} · float32 · KV 8-bit"
    assert "KV cache quantized: 8-bit (group 64) from the first token" in about_text(window.model_info)
    send(qtbot, window, "hello", PARAMS)
    assert len(window.entries[assistant_entries(window)[0]].steps) > 0
    choose(window, 8)  # the same choice again: nothing reloads
    assert len(asked) == 2
    close_window(window)

    # Opened again: the model loads with its saved KV cache.
    asked.clear()
    window = MainWindow(db_path=db, settings=settings, session_factory=Recording)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.model_info is not None, timeout=TIMEOUT)
    assert asked == [KVQuantization(8)] and window.model_info.kv.bits == 8

    choose(window, 4)
    qtbot.waitUntil(lambda: window.model_info.kv.bits == 4, timeout=TIMEOUT)
    assert window.model_label.text() == f"{name} · float32 · KV 4-bit"
    choose(window, 0)
    qtbot.waitUntil(lambda: not window.model_info.kv.enabled, timeout=TIMEOUT)
    assert asked == [KVQuantization(8), KVQuantization(4), None]
    assert window.model_label.text() == f"{name} · float32" and CHOICE.saved(settings, str(wide)) == 0
    assert settings.value("kv_cache_by_model") == "{}"
    close_window(window)


def test_the_kv_cache_is_disabled_for_a_server_with_the_reason(qtbot, profile, tiny_folder):
    from dataclasses import replace

    from app.model.kv_cache import SERVER_KEEPS
    from engine.remote.servers import KINDS, remote_capabilities

    window = open_window(qtbot, profile, str(tiny_folder))
    local = window.model_info
    server = remote_capabilities(KINDS["mlx_lm"], "raw")
    window.in_use.info = replace(local, backend="remote", precision="", capabilities=server)
    window.actions.apply(server)  # as a server's model_loaded does
    assert not window.kv_cache.menu.isEnabled()
    assert window.kv_cache.menu.menuAction().toolTip() == SERVER_KEEPS
    window.kv_cache.choose(8)  # refused without saving anything
    assert window.settings.value("kv_cache_by_model", "{}") == "{}"
    window.in_use.info = local
    window.actions.apply(local.capabilities)
    assert window.kv_cache.menu.isEnabled()
    close_window(window)


def test_a_refused_setting_shows_the_engines_message_and_keeps_the_previous_model(qtbot, profile, tmp_path):
    from app.model.kv_cache import CHOICE

    gemma = write_tiny_arch(tmp_path / "gemma", "gemma3_text")  # sliding windows: RotatingKVCache
    window = open_window(qtbot, profile, str(gemma))
    info, label = window.model_info, window.model_label.text()
    assert info is not None and not window.last_error
    choose(window, 8)
    qtbot.waitUntil(lambda: bool(window.last_error), timeout=TIMEOUT)
    assert "RotatingKVCache" in window.last_error and f"Could not load {gemma}" in window.last_error
    assert window.model_info is info and not info.kv.enabled
    assert window.model_label.text() == label
    assert CHOICE.saved(window.settings, str(gemma)) == 0 and checked(window) == [0]  # back to what runs
    window.error_box.close()
    send(qtbot, window, "still here", PARAMS)  # the previous model still answers
    assert window.entries[assistant_entries(window)[0]].steps
    close_window(window)


def test_compare_models_kv_row_reaches_load_second_and_4_bit_moves_more_than_8_bit(qtbot, profile, wide):
    from tests.app.shell.test_app_compare_models import greedy, open_dialog, select, session_of

    window = open_window(qtbot, profile, str(wide))
    name = window.model_info.name
    send(qtbot, window, "hello there", greedy(window, 24))
    (entry,) = assistant_entries(window)
    stream = window.entries[entry].stream
    select(window, stream, 0)

    means = {}
    for bits in (8, 4):
        dialog = open_dialog(window)
        assert dialog.source.currentText() == str(wide)  # the running model comes first
        assert dialog.precision.currentData() == "float16"  # the usual question by default
        assert dialog.kv.currentData() == 0
        dialog.kv.setCurrentIndex(dialog.kv.findData(bits))
        assert dialog.precision.currentData() == "float32"  # its own precision: the cache alone
        settings = dialog.settings()
        assert settings.kv_bits == bits and settings.load_options() == {
            "precision": "float32",
            "kv": KVQuantization(bits),
        }
        assert f"KV cache {bits}-bit" in settings.words()
        dialog.compare_button.click()
        qtbot.waitUntil(lambda d=dialog: not d.running, timeout=TIMEOUT)
        comparison = window.compare_models.comparisons.of(stream)
        assert comparison is not None, dialog.message.text()
        session = session_of(window)
        second = session.second_model()
        assert second.kv == f"{bits}-bit (group 64)" and second.source == str(wide)
        assert session.comparison.second.model is session.scheduler.loaded.model  # the weights shared
        assert comparison.base.label == f"{name} · float32"
        assert comparison.second.label == f"{name} · float32 · KV {bits}-bit"
        assert f"KV {bits}-bit" in comparison.title and f"KV {bits}-bit" in window.compare_models.summary_label.text()
        assert comparison.about()["kv_bits"] == bits
        means[bits] = comparison.stats["kld_mean"]
        dialog.close()
    assert 0 < means[8] < means[4]
    print(f"mean KLD vs own KV cache: 8-bit {means[8]:.3g}, 4-bit {means[4]:.3g} nats")
    close_window(window)
