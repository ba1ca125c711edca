# distir: one non-recursive Makefile, building out of tree into build/$(MODE)/.
#
#   make            build the library, distir, distird, tests and fuzz replays (release)
#   make test       install missing packages, build, run every test
#   make demo       install missing packages, build, show the product working
#   make asan       build and run every test under AddressSanitizer and UBSan
#   make fuzz       build the libFuzzer targets with clang and run each (FUZZ_SECONDS)
#   make bench      build and run the benchmarks in bench/
#   make deps       install missing Debian packages (as root) or print the command
#   make lint       cppcheck over the sources
#
# Sources are found by wildcard: a new .c file in lib/ joins the library, a
# new tests/test_*.c becomes a test binary, a new fuzz/fuzz_*.c a fuzz target.

MODE ?= release
.DEFAULT_GOAL := all
B := build/$(MODE)
CC ?= cc
ifeq ($(CC),cc)
CC := gcc
endif

# Debian packages the build, the tests and the demo need.
PACKAGES := build-essential pkg-config clang libclang-rt-14-dev \
	libprotobuf-c-dev protobuf-c-compiler protobuf-compiler \
	libgrpc-dev libuv1-dev libsqlite3-dev sqlite3 libssl-dev libjansson-dev libcmocka-dev \
	grpc-proto python3-onnx libonnx-testdata python3-grpcio python3-protobuf python3-numpy \
	python3-torch systemd openssl man-db

WARN := -Wall -Wextra -Wpedantic -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
	-Wvla -Wformat=2 -Wno-format-nonliteral -Wno-format-truncation
ifneq ($(findstring clang,$(CC)),)
WARN += -Wno-unknown-warning-option
endif
BASEFLAGS := -std=c11 -D_GNU_SOURCE -MMD -MP -Ilib -I$(B)/gen $(WARN)

# Any MODE starting with "asan" (asan, asan-foo) is a sanitizer build.
ifneq ($(filter asan%,$(MODE)),)
OPTFLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
LDSAN := -fsanitize=address,undefined
else ifeq ($(MODE),debug)
OPTFLAGS := -O0 -g -DDISTIR_DEBUG
LDSAN :=
else
OPTFLAGS := -O2 -g
LDSAN :=
endif

PKGS_LIB := libprotobuf-c jansson libcrypto
PKGS_SRV := grpc libuv sqlite3
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS_LIB) $(PKGS_SRV) cmocka 2>/dev/null)
LIBS_LIB = $(shell pkg-config --libs $(PKGS_LIB) 2>/dev/null) -lm
LIBS_SRV = $(shell pkg-config --libs $(PKGS_SRV) 2>/dev/null) -lpthread
LIBS_TEST = $(shell pkg-config --libs cmocka 2>/dev/null)

CFLAGS_ALL = $(BASEFLAGS) $(OPTFLAGS) $(PKG_CFLAGS) $(CFLAGS)
LDFLAGS_ALL = $(LDSAN) $(LDFLAGS)

# ---- generated protobuf code ----
PROTOC_C := protoc-c
ONNX_PROTO_ROOT := /usr/lib/python3/dist-packages
HEALTH_PROTO_ROOT := /usr/share/grpc-proto
GEN_SRCS := $(B)/gen/distir.pb-c.c $(B)/gen/onnx/onnx-ml.pb-c.c $(B)/gen/grpc/health/v1/health.pb-c.c
GEN_HDRS := $(GEN_SRCS:.c=.h)

$(B)/gen/distir.pb-c.c $(B)/gen/distir.pb-c.h: proto/distir.proto | $(B)/deps.stamp
	@mkdir -p $(B)/gen
	$(PROTOC_C) -Iproto --c_out=$(B)/gen proto/distir.proto

$(B)/gen/onnx/onnx-ml.pb-c.c $(B)/gen/onnx/onnx-ml.pb-c.h: | $(B)/deps.stamp
	@mkdir -p $(B)/gen
	$(PROTOC_C) -I$(ONNX_PROTO_ROOT) --c_out=$(B)/gen onnx/onnx-ml.proto

$(B)/gen/grpc/health/v1/health.pb-c.c $(B)/gen/grpc/health/v1/health.pb-c.h: | $(B)/deps.stamp
	@mkdir -p $(B)/gen
	$(PROTOC_C) -I$(HEALTH_PROTO_ROOT) --c_out=$(B)/gen grpc/health/v1/health.proto

# The cache schema, embedded into distird as the C string cache_schema_sql.
$(B)/gen/schema_sql.c: schema.sql | $(B)/deps.stamp
	@mkdir -p $(B)/gen
	@{ echo '/* generated from schema.sql */'; echo 'const char cache_schema_sql[] = {'; \
	  od -An -v -tx1 schema.sql | sed 's/\([0-9a-f][0-9a-f]\)/0x\1,/g'; echo '0};'; } >$@.tmp
	@mv $@.tmp $@

