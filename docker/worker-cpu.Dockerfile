# syntax=docker/dockerfile:1
# hpo-worker for CPU nodes: Debian 12 with Debian's LibTorch (libtorch-dev)
# and the threaded OpenBLAS (libopenblas0-pthread, which scripts/setup
# installs with it). Build from the repository root:
#
#   docker build -f docker/worker-cpu.Dockerfile -t heterotune/worker-cpu .
#
# The build stage runs scripts/setup (the worker component only) and
# copies the shared libraries hpo-worker loads, and nothing else, into
# /opt/heterotune/lib (scripts/runtime-libs); hpo-worker is linked to find
# them there (a DT_RPATH). The runtime stage adds the Fashion-MNIST data for
# the built-in trainers and python3 for command programs.
#
# Why not the packages, as the server image does: Debian's libtorch1.13
# depends, through OpenCV, on packages that bring far more than the
# libraries it loads (Mesa's DRI drivers with LLVM, PROJ's and GDAL's data,
# Perl, documentation): 1.47 GB installed that way, against about half of
# that for the files the loader opens (docs/deploy.md). The copied
# libraries are not dpkg's, so apt in an image FROM this one neither sees
# nor breaks them; rebuild the image to update them.
#
# Nothing here downloads over HTTPS (apt uses Debian's HTTP mirrors), so
# it needs no CA argument. CCACHE_DIR and CCACHE_BASEDIR (build arguments)
# let a build reuse a ccache mounted into it (scripts/test-images does).
ARG DEBIAN_IMAGE=debian:bookworm

FROM ${DEBIAN_IMAGE} AS build
ARG CCACHE_DIR
ARG CCACHE_BASEDIR
WORKDIR /src
# Packages first, in their own layer: source edits do not reinstall them.
COPY scripts/setup scripts/
RUN scripts/setup --deps-only --component worker --torch debian && rm -rf /var/lib/apt/lists/*
COPY scripts/runtime-libs scripts/
COPY CMakeLists.txt ./
COPY cmake/ cmake/
COPY common/ common/
COPY proto/ proto/
COPY worker/ worker/
RUN HPO_CMAKE_ARGS="-DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags,-rpath,/opt/heterotune/lib" \
    scripts/setup --no-deps --component worker --torch debian \
 && strip build/worker/hpo-worker \
 && scripts/runtime-libs /opt/heterotune/lib build/worker/hpo-worker

FROM ${DEBIAN_IMAGE}-slim AS runtime
# python3 runs command-executor programs such as examples/train_example.py;
# add what your own programs need in an image FROM this one.
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends dataset-fashion-mnist python3 \
 && apt-get clean && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --create-home --home-dir /home/hpo --shell /usr/sbin/nologin hpo
COPY --from=build /opt/heterotune/lib/ /opt/heterotune/lib/
COPY --from=build /src/build/worker/hpo-worker /usr/local/bin/
# Every library from /opt/heterotune/lib, none missing; and it starts.
RUN missing=$(ldd /usr/local/bin/hpo-worker | grep "not found" || true); \
    if [ -n "$missing" ]; then echo "hpo-worker cannot load: $missing" >&2; exit 1; fi; \
    hpo-worker --help >/dev/null
COPY examples/train_example.py /opt/heterotune/examples/
# The Python client (standard library only), for programs that report
# through it: examples/train_example.py finds it beside itself, and
# PYTHONPATH lets your own programs `import heterotune` too.
COPY clients/python/heterotune/ /opt/heterotune/clients/python/heterotune/
ENV PYTHONPATH=/opt/heterotune/clients/python
USER hpo
# Command experiments name their program relative to the worker's working
# directory: examples/command.yaml runs examples/train_example.py from here.
WORKDIR /opt/heterotune
# The worker needs no port: it leases trials from the server (HPO_GRPC_SERVER,
# HPO_TOKEN). It benchmarks the CPU quota its container gets, so a
# container limited to 0.5 CPU reports itself as half a core.
ENTRYPOINT ["hpo-worker"]
CMD ["--device", "cpu", "--labels", "pool=cpu"]
