#!/usr/bin/env bash
# Regenerates the typed bindings committed beside this script from plugin-sdk/wit,
# with the pinned tools:
#   python/  componentize-py 0.25.1 `bindings`   (COMPONENTIZE_PY: which one; default on PATH)
#            for world `agent-http` (everything of `agent`, and wasi:http's
#            outgoing-handler), the node's `types` kept as `types` (wasi:http's is
#            `wasi_http_types`): what `plugin` and `agent` generate, and wasi:http's modules
#   js/      jco 1.35.0 `guest-types`            (JS_TOOLS: a node_modules holding it;
#            default plugins/js-unit-converter/node_modules, after `npm install` there)
#            for world `agent` (everything of `plugin`, and the `extensions` export a
#            plugin with capabilities implements; `fetch()` is componentize-js's own)
# The hand-written helpers python/agora_plugin.py and js/agora-plugin.js are kept.
# Usage: plugin-sdk/bindings/regenerate.sh [OUT]   (OUT: where to write; default here)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$(mkdir -p "${1:-$here}" && cd "${1:-$here}" && pwd)"
tools="${JS_TOOLS:-$root/plugins/js-unit-converter/node_modules}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

"${COMPONENTIZE_PY:-componentize-py}" -d "$root/plugin-sdk/wit" -w agent-http \
  --import-interface-name agora:node/types@0.1.0=types bindings "$scratch/python" >/dev/null
JCO_TRANSPILE="$tools/@bytecodealliance/jco-transpile" node --import "$here/jco-preopen.mjs" \
  "$tools/@bytecodealliance/jco/dist/jco.js" guest-types "$root/plugin-sdk/wit" \
  --world-name agent -q -o "$scratch/js"

for lang in python js; do
  mkdir -p "$out/$lang"
  find "$out/$lang" -mindepth 1 -maxdepth 1 ! -name agora_plugin.py ! -name agora-plugin.js -exec rm -rf {} +
  cp -R "$scratch/$lang/." "$out/$lang/"
done
