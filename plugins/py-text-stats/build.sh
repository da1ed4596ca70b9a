#!/usr/bin/env bash
# Builds dist/py_text_stats.wasm. COMPONENTIZE_PY: the componentize-py to use
# (default: the one on PATH; install with `pip install -r requirements.txt`).
set -euo pipefail
cd "$(dirname "$0")"
python3 gen_document.py
mkdir -p dist
"${COMPONENTIZE_PY:-componentize-py}" -d ../../plugin-sdk/wit -w plugin componentize -p . -p build -p ../../plugin-sdk/bindings/python app -o dist/py_text_stats.wasm
