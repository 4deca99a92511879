# syntax=docker/dockerfile:1
# hpo-server (and hpctl) on Debian 12. Build from the repository root:
#
#   docker build -f docker/server.Dockerfile -t heterotune/server .
#
# The build stage runs scripts/setup, the same script CI runs; the runtime
# stage installs only the shared libraries the binaries link
# (scripts/runtime-packages), so it carries no compiler and no LibTorch.
#
# Behind a TLS-inspecting proxy, npm ci fails with SELF_SIGNED_CERT_IN_CHAIN.
# Hand the build your CA bundle as a secret and name it (docs/deploy.md):
#
#   --secret id=host-ca,src=/etc/ssl/certs/ca-certificates.crt \
#   --build-arg NODE_EXTRA_CA_CERTS=/run/secrets/host-ca
#
# The secret is mounted for the one step that downloads over HTTPS and is
# not stored in any layer. CCACHE_DIR and CCACHE_BASEDIR (build arguments)
# let a build reuse a ccache mounted into it (scripts/test-images does).
ARG DEBIAN_IMAGE=debian:bookworm

FROM ${DEBIAN_IMAGE} AS build
ARG NODE_EXTRA_CA_CERTS
ARG CCACHE_DIR
ARG CCACHE_BASEDIR
WORKDIR /src
# Packages first, in their own layer: source edits (and edits of other
# scripts) do not reinstall them.
COPY scripts/setup scripts/
# The dashboard's npm lockfile too: scripts/setup installs its chart library.
COPY web/package.json web/package-lock.json web/
RUN --mount=type=secret,id=host-ca scripts/setup --deps-only --component server && rm -rf /var/lib/apt/lists/*
COPY scripts/runtime-packages scripts/
COPY CMakeLists.txt ./
COPY cmake/ cmake/
COPY common/ common/
COPY proto/ proto/
COPY sql/ sql/
COPY search/ search/
COPY scheduler/ scheduler/
COPY server/ server/
COPY cli/ cli/
COPY web/ web/
RUN scripts/setup --no-deps --component server \
 && strip build/server/hpo-server build/cli/hpctl \
 && scripts/runtime-packages build/server/hpo-server build/cli/hpctl > /runtime-packages.txt

FROM ${DEBIAN_IMAGE}-slim AS runtime
COPY --from=build /runtime-packages.txt /tmp/runtime-packages.txt
# curl is for the HEALTHCHECK only.
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      ca-certificates curl $(cat /tmp/runtime-packages.txt) \
 && apt-get clean && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt \
 && useradd --system --uid 10001 --create-home --home-dir /var/lib/heterotune --shell /usr/sbin/nologin hpo
COPY --from=build /src/build/server/hpo-server /src/build/cli/hpctl /usr/local/bin/
# The dashboard: its pages and the one chart-library file they load.
COPY --from=build /src/web/index.html /src/web/style.css /usr/share/heterotune/web/
COPY --from=build /src/web/js/ /usr/share/heterotune/web/js/
COPY --from=build /src/web/node_modules/echarts/dist/echarts.esm.min.mjs /usr/share/heterotune/web/node_modules/echarts/dist/
USER hpo
WORKDIR /var/lib/heterotune
# 8080: REST, dashboard, /metrics, /healthz, /readyz. 50051: the worker protocol.
EXPOSE 8080 50051
# /healthz answers without a token, so the check works with --token too.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD curl -fsS http://127.0.0.1:8080/healthz || exit 1
ENTRYPOINT ["hpo-server"]
# An embedded SQLite file by default; a fleet passes --store postgresql://...
# (or HPO_STORE) instead. Listening on every interface: it runs in a container.
CMD ["--http", "0.0.0.0:8080", "--grpc", "0.0.0.0:50051", "--store", "sqlite:///var/lib/heterotune/hpo.db", \
     "--web-root", "/usr/share/heterotune/web"]
