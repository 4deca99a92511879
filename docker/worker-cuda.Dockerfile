# syntax=docker/dockerfile:1
# hpo-worker for GPU nodes, on the official PyTorch CUDA image: the worker
# is built against that image's LibTorch (CUDA-enabled), found through
# torch.utils.cmake_prefix_path. Build from the repository root:
#
#   docker build -f docker/worker-cuda.Dockerfile -t heterotune/worker-cuda .
#
# PyTorch 2.7 and later ship LibTorch with the C++11 ABI, which the
# distribution's gRPC and protobuf need; an older base image fails the ABI
# check below instead of failing to link.
#
# Behind a TLS-inspecting proxy, pip fails to verify PyPI. Hand the build
# your CA bundle as a secret and name it (docs/deploy.md):
#
#   --secret id=host-ca,src=/etc/ssl/certs/ca-certificates.crt \
#   --build-arg PIP_CERT=/run/secrets/host-ca
#
# (not tried here: the PyTorch base image cannot be had on the machines
# scripts/test-images runs on).
ARG PYTORCH_TAG=2.7.1-cuda12.8-cudnn9

FROM pytorch/pytorch:${PYTORCH_TAG}-devel AS build
ARG PIP_CERT
WORKDIR /src
COPY scripts/setup scripts/
RUN scripts/setup --deps-only --component worker --torch external && rm -rf /var/lib/apt/lists/*
COPY scripts/runtime-packages scripts/
# The image's Ubuntu 22.04 has CMake 3.22; the build needs 3.25.
RUN --mount=type=secret,id=host-ca python -m pip install --no-cache-dir "cmake>=3.25,<4"
RUN python -c 'import sys, torch; sys.exit(0 if torch._C._GLIBCXX_USE_CXX11_ABI else "this LibTorch uses the old C++ ABI: use a PyTorch 2.7+ base image")'
COPY CMakeLists.txt ./
COPY cmake/ cmake/
COPY common/ common/
COPY proto/ proto/
COPY worker/ worker/
# worker/CMakeLists.txt links the CUDA runtime (real GPU names and memory)
# when CMake finds the CUDA toolkit, which the devel image has.
RUN HPO_CMAKE_ARGS="-DCMAKE_PREFIX_PATH=$(python -c 'import torch; print(torch.utils.cmake_prefix_path)')" \
      scripts/setup --no-deps --component worker --torch external \
 && strip build/worker/hpo-worker \
 && scripts/runtime-packages build/worker/hpo-worker > /runtime-packages.txt \
 && mkdir -p /opt/cudart \
 && cp -L "$(ldd build/worker/hpo-worker | awk '/libcudart\.so/ {print $3}')" /opt/cudart/

# The Fashion-MNIST data for the built-in trainers, packaged by Debian.
FROM debian:bookworm-slim AS data
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends dataset-fashion-mnist \
 && rm -rf /var/lib/apt/lists/*

# The runtime image has the same LibTorch at the same path as the devel one
# (the binary's RPATH finds it), without the compilers and the CUDA toolkit;
# the CUDA runtime library the worker links comes from the build stage.
FROM pytorch/pytorch:${PYTORCH_TAG}-runtime AS runtime
COPY --from=build /opt/cudart/ /usr/local/lib/
COPY --from=build /runtime-packages.txt /tmp/runtime-packages.txt
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      $(cat /tmp/runtime-packages.txt) \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt \
 && ldconfig \
 && useradd --system --uid 10001 --create-home --home-dir /home/hpo --shell /usr/sbin/nologin hpo
COPY --from=data /usr/share/datasets/fashion-mnist /usr/share/datasets/fashion-mnist
COPY --from=build /src/build/worker/hpo-worker /usr/local/bin/
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
ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility
ENTRYPOINT ["hpo-worker"]
# auto: the CPU plus every GPU the container sees. One worker per GPU:
# --device cuda:0 (and the node's CPU served by a CPU worker).
CMD ["--device", "auto", "--labels", "pool=gpu"]
