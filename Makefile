# dllm build. `make` builds bin/dllm and bin/libdllmtorch.so (the libtorch shim,
# loaded at run time from beside the binary). `make test` also installs what
# the tests need on Debian/Ubuntu. See docs/build.md.

# TORCH: a PyTorch wheel's torch/ directory (site-packages/torch) to build the
# CUDA shim against; empty builds against Debian's libtorch-dev (CPU).
TORCH ?=
CUDA_HOME ?= /usr/local/cuda
CXX ?= g++
GO ?= go
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)

SHIM := bin/libdllmtorch.so
SHIM_CPP := torch/csrc/dllm_torch.cpp torch/csrc/decoder.cpp torch/csrc/dist.cpp torch/csrc/block_attn.cpp
SHIM_HDR := $(wildcard torch/csrc/*.h)
# One object a source, named for the libtorch built against (a CPU and a
# CUDA build never share one), so that `make -j` compiles them at once, as
# the GPU scripts do: one after another, the CUDA build took ~110 s on a
# fresh GPU machine.
FLAVOUR := $(if $(TORCH),cuda,cpu)
SHIM_OBJ := $(patsubst torch/csrc/%.cpp,build/$(FLAVOUR)-%.o,$(SHIM_CPP))
CXXFLAGS := -std=c++17 -O2 -fPIC -Wall -Wno-unused-function

ifeq ($(TORCH),)
TORCH_INC := -I/usr/include/torch/csrc/api/include
TORCH_LIB := -ltorch -ltorch_cpu -lc10
else
# The wheel's CUDA libraries must be linked even though the shim names none of
# their symbols: without them no CUDA kernel is registered (--no-as-needed).
# NCCL's header (the wheel's nvidia/nccl) lets dist.cpp build ProcessGroupNCCL.
NVIDIA := $(wildcard $(TORCH)/../nvidia/cu*/include $(TORCH)/../nvidia/nccl/include)
TORCH_INC := -I$(TORCH)/include -I$(TORCH)/include/torch/csrc/api/include \
	-I$(CUDA_HOME)/include $(addprefix -I,$(NVIDIA)) -DDLLM_CUDA
TORCH_LIB := -L$(TORCH)/lib -Wl,-rpath,$(TORCH)/lib -ltorch -ltorch_cpu -lc10 \
	-Wl,--no-as-needed -ltorch_cuda -lc10_cuda -Wl,--as-needed
# The decoder's CUDA kernels (torch/csrc/*.cu) need nvcc; without it the
# shim is built without them and the decoder uses libtorch ops instead. They
# link against the wheel's own CUDA runtime.
NVCC ?= $(CUDA_HOME)/bin/nvcc
# Hopper as sm_90a (its arch-specific wgmma) where nvcc knows it and the
# runtime finds driver entry points by version (CUDA 12.5+): DLLM_SM90A
# builds kernels.cu's TMA GEMM.
comma := ,
NVCC_ARCH ?= -gencode arch=compute_80,code=sm_80 $(if $(shell $(NVCC) --version 2>/dev/null | grep -E 'release (12\.[5-9]|1[3-9]\.|[2-9][0-9]\.)'),-gencode arch=compute_90a$(comma)code=sm_90a -DDLLM_SM90A,-gencode arch=compute_90,code=sm_90)
ifneq ($(wildcard $(NVCC)),)
KERNELS := build/nvcc-kernels.o build/nvcc-attention.o build/nvcc-tma.o
CUDART := $(firstword $(wildcard $(TORCH)/../nvidia/cu*/lib))
TORCH_INC += -DDLLM_KERNELS
TORCH_LIB += $(KERNELS) -L$(CUDART) -Wl,-rpath,$(CUDART) \
	-l:$(notdir $(firstword $(wildcard $(CUDART)/libcudart.so.*)))
endif
endif

.PHONY: all shim dllm test deps clean generate
all: dllm shim

shim: $(SHIM)
$(SHIM): $(SHIM_OBJ) $(KERNELS)
	@mkdir -p bin
	$(CXX) $(CXXFLAGS) -shared -o $@ $(SHIM_OBJ) $(TORCH_LIB)

build/$(FLAVOUR)-%.o: torch/csrc/%.cpp $(SHIM_HDR)
	@mkdir -p build
	$(CXX) $(CXXFLAGS) $(TORCH_INC) -c -o $@ $<

build/nvcc-%.o: torch/csrc/%.cu torch/csrc/kernels_common.cuh torch/csrc/kernels.h
	@mkdir -p build
	$(NVCC) -std=c++17 -O3 -Xcompiler -fPIC $(NVCC_ARCH) -c -o $@ $<

dllm:
	@mkdir -p bin
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o bin/dllm ./cmd/dllm

# generate rewrites torch/loader.[ch] after a change to the shim's header.
generate:
	cd torch && $(GO) run ./internal/genloader

# deps installs libtorch (CPU), Gloo's headers and OpenBLAS from apt when they are missing,
# node/npm for the serve end-to-end test, and python3 for dllm eval's code sandbox tests.
deps:
	@# libgloo-dev: the headers of libtorch's Gloo process group (CPU data-parallel tests).
	@if [ ! -e /usr/include/torch/csrc/api/include/torch/torch.h ] || ! ldconfig -p | grep -q libopenblas \
		|| [ ! -e /usr/include/gloo/context.h ]; then \
		echo "installing libtorch-dev, libgloo-dev and OpenBLAS with apt-get"; \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends \
			libtorch-dev libgloo-dev libopenblas0-pthread g++ make >/dev/null; \
	fi
	@# node and npm run the serve end-to-end test (test/e2e, the openai npm client).
	@if ! command -v node >/dev/null 2>&1; then \
		echo "installing nodejs and npm with apt-get"; \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends \
			nodejs npm >/dev/null; \
	fi
	@# python3 runs the programs of dllm eval's LiveCodeBench sandbox (eval/sandbox_test.go).
	@if ! command -v python3 >/dev/null 2>&1; then \
		echo "installing python3 with apt-get"; \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends \
			python3 >/dev/null; \
	fi

# The tests build with dllm_fault: the distributed launcher's fault
# injection (DLLM_FAULT_EXIT) exists only in test builds.
test: deps shim
	$(GO) vet -tags dllm_fault ./...
	$(GO) test -tags dllm_fault ./...

clean:
	rm -rf bin build/*.o

# proxy runs the conversion proxy (docs/proxy.md): the shipped CPU-size AR
# teacher (models/proxy-teacher, trained on the second task set) converted
# to block diffusion with 5% of its training tokens, both scored on the
# held-out split; about half an hour on a 2-core CPU.
.PHONY: proxy
proxy: all
	TASKS=v2 TEACHER=models/proxy-teacher BUDGET=5 scripts/proxy.sh
