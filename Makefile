# kvlab: how LLMs decode text, and why they run out of memory doing it.
#
#   make              build every program into build/
#   make test         unit, chapter and golden tests (installs Check if missing)
#   make test-sanitize  the same tests under AddressSanitizer and UBSan
#   make lab CH=n     build chapter n with YOUR exercise files and grade them
#   make grade        grade every lab against the solutions (must be full marks)
#   make docs         the book and API reference as one HTML site (html/)
#   make bench        benchmarks (not tests): writes build/bench/report.md
#   make demo         every chapter on the same requests, side by side
#   make models       fetch the real TinyStories checkpoints (needs internet)
#   make cuda-check   compile every CUDA file for sm_80 and sm_90 (no GPU needed)
#
# Variables: BUILD (output folder), LAB (solutions or exercises),
# OPT (optimisation flags), CUDA=0 to build without nvcc.

CC      ?= gcc
BUILD   ?= build
LAB     ?= solutions
OPT     ?= -O3 -march=native
SAN     ?=

# Determinism: no FMA contraction, so that every summation happens exactly
# as written and the chapters agree bit for bit.
CFLAGS_ALL = -std=c11 -D_POSIX_C_SOURCE=200809L $(OPT) $(SAN) -Wall -Wextra -Werror \
             -ffp-contract=off -fopenmp -MMD -MP $(INCLUDES) $(CFLAGS)
LDLIBS_ALL = $(SAN) -fopenmp -lm $(LDLIBS)

CHAPTER_DIRS := $(sort $(wildcard chapters/ch*))
INCLUDES := -Icommon $(addprefix -I,$(CHAPTER_DIRS))

COMMON_SRCS := $(sort $(wildcard common/*.c))
COMMON_OBJS := $(COMMON_SRCS:%.c=$(BUILD)/obj/%.o)

# Each chapter is its folder's sources plus its lab files from $(LAB)/chNN/,
# plus the lab files of the chapters before it (chapters build on each other).
lab_srcs = $(sort $(wildcard $(LAB)/ch0$(1)/*.c))
chapter_srcs = $(filter-out %/main.c,$(sort $(wildcard chapters/ch0$(1)-*/*.c)))
LAB_OBJS_1 := $(patsubst %.c,$(BUILD)/obj/%.o,$(call lab_srcs,1))
LAB_OBJS_2 := $(LAB_OBJS_1) $(patsubst %.c,$(BUILD)/obj/%.o,$(call lab_srcs,2))
LAB_OBJS_3 := $(LAB_OBJS_2) $(patsubst %.c,$(BUILD)/obj/%.o,$(call lab_srcs,3))
LAB_OBJS_4 := $(LAB_OBJS_3) $(patsubst %.c,$(BUILD)/obj/%.o,$(call lab_srcs,4))
CH_OBJS_1 := $(LAB_OBJS_1) $(patsubst %.c,$(BUILD)/obj/%.o,$(call chapter_srcs,1))
CH_OBJS_2 := $(CH_OBJS_1) $(LAB_OBJS_2) $(patsubst %.c,$(BUILD)/obj/%.o,$(call chapter_srcs,2))
CH_OBJS_3 := $(CH_OBJS_2) $(LAB_OBJS_3) $(patsubst %.c,$(BUILD)/obj/%.o,$(call chapter_srcs,3))
CH_OBJS_4 := $(CH_OBJS_3) $(LAB_OBJS_4) $(patsubst %.c,$(BUILD)/obj/%.o,$(call chapter_srcs,4))
ALL_CH_OBJS := $(sort $(CH_OBJS_4))

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
TOOLS := $(patsubst tools/%.c,$(BUILD)/%,$(sort $(wildcard tools/*.c)))

.PHONY: all test test-sanitize lab grade docs bench demo models cuda-check exercises check-exercises deps clean
all: $(PROGRAMS) $(TOOLS)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

$(BUILD)/ch01-naive: $(BUILD)/obj/chapters/ch01-naive/main.o $(CH_OBJS_1) $(COMMON_OBJS)
	$(CC) $^ -o $@ $(LDLIBS_ALL)
$(BUILD)/ch02-kvcache: $(BUILD)/obj/chapters/ch02-kvcache/main.o $(CH_OBJS_2) $(COMMON_OBJS)
	$(CC) $^ -o $@ $(LDLIBS_ALL)
$(BUILD)/ch03-batching: $(BUILD)/obj/chapters/ch03-batching/main.o $(CH_OBJS_3) $(COMMON_OBJS)
	$(CC) $^ -o $@ $(LDLIBS_ALL)
$(BUILD)/ch04-paged: $(BUILD)/obj/chapters/ch04-paged/main.o $(CH_OBJS_4) $(COMMON_OBJS)
	$(CC) $^ -o $@ $(LDLIBS_ALL)

# Tools link everything but the chapters' main() files.
$(BUILD)/%: $(BUILD)/obj/tools/%.o $(ALL_CH_OBJS) $(COMMON_OBJS)
	$(CC) $^ -o $@ $(LDLIBS_ALL)
# Made through a pattern rule, a tool's object would count as intermediate
# and be deleted (and rebuilt by every make); keep it.
.SECONDARY: $(TOOLS:$(BUILD)/%=$(BUILD)/obj/tools/%.o)

# ---------------------------------------------------------------- tests
CHECK_CFLAGS = $(shell pkg-config --cflags check 2>/dev/null)
CHECK_LIBS   = $(shell pkg-config --libs check 2>/dev/null)
TEST_SRCS := $(sort $(wildcard tests/test_*.c))
TEST_OBJS := $(TEST_SRCS:%.c=$(BUILD)/obj/%.o)

$(BUILD)/obj/tests/%.o: tests/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(CHECK_CFLAGS) -Itests -c $< -o $@

$(BUILD)/test-kvlab: $(TEST_OBJS) $(BUILD)/obj/tests/runner.o $(BUILD)/obj/tests/helpers.o $(ALL_CH_OBJS) $(COMMON_OBJS)
	$(CC) $^ -o $@ $(CHECK_LIBS) $(LDLIBS_ALL)

deps:
	@scripts/deps.sh check pkg-config

test: deps
	@$(MAKE) --no-print-directory all $(BUILD)/test-kvlab
	KVLAB_BUILD=$(BUILD) $(BUILD)/test-kvlab

# The sanitizers get their own build folder, so the two builds never mix.
test-sanitize: deps
	@$(MAKE) --no-print-directory test BUILD=build/asan OPT="-O1 -g -fno-omit-frame-pointer" \
		SAN="-fsanitize=address,undefined -fno-sanitize-recover=all"

# Benchmarks are not tests: sections of scripts/bench.sh write build/bench/.
# LLAMA2C_RUN=/path/to/run adds the comparison with llama2.c's run.c.
bench: all
	BUILD=$(BUILD) scripts/bench.sh

clean:
	rm -rf build html

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
