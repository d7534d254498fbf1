# The mcp-tasks image: one binary that runs `migrate`, `serve`, `worker` (and `health`,
# its own health check: the image has no shell tools).
#
#   docker build -t mcp-tasks .
#
# Cache mounts keep the cargo registry and target/ between builds, so a code change
# recompiles the workspace's own crates, not the few hundred dependencies (BuildKit, which
# every current Docker uses, and Podman/Buildah support them without a syntax line).

FROM rust:1-bookworm AS build
# `-p mcp-tasks`: features are resolved for the binary alone, so crates only the tests use
# (and their dependencies' features) do not change what the image compiles, and the
# harnesses (`bench`, `chaos`: the `harness` feature, which the test crate turns on) are
# not in it (deploy/validate checks the image's binary with tests/checks/harness-not-shipped).
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
# The store's statements compile against the offline data in .sqlx/ (SQLX_OFFLINE, set in
# .cargo/config.toml): no database at build time.
COPY .cargo .cargo
COPY .sqlx .sqlx
COPY crates crates
COPY examples examples
COPY tests tests
COPY migrations migrations
RUN --mount=type=cache,id=mcp-tasks-cargo-registry,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,id=mcp-tasks-target,target=/src/target,sharing=locked \
    cargo build --release --locked -p mcp-tasks --bin mcp-tasks \
    && install -D -s -m 0755 target/release/mcp-tasks /out/mcp-tasks

FROM debian:bookworm-slim
# CA roots for https JWK sets and authorization servers; nothing else is installed.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin mcp-tasks
COPY --from=build /out/mcp-tasks /usr/local/bin/mcp-tasks
USER 10001:10001
# In a container the replica listens on every interface; the load balancer or the
# Service in front decides what is reachable.
ENV MCP_TASKS_LISTEN=0.0.0.0:8080
EXPOSE 8080
STOPSIGNAL SIGTERM
# For replicas (`serve`); compose and Kubernetes give workers and `migrate` their own checks.
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
    CMD ["mcp-tasks", "health", "--url", "http://127.0.0.1:8080/readyz"]
ENTRYPOINT ["mcp-tasks"]
CMD ["serve"]
