#!/usr/bin/env bash
# bench/gpu_prepare.sh: made here (with network), what bench/gpu_run.sh needs on a bare GPU
# machine that reaches no registry and takes at most 64 MiB a call. Writes .gpu/ (ignored):
#   .gpu/a/  the first part of MLX's CUDA 13 build (mlx-cuda-13's files, libmlx.so stripped
#            of its symbols, tar | xz, cut in two)
#   .gpu/b/  the second part, the small wheels (mlx, mlx-lm, gguf, platformdirs), the
#            default model's config and tokenizer, and Gemma 3 270M's as the engine converts
#            it, its tokenizer xz-packed (bench/gpu_model.py builds a model of each shape there)
# Versions: those this checkout's .venv runs, so the GPU measures the same code.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
version() { "$PY" -c "import importlib.metadata as m; print(m.version('$1'))"; }
MLX=$(version mlx)
MLX_LM=$(version mlx-lm)
GGUF=$(version gguf)
PLATFORMDIRS=$(version platformdirs)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf .gpu && mkdir -p .gpu/a .gpu/b/wheels .gpu/b/default .gpu/b/gemma
platforms=(--platform manylinux_2_35_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
  --platform manylinux2014_x86_64)
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" \
  -d "$work" "mlx==$MLX" "mlx-cuda-13==$MLX" "mlx-lm==$MLX_LM" "gguf==$GGUF" "platformdirs==$PLATFORMDIRS"
mv "$work"/mlx-"$MLX"-*.whl "$work"/mlx_lm-*.whl "$work"/gguf-*.whl "$work"/platformdirs-*.whl .gpu/b/wheels/
mkdir "$work/cuda"
(cd "$work/cuda" && unzip -q "$work"/mlx_cuda_13-*.whl && strip --strip-unneeded mlx/lib/libmlx.so)
tar -C "$work/cuda" -cf - . | xz -T2 -6 >"$work/cuda.tar.xz"
size=$(stat -c %s "$work/cuda.tar.xz")
split -b $(((size + 1) / 2)) -d "$work/cuda.tar.xz" "$work/cuda.part"
mv "$work/cuda.part00" .gpu/a/
mv "$work/cuda.part01" .gpu/b/
# The default model's config and tokenizer, as the engine converts it (converted on first use).
folder=$("$PY" -c "from engine.models.load import resolve; print(resolve('default')[1])")
for f in config.json tokenizer.json tokenizer_config.json chat_template.jinja; do
  [ -f "$folder/$f" ] && cp "$folder/$f" .gpu/b/default/
done
# Gemma 3 270M's (figure 18): its tokenizer is 33 MB, 3.5 MB packed.
folder=$("$PY" -c "from bench.throughput import gemma_folder; print(gemma_folder())")
for f in config.json tokenizer_config.json chat_template.jinja; do
  [ -f "$folder/$f" ] && cp "$folder/$f" .gpu/b/gemma/
done
xz -T2 -6 -c "$folder/tokenizer.json" >.gpu/b/gemma/tokenizer.json.xz
du -sh .gpu/a .gpu/b
