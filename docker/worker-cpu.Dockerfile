# syntax=docker/dockerfile:1
# hpo-worker for CPU nodes: Debian 12 with Debian's LibTorch (libtorch-dev)
# and the threaded OpenBLAS. Build from the repository root:
#
#   docker build -f docker/worker-cpu.Dockerfile -t heterotune/worker-cpu .
#
# The build stage runs scripts/setup (the worker component only); the
# runtime stage installs the libraries the binary links
# (scripts/runtime-packages), OpenBLAS and the Fashion-MNIST data for the
# built-in trainers.
#
# Nothing here downloads over HTTPS (apt uses Debian's HTTP mirrors), so
# it needs no CA argument. CCACHE_DIR and CCACHE_BASEDIR (build arguments)
# let a build reuse a ccache mounted into it (scripts/test-images does).
ARG DEBIAN_IMAGE=debian:bookworm

FROM ${DEBIAN_IMAGE} AS build
ARG CCACHE_DIR
ARG CCACHE_BASEDIR
WORKDIR /src
COPY scripts/ scripts/
RUN scripts/setup --deps-only --component worker --torch debian && rm -rf /var/lib/apt/lists/*
COPY CMakeLists.txt ./
COPY cmake/ cmake/
COPY common/ common/
COPY proto/ proto/
COPY worker/ worker/
RUN scripts/setup --no-deps --component worker --torch debian \
 && strip build/worker/hpo-worker \
 && scripts/runtime-packages build/worker/hpo-worker > /runtime-packages.txt

FROM ${DEBIAN_IMAGE}-slim AS runtime
COPY --from=build /runtime-packages.txt /tmp/runtime-packages.txt
# libopenblas0-pthread: LibTorch's BLAS goes through the libblas.so.3
# alternative, which the threaded OpenBLAS takes over (about 10x the
# reference BLAS). python3 runs command-executor programs such as
# examples/train_example.py; add what your own programs need in an image
# FROM this one.
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      $(cat /tmp/runtime-packages.txt) libopenblas0-pthread dataset-fashion-mnist python3 \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt \
 && useradd --system --uid 10001 --create-home --home-dir /home/hpo --shell /usr/sbin/nologin hpo
COPY --from=build /src/build/worker/hpo-worker /usr/local/bin/
COPY examples/train_example.py /opt/heterotune/examples/
USER hpo
# Command experiments name their program relative to the worker's working
# directory: examples/command.yaml runs examples/train_example.py from here.
WORKDIR /opt/heterotune
# The worker needs no port: it leases trials from the server (HPO_SERVER,
# HPO_TOKEN). It benchmarks the CPU quota its container gets, so a
# container limited to 0.5 CPU reports itself as half a core.
ENTRYPOINT ["hpo-worker"]
CMD ["--device", "cpu", "--labels", "pool=cpu"]