# ---- sources ----
LIB_SRCS := $(sort $(wildcard lib/*/*.c))
LIB_OBJS := $(LIB_SRCS:%.c=$(B)/obj/%.o) $(B)/obj/gen/distir.pb-c.o $(B)/obj/gen/onnx/onnx-ml.pb-c.o
SRV_SRCS := $(sort $(wildcard server/*.c))
SRV_OBJS := $(SRV_SRCS:%.c=$(B)/obj/%.o) $(B)/obj/gen/grpc/health/v1/health.pb-c.o \
	$(B)/obj/gen/schema_sql.o
# client/rpc.c (the gRPC client) is not linked into distir: it is the shared object
# distir-rpc.so, opened by client/rpc_load.c on the first --server call.
CLI_SRCS := $(sort $(filter-out client/rpc.c,$(wildcard client/*.c)))
CLI_OBJS := $(CLI_SRCS:%.c=$(B)/obj/%.o)
RPC_SO := $(B)/distir-rpc.so
TEST_SRCS := $(sort $(wildcard tests/test_*.c))
TEST_BINS := $(TEST_SRCS:tests/%.c=$(B)/tests/%)
TEST_SUPPORT := $(sort $(wildcard tests/support/*.c))
TEST_SUPPORT_OBJS := $(TEST_SUPPORT:%.c=$(B)/obj/%.o)
FUZZ_SRCS := $(sort $(wildcard fuzz/fuzz_*.c))
FUZZ_REPLAYS := $(FUZZ_SRCS:fuzz/%.c=$(B)/fuzz/%)
BENCH_SRCS := $(sort $(wildcard bench/bench_*.c))
PY_SRCS := $(sort $(wildcard client/python/distir/*.py))
PY_PKG := $(B)/python/distir
BENCH_BINS := $(BENCH_SRCS:bench/%.c=$(B)/bench/%)

LIBA := $(B)/libdistir.a
SRVA := $(B)/libdistird.a

.PHONY: all deps test demo asan fuzz bench clean lint check-build install
# Keep the objects of tests, fuzz targets and benches (make would delete them as intermediates).
.SECONDARY:
all: $(B)/distir $(B)/distird $(TEST_BINS) $(FUZZ_REPLAYS) $(BENCH_BINS) $(PY_PKG)/distir_pb2.py

# ---- dependencies ----
# Installs what is missing when run as root; otherwise prints the command.
deps: $(B)/deps.stamp
$(B)/deps.stamp: Makefile
	@missing=""; for p in $(PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing >/dev/null || exit 1; \
	  else \
	    echo "missing Debian packages; run as root:"; \
	    echo "  apt-get update && apt-get install -y$$missing"; exit 1; \
	  fi; \
	fi
	@mkdir -p $(B) && touch $@

# ---- compile ----
$(B)/obj/%.o: %.c | $(B)/deps.stamp $(GEN_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

# Generated code is not ours: compile it without -Werror's extra warnings.
$(B)/obj/gen/%.o: $(B)/gen/%.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 $(OPTFLAGS) -I$(B)/gen $(PKG_CFLAGS) -w -c $< -o $@

$(LIBA): $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(SRVA): $(filter-out $(B)/obj/server/main.o,$(SRV_OBJS))
	@rm -f $@
	ar rcs $@ $^

# The Python client (client/python/distir) with its generated messages, importable from
# $(B)/python.
$(PY_PKG)/distir_pb2.py: proto/distir.proto $(PY_SRCS) | $(B)/deps.stamp
	@mkdir -p $(PY_PKG)
	cp $(PY_SRCS) $(PY_PKG)/
	protoc --python_out=$(PY_PKG) -Iproto proto/distir.proto

# The CLI takes the daemon's database code (cache.c, baseline.c) from its archive for --db,
# and links no gRPC: it exports its symbols (--export-dynamic) for distir-rpc.so to use.
LIBS_CLI = $(shell pkg-config --libs sqlite3 2>/dev/null) -ldl -lpthread
$(B)/distir: $(CLI_OBJS) $(SRVA) $(LIBA) | $(RPC_SO)
	$(CC) $(LDFLAGS_ALL) -Wl,--export-dynamic -o $@ $(CLI_OBJS) $(SRVA) $(LIBA) $(LIBS_CLI) $(LIBS_LIB)

$(B)/obj/client/rpc.pic.o: client/rpc.c $(GEN_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -fPIC -c $< -o $@

$(RPC_SO): $(B)/obj/client/rpc.pic.o
	$(CC) $(LDFLAGS_ALL) -shared -o $@ $< $(shell pkg-config --libs grpc 2>/dev/null)

$(B)/distird: $(B)/obj/server/main.o $(SRVA) $(LIBA)
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_SRV) $(LIBS_LIB)

# Library tests link the library only; tests/test_server*.c also link the daemon's objects.
$(B)/tests/test_server%: $(B)/obj/tests/test_server%.o $(TEST_SUPPORT_OBJS) $(SRVA) $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_ALL) -o $@ $< $(TEST_SUPPORT_OBJS) $(SRVA) $(LIBA) $(LIBS_TEST) $(LIBS_SRV) $(LIBS_LIB)

$(B)/tests/%: $(B)/obj/tests/%.o $(TEST_SUPPORT_OBJS) $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_ALL) -o $@ $< $(TEST_SUPPORT_OBJS) $(LIBA) $(LIBS_TEST) $(LIBS_LIB)

# Every build compiles each fuzz target with a replay main that runs its corpus.
$(B)/fuzz/%: $(B)/obj/fuzz/%.o $(B)/obj/fuzz/replay.o $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_LIB)

$(B)/bench/bench_server%: $(B)/obj/bench/bench_server%.o $(SRVA) $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_ALL) -o $@ $< $(SRVA) $(LIBA) $(LIBS_SRV) $(LIBS_LIB)

$(B)/bench/%: $(B)/obj/bench/%.o $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_ALL) -o $@ $< $(LIBA) $(LIBS_LIB)

# ---- run ----
test: all
	@DISTIR_BUILD=$(B) sh tests/run.sh $(B)

demo: $(B)/distir $(B)/distird
	@DISTIR_BUILD=$(B) sh scripts/demo.sh $(B)

asan:
	@$(MAKE) --no-print-directory MODE=asan test

FUZZ_SECONDS ?= 60
FUZZ_TARGETS := $(FUZZ_SRCS:fuzz/%.c=build/fuzz/%)
FUZZFLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -Ilib -Ibuild/fuzz/gen
fuzz: | build/release/deps.stamp
	@$(MAKE) --no-print-directory MODE=fuzzlib CC=clang \
	  CFLAGS="-fsanitize=fuzzer-no-link,address,undefined" LDFLAGS="-fsanitize=address,undefined" \
	  build/fuzzlib/libdistir.a
	@mkdir -p build/fuzz
	@for f in $(FUZZ_SRCS); do n=$$(basename $$f .c); \
	  clang $(FUZZFLAGS) -Ibuild/fuzzlib/gen $(PKG_CFLAGS) $$f build/fuzzlib/libdistir.a \
	    $(LIBS_LIB) -o build/fuzz/$$n || exit 1; \
	  mkdir -p build/fuzz/corpus-$$n; \
	  echo "fuzzing $$n for $(FUZZ_SECONDS)s"; \
	  build/fuzz/$$n -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -rss_limit_mb=2048 \
	    -print_final_stats=1 build/fuzz/corpus-$$n fuzz/corpus/$$n 2>&1 | tail -n 12 || exit 1; \
	done

bench: $(BENCH_BINS)
	@for b in $(BENCH_BINS); do echo "== $$b"; $$b || exit 1; done
	@for s in bench/*.sh; do echo "== $$s"; sh $$s || exit 1; done

# make install [PREFIX=/usr/local] [DESTDIR=...]: the two programs (and distir's RPC client,
# PREFIX/lib/distir/distir-rpc.so, which it finds from its own location), their man pages, the
# systemd unit (ExecStart pointing into PREFIX), a sample config, the documentation and the
# Python client, where Debian's python3 finds it for that PREFIX.
PREFIX ?= /usr/local
PYDIR ?= $(PREFIX)/$(shell /usr/bin/python3 -c 'import sys; print("lib/python3/dist-packages" if "$(PREFIX)" == "/usr" else "lib/python%d.%d/dist-packages" % sys.version_info[:2])' 2>/dev/null || echo lib/python3/dist-packages)
install: $(B)/distir $(B)/distird $(RPC_SO) $(PY_PKG)/distir_pb2.py
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/distir $(DESTDIR)$(PREFIX)/share/man/man1 \
	  $(DESTDIR)$(PREFIX)/share/man/man8 $(DESTDIR)$(PREFIX)/lib/systemd/system \
	  $(DESTDIR)$(PREFIX)/share/doc/distir $(DESTDIR)$(PYDIR)/distir
	install -m 755 $(B)/distir $(B)/distird $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(RPC_SO) $(DESTDIR)$(PREFIX)/lib/distir/
	install -m 644 man/distir.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 644 man/distird.8 $(DESTDIR)$(PREFIX)/share/man/man8/
	sed 's|/usr/local/bin/distird|$(PREFIX)/bin/distird|' deploy/distird.service \
	  >$(DESTDIR)$(PREFIX)/lib/systemd/system/distird.service
	install -m 644 deploy/distird.conf docs/*.md $(DESTDIR)$(PREFIX)/share/doc/distir/
	install -m 644 $(PY_PKG)/*.py $(DESTDIR)$(PYDIR)/distir/

lint:
	cppcheck --quiet --error-exitcode=1 --std=c11 --enable=warning,portability \
	  --suppress=missingIncludeSystem --suppress=internalAstError -Ilib lib server client

clean:
	rm -rf build

-include $(shell find build/$(MODE)/obj -name '*.d' 2>/dev/null)
