# syntax=docker/dockerfile:1
# Agora Node with its bundled example plugins.
#
#   docker build -t agora-node .
#   docker run -p 8080:8080 -v agora-data:/data -v agora-plugins:/plugins agora-node
#
# The node listens on 0.0.0.0:8080 and keeps its state (sled, compile cache,
# node key) in /data; it serves and hot-reloads the .wasm files in /plugins
# (a new named volume starts with the bundled examples). Any setting is an
# AGORA_* variable (config/agora.toml lists them), e.g. -e AGORA_LOG_FORMAT=json.

# Builder: the toolchain rust-toolchain.toml pins, with the wasm32-wasip2 target.
FROM rust:1.95.0-slim-bookworm AS builder
WORKDIR /src
COPY rust-toolchain.toml ./
RUN (rustup toolchain install || rustup show) && rustup target add wasm32-wasip2
COPY . .
# ./x's steps: every crate under plugins/ for wasm32-wasip2 (profile `plugin`),
# then the node itself. The target folder is a cache mount, so the results are
# copied out in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target,sharing=locked \
    set -eu; \
    names=""; args=""; \
    for manifest in plugins/*/Cargo.toml; do \
      name=$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$manifest" | head -n 1); \
      names="$names $name"; args="$args -p $name"; \
    done; \
    cargo build --locked --profile plugin --target wasm32-wasip2 --target-dir target/plugins $args; \
    cargo build --locked --release -p agora-node; \
    mkdir -p /out/plugins; \
    cp target/release/agora-node /out/; \
    for name in $names; do \
      cp "target/plugins/wasm32-wasip2/plugin/$(echo "$name" | tr - _).wasm" "/out/plugins/$name.wasm"; \
    done

# Runtime: the binary, the example plugins and a user without privileges.
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --home-dir /data --no-create-home agora \
    && mkdir -p /data /plugins \
    && chown agora:agora /data /plugins
COPY --from=builder /out/agora-node /usr/local/bin/agora-node
COPY --from=builder --chown=agora:agora /out/plugins/ /plugins/
ENV AGORA_LISTEN=0.0.0.0:8080 \
    AGORA_DATA_DIR=/data \
    AGORA_PLUGINS__DIR=/plugins
VOLUME ["/data", "/plugins"]
WORKDIR /data
USER agora
EXPOSE 8080
# SIGTERM drains requests in flight before the node exits.
STOPSIGNAL SIGTERM
ENTRYPOINT ["agora-node"]
CMD ["serve"]
