#!/usr/bin/env bash
# Fills benchmarks/gpu/wheels (git-ignored, carried to the GPU machine): the pure-Python and
# manylinux wheels of ART's runtime packages the GPU machine lacks, and the Qwen2.5 tokenizer.
# Needs this checkout's .venv with the [train,models] extras (for pip and the tokenizer). ~20 MiB.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-.venv/bin/python}"
WHEELS=benchmarks/gpu/wheels
mkdir -p "$WHEELS"
"$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform any -d "$WHEELS" \
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
  openai==3.60.0 distro==1.9.0 jiter==0.19.0 sniffio==1.3.1 anyio==4.16.0 \
  httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5 idna==3.20 typing-extensions==4.16.0 \
  fastapi==0.165.0 starlette==1.10.0 annotated-doc==0.0.7 opentelemetry-api==1.45.2 \
  uvicorn==0.55.0 click==8.5.1 h11==0.16.0 gguf==0.19.0 trl==1.16.0
HF_HUB_OFFLINE=1 PYTHONPATH="$PWD:$PWD/benchmarks/gpu" "$PY" -c \
  "from pathlib import Path; import shapes; shapes.save_tokenizer(Path('$WHEELS/tokenizer'))"
rm -rf "$WHEELS/tiny-qwen2.5" "$WHEELS/.tiny-qwen2.5.lock"
du -sh "$WHEELS"
