# lfhttpd — build, run and test.
#   make            build build/lfhttpd
#   make run        build and serve www/ on port 8080 with conf/lfhttpd.conf
#   make test       build and run every test (layers, unit, integration, sanitizers)
#   make test-fresh `make test` from a clean clone in a bare Debian 12 container (podman)
#   make cert       a self-signed certificate for localhost (conf/tls/), for conf/examples/tls.conf
#   make soak       30 minutes of mixed load, memory and descriptors watched (not in `make test`)
#   make test-apps  real applications behind lfhttpd: WordPress on PHP-FPM and MariaDB (not in `make test`)
#   make docs       regenerate the reference (docs/reference, docs/man/lfhttpd.conf.5)
#   make install    the binary, configuration, man pages and systemd unit (PREFIX, DESTDIR)
#   make clean
# Variant builds go to their own folders: build/asan (ASan + UBSan), build/tsan.

SHELL   := /bin/bash
# The compiler is gcc unless CC is given (on the command line or in the environment): make's
# own default, `cc`, is whatever the machine links there, often clang once clang is
# installed. The sanitizer and fuzz builds below use clang.
ifeq ($(origin CC),default)
CC      := gcc
endif
# DWARF 4: Debian 12's valgrind (3.19) cannot read the DWARF 5 that clang 14 writes by
# default, and stops at once; gcc's reads either way.
CFLAGS  ?= -O2 -g -gdwarf-4
WARN    := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
STD     := -std=c11 -D_GNU_SOURCE -pthread
INC     := -Iserver -Imodules
LDLIBS  := -pthread -lssl -lcrypto -lz -lbrotlienc -lzstd -lmagic -lcrypt -lpcre2-8 -lcares
PYTHON  := /usr/bin/python3
B       ?= build

SERVER_SRC := $(filter-out server/main.c,$(wildcard server/*.c)) $(wildcard modules/*.c)
SERVER_OBJ := $(patsubst %.c,$(B)/obj/%.o,$(SERVER_SRC))
MAIN_OBJ   := $(B)/obj/server/main.o
UNIT_SRC   := $(wildcard tests/unit/test_*.c)
UNIT_BIN   := $(patsubst tests/unit/%.c,$(B)/tests/%,$(UNIT_SRC))

.PHONY: all run cert test test-fresh check-deps check-layers check-docs docs install unit \
        integration test-asan test-tsan fuzz docker bench-classes soak soak-deps \
        test-apps apps-deps clean

all: $(B)/lfhttpd

# $(call APT_INSTALL,WHAT) ends a recipe that has put the missing Debian packages in the
# shell variable `missing`: installs them with apt-get when run as root, otherwise prints
# the exact command and fails.
APT_INSTALL = if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    log=$$(mktemp); \
	    if ! { apt-get update -qq && \
	           DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; } >$$log 2>&1; then \
	      tail -n 40 $$log; rm -f $$log; echo "apt-get install$$missing failed"; exit 1; \
	    fi; \
	    rm -f $$log; \
	  else \
	    echo "missing $(1); run: sudo apt-get install -y$$missing"; exit 1; \
	  fi; \
	fi

# Build dependencies: gcc, the C library's headers and the -dev packages of zlib, Brotli and
# Zstandard (mod_gzip's codings), libmagic, libxcrypt (mod_auth's password hashes) and
# OpenSSL 3 (HTTPS), PCRE2 (regular expressions), c-ares (the proxy's `resolver`: names
# resolved at run time without a thread waiting).
# Checked once (a stamp file, made again when this file changes); installed with apt-get
# when run as root, otherwise the exact command is printed.
BUILD_PKGS := stdio.h:libc6-dev zlib.h:zlib1g-dev brotli/encode.h:libbrotli-dev \
              zstd.h:libzstd-dev magic.h:libmagic-dev crypt.h:libcrypt-dev \
              openssl/ssl.h:libssl-dev pcre2.h:libpcre2-dev ares.h:libc-ares-dev
build/.build-deps: Makefile
	@missing=""; \
	command -v gcc >/dev/null 2>&1 || missing="$$missing gcc"; \
	for pair in $(BUILD_PKGS); do \
	  hdr=$${pair%%:*}; pkg=$${pair#*:}; \
	  [ -e /usr/include/$$hdr ] || missing="$$missing $$pkg"; \
	done; \
	$(call APT_INSTALL,build packages)
	@mkdir -p build && touch $@

$(B)/lfhttpd: $(MAIN_OBJ) $(SERVER_OBJ)
	@echo "  LD    $@"
	@$(CC) $(CFLAGS) $(STD) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Each object depends on the headers it includes, as the compiler lists them (-MMD) in a .d
# file beside it; -MP adds an empty rule for each header, so a header that is removed does
# not stop the build.
DEPFLAGS = -MMD -MP

$(B)/obj/%.o: %.c | build/.build-deps
	@mkdir -p $(dir $@)
	@echo "  CC    $<"
	@$(CC) $(CFLAGS) $(STD) $(WARN) $(INC) $(DEPFLAGS) -c -o $@ $<

$(B)/tests/test_%: tests/unit/test_%.c $(SERVER_OBJ)
	@mkdir -p $(dir $@)
	@echo "  CC    $<"
	@$(CC) $(CFLAGS) $(STD) $(WARN) $(INC) -Itests/unit $(DEPFLAGS) -o $@ $< $(SERVER_OBJ) $(LDLIBS)

-include $(patsubst %.o,%.d,$(SERVER_OBJ) $(MAIN_OBJ)) $(patsubst %,%.d,$(UNIT_BIN))

$(B)/tests/alloc_counter.so: tests/alloc_counter.c
	@mkdir -p $(dir $@)
	$(CC) -shared -fPIC -O2 $(STD) $(WARN) -o $@ $<

run: $(B)/lfhttpd
	$(B)/lfhttpd -c conf/lfhttpd.conf

# A self-signed ECDSA P-256 certificate for localhost (and 127.0.0.1), valid for a year:
# what conf/examples/tls.conf serves. Made once; delete conf/tls/ to make a new one.
cert: conf/tls/localhost.pem
conf/tls/localhost.pem:
	@command -v openssl >/dev/null 2>&1 || { missing=" openssl"; $(call APT_INSTALL,openssl); }
	@mkdir -p conf/tls
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 365 \
	  -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
	  -keyout conf/tls/localhost.key -out $@ 2>/dev/null
	@chmod 600 conf/tls/localhost.key

# --- tests ------------------------------------------------------------------------------
# Tools the tests drive. When one is missing: installed with apt-get when run as root,
# otherwise the exact command to run is printed. htpasswd makes the auth tests' user files;
# nginx answers the same requests for comparison (test_auth.py, test_examples.py); chromium
# renders directory listings and the example single-page application, the latter driven
# over the DevTools protocol with python3-websockets; podman-compose brings up the Docker
# Compose example (deploy/compose/, test_compose.py); promtool (Debian's prometheus)
# checks the metrics scrape (test_metrics.py) and the Kubernetes pod's (test_kubernetes.py,
# which reads the manifests with python3-yaml); groff checks the man pages (check-docs);
# php-fpm8.2 is the FastCGI application of test_fastcgi.py, and DokuWiki (Debian's
# dokuwiki, a package of files: looked for by its doku.php) the PHP application of
# test_dokuwiki.py; uWSGI (uwsgi with its python3 plugin) the uwsgi and SCGI one of
# test_uwsgi.py; dnsmasq (Debian's dnsmasq-base) the DNS server of the resolver's tests
# (test_proxy_resolver.py).
TEST_PKGS := gcc:gcc curl:curl ab:apache2-utils htpasswd:apache2-utils nginx:nginx-light \
             wrk:wrk clang:clang setpriv:util-linux \
             slowhttptest:slowhttptest valgrind:valgrind chromium:chromium \
             systemd-analyze:systemd podman-compose:podman-compose \
             openssl:openssl testssl:testssl.sh promtool:prometheus groff:groff-base \
             php-fpm8.2:php8.2-fpm dnsmasq:dnsmasq-base uwsgi:uwsgi
check-deps:
	@missing=""; \
	for pair in $(TEST_PKGS); do \
	  cmd=$${pair%%:*}; pkg=$${pair#*:}; \
	  command -v $$cmd >/dev/null 2>&1 || missing="$$missing $$pkg"; \
	done; \
	$(PYTHON) -c 'import pytest' 2>/dev/null || missing="$$missing python3-pytest"; \
	$(PYTHON) -c 'import xdist' 2>/dev/null || missing="$$missing python3-pytest-xdist"; \
	$(PYTHON) -c 'import brotli' 2>/dev/null || missing="$$missing python3-brotli"; \
	$(PYTHON) -c 'import zstandard' 2>/dev/null || missing="$$missing python3-zstandard"; \
	$(PYTHON) -c 'import websockets' 2>/dev/null || missing="$$missing python3-websockets"; \
	$(PYTHON) -c 'import yaml' 2>/dev/null || missing="$$missing python3-yaml"; \
	[ -e /usr/share/dokuwiki/doku.php ] || missing="$$missing dokuwiki"; \
	[ -n "$$(ls /usr/lib/uwsgi/plugins/python3*_plugin.so 2>/dev/null)" ] || missing="$$missing uwsgi-plugin-python3"; \
	[ -e /usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/libclang_rt.asan-x86_64.a ] || \
	  [ -n "$$(ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.asan-x86_64.a 2>/dev/null)" ] || \
	  missing="$$missing libclang-rt-14-dev"; \
	$(call APT_INSTALL,test tools)

unit: $(UNIT_BIN)
	@for t in $(UNIT_BIN); do $$t || exit 1; done

# The integration tests run in one process by default; TEST_JOBS=N runs them on N
# pytest-xdist workers, a file to a worker (so that a file's shared servers start once),
# about twice as fast on two cores. One process stays the default: under two workers a
# test that counts on its own timing has failed where it never fails alone.
TEST_JOBS ?= 1
XDIST = $(if $(filter-out 0 1,$(TEST_JOBS)),$(if $(shell $(PYTHON) -c 'import xdist' \
        2>/dev/null && echo y),-n $(TEST_JOBS) --dist loadfile))

integration: $(B)/lfhttpd $(B)/tests/alloc_counter.so
	LFHTTPD_BIN=$(abspath $(B)/lfhttpd) $(PYTHON) -m pytest -q -p no:cacheprovider -rs $(XDIST) \
	  tests/integration

SAN_FLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all

# The whole suite again under AddressSanitizer + UndefinedBehaviorSanitizer.
test-asan:
	$(MAKE) --no-print-directory B=build/asan CC=clang CFLAGS="$(SAN_FLAGS)" unit build/asan/lfhttpd
	LFHTTPD_BIN=$(abspath build/asan/lfhttpd) LFHTTPD_SANITIZE=asan \
	  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
	  $(PYTHON) -m pytest -q -p no:cacheprovider -rs $(XDIST) tests/integration

# The thread pool and the open-file cache (their unit tests) and the server under load,
# under ThreadSanitizer.
test-tsan:
	$(MAKE) --no-print-directory B=build/tsan CC=clang CFLAGS="-O1 -g -fsanitize=thread" \
	  build/tsan/tests/test_lf_group build/tsan/tests/test_file_cache build/tsan/lfhttpd
	TSAN_OPTIONS=halt_on_error=1 build/tsan/tests/test_lf_group
	TSAN_OPTIONS=halt_on_error=1 build/tsan/tests/test_file_cache
	LFHTTPD_BIN=$(abspath build/tsan/lfhttpd) LFHTTPD_SANITIZE=tsan \
	  TSAN_OPTIONS=halt_on_error=0:report_signal_unsafe=0 \
	  $(PYTHON) -m pytest -q -p no:cacheprovider -rs -k "load or pipelin or concurrent or shutdown or classes" \
	  tests/integration

# The core's includes go one way, layer by layer (the layers are listed in the script).
check-layers:
	@$(PYTHON) tests/check_layers.py

# The reference documentation is generated from the server's own tables (tests/gen_docs.py:
# `lfhttpd --directives`, `--variables` and a scrape of /metrics): `make docs` writes it,
# `make check-docs` fails when a committed file differs (stale, or edited by hand), when a
# directive's table line has no documentation, or when a directive, variable or metric is
# missing from the reference; it also checks both man pages with groff's warnings on.
docs: $(B)/lfhttpd
	$(PYTHON) tests/gen_docs.py --bin $(B)/lfhttpd

check-docs: $(B)/lfhttpd
	@$(PYTHON) tests/gen_docs.py --bin $(B)/lfhttpd --check
	@for page in docs/man/lfhttpd.8 docs/man/lfhttpd.conf.5; do \
	  out=$$(groff -man -Tutf8 -ww -z $$page 2>&1); \
	  [ -z "$$out" ] || { echo "check-docs: $$page: $$out"; exit 1; }; \
	done

# make install [PREFIX=/usr/local] [DESTDIR=...]: the binary in sbin, the configuration in
# etc/lfhttpd (an existing one is kept), the man pages, and the systemd unit with the
# paths it names made the installed ones.
PREFIX     ?= /usr/local
SBINDIR    ?= $(PREFIX)/sbin
SYSCONFDIR ?= $(PREFIX)/etc
MANDIR     ?= $(PREFIX)/share/man
UNITDIR    ?= $(PREFIX)/lib/systemd/system
install: $(B)/lfhttpd
	install -d $(DESTDIR)$(SBINDIR) $(DESTDIR)$(SYSCONFDIR)/lfhttpd \
	  $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(UNITDIR)
	install -m 755 $(B)/lfhttpd $(DESTDIR)$(SBINDIR)/lfhttpd
	[ -e $(DESTDIR)$(SYSCONFDIR)/lfhttpd/lfhttpd.conf ] || \
	  install -m 644 conf/lfhttpd.conf $(DESTDIR)$(SYSCONFDIR)/lfhttpd/lfhttpd.conf
	for f in fastcgi.conf fastcgi_params uwsgi_params scgi_params; do \
	  [ -e $(DESTDIR)$(SYSCONFDIR)/lfhttpd/$$f ] || \
	    install -m 644 conf/$$f $(DESTDIR)$(SYSCONFDIR)/lfhttpd/$$f; \
	done
	install -m 644 docs/man/lfhttpd.8 $(DESTDIR)$(MANDIR)/man8/lfhttpd.8
	install -m 644 docs/man/lfhttpd.conf.5 $(DESTDIR)$(MANDIR)/man5/lfhttpd.conf.5
	sed -e 's|/usr/local/sbin/lfhttpd|$(SBINDIR)/lfhttpd|g' \
	    -e 's|/usr/local/etc/lfhttpd/|$(SYSCONFDIR)/lfhttpd/|g' \
	  deploy/systemd/lfhttpd.service > $(DESTDIR)$(UNITDIR)/lfhttpd.service
	chmod 644 $(DESTDIR)$(UNITDIR)/lfhttpd.service

# The layer check comes first (it takes a moment), right after check-deps, which installs
# the Python it runs on in a bare system; the documentation check follows the build (it
# asks the binary for its tables).
test: check-deps
	$(MAKE) --no-print-directory check-layers
	$(MAKE) --no-print-directory all unit
	$(MAKE) --no-print-directory check-docs
	$(MAKE) --no-print-directory integration
	$(MAKE) --no-print-directory test-asan
	$(MAKE) --no-print-directory test-tsan

# `make test` as a new user meets it: in a bare Debian 12 container (podman, image
# debian:bookworm-slim), as root but without CAP_SYS_NICE or any capability beyond podman's
# defaults, with only `make` installed first, so that `make test` must install everything
# else itself (through the container's network, podman's default). It runs in a clean clone
# (`git clone`) of this repository's HEAD: uncommitted changes are NOT included; commit
# them first. Inside, the tests know it by LFHTTPD_IN_CONTAINER=1 (no container engine can
# run in there, so the image tests skip, by design); LFHTTPD_STRICT_SKIPS is passed on.
# Chromium needs a larger /dev/shm than podman's 64 MiB; descriptors and processes get
# limits that an unprivileged root may set.
FRESH_IMAGE   := docker.io/library/debian:bookworm-slim
CONTAINER_ENV := ../shared/tools/container-env.sh
FRESH_RUN     := podman run --rm --shm-size=1g --pids-limit=-1 \
                 --ulimit nofile=20000:20000 --ulimit nproc=32768:32768 \
                 -e LFHTTPD_IN_CONTAINER=1 \
                 $(if $(LFHTTPD_STRICT_SKIPS),-e LFHTTPD_STRICT_SKIPS=$(LFHTTPD_STRICT_SKIPS))
test-fresh:
	@command -v podman >/dev/null 2>&1 || \
	  { echo "make test-fresh: needs podman; run: sudo apt-get install -y podman"; exit 1; }
	@if ! podman image exists $(FRESH_IMAGE); then \
	  if [ -f $(CONTAINER_ENV) ]; then \
	    sh $(CONTAINER_ENV); \
	  else \
	    echo "make test-fresh: needs the image $(FRESH_IMAGE); provide it, e.g.: podman pull $(FRESH_IMAGE)"; \
	    exit 1; \
	  fi; \
	fi
	@dir=$$(mktemp -d /tmp/lfhttpd-fresh.XXXXXX); trap 'rm -rf "$$dir"' EXIT; \
	git clone -q --no-hardlinks . "$$dir/lfhttpd" && \
	git -C "$$dir/lfhttpd" checkout -q --detach $$(git rev-parse HEAD) && \
	echo "test-fresh: $$(git -C "$$dir/lfhttpd" log --oneline -1) in $(FRESH_IMAGE)" && \
	$(FRESH_RUN) -v "$$dir/lfhttpd:/src" -w /src $(FRESH_IMAGE) bash -c \
	  'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq make >/dev/null && make test'

# libFuzzer targets (clang), each run for FUZZ_SECONDS from its seed corpus
# (tests/fuzz/corpus/NAME) and its growing corpus in build/fuzz/. The server's objects are
# built once with fuzzer instrumentation and linked into every target. FUZZ_SEED fixes
# libFuzzer's random seed (CI sets one, so that a run explores the same inputs each time
# and a find is one a run by hand repeats); unset, each run picks its own.
FUZZ_SECONDS ?= 10
FUZZ_SEED ?=
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_FLAGS := -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
FUZZ_OBJ := $(patsubst %.c,build/fuzz/obj/%.o,$(SERVER_SRC))
fuzz:
	@$(MAKE) --no-print-directory B=build/fuzz CC=clang \
	  CFLAGS="-O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all" \
	  $(FUZZ_OBJ)
	@for src in $(FUZZ_SRC); do \
	  name=$$(basename $$src .c); \
	  echo "  FUZZ  $$name ($(FUZZ_SECONDS) s)"; \
	  clang $(FUZZ_FLAGS) $(STD) $(INC) -o build/fuzz/$$name $$src $(FUZZ_OBJ) $(LDLIBS) || exit 1; \
	  mkdir -p build/fuzz/corpus-$$name; \
	  build/fuzz/$$name -max_total_time=$(FUZZ_SECONDS) $(if $(FUZZ_SEED),-seed=$(FUZZ_SEED)) -print_final_stats=1 \
	    build/fuzz/corpus-$$name $$(ls -d tests/fuzz/corpus/$$name 2>/dev/null) 2>&1 | \
	    grep -E "^(stat::number_of_executed_units|stat::peak_rss|#[0-9]+.*DONE)|ERROR|SUMMARY|^FAIL" ; \
	  [ $${PIPESTATUS[0]} -eq 0 ] || exit 1; \
	done

# The container image, built with docker when an engine answers, else with podman.
IMAGE ?= lfhttpd
docker:
	@if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then \
	  docker build -t $(IMAGE) .; \
	elif command -v podman >/dev/null 2>&1; then \
	  podman build --format docker -t $(IMAGE) .; \
	else \
	  echo "make docker: neither a docker engine nor podman is available"; exit 1; \
	fi

# Service classes under bulk load: interactive latency with classes vs one group.
bench-classes: $(B)/lfhttpd
	$(PYTHON) tests/bench/bench_classes.py $(abspath $(B)/lfhttpd) build/bench $(if $(QUICK),--quick)

# The soak (tests/soak/): MINUTES of mixed load with a reload every 30 s and a log reopen
# every minute, resident memory and descriptors sampled every second; verdict, samples and
# plot in build/soak/ (build/soak-asan/ with SANITIZE=asan, the ASan + UBSan binary of
# test-asan, failing on any sanitizer report). Never part of `make test`.
#   make soak                          30 minutes with build/lfhttpd
#   make soak MINUTES=10 SANITIZE=asan
MINUTES  ?= 30
SOAK_PKGS := wrk:wrk gnuplot:gnuplot-nox openssl:openssl $(if $(SANITIZE),clang:clang)
soak-deps:
	@missing=""; \
	for pair in $(SOAK_PKGS); do \
	  cmd=$${pair%%:*}; pkg=$${pair#*:}; \
	  command -v $$cmd >/dev/null 2>&1 || missing="$$missing $$pkg"; \
	done; \
	$(if $(SANITIZE),[ -n "$$(ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.asan-x86_64.a \
	  2>/dev/null)" ] || missing="$$missing libclang-rt-14-dev";) \
	$(call APT_INSTALL,soak tools)

ifeq ($(SANITIZE),asan)
soak: soak-deps
	$(MAKE) --no-print-directory B=build/asan CC=clang CFLAGS="$(SAN_FLAGS)" build/asan/lfhttpd
	$(PYTHON) tests/soak/soak.py --bin build/asan/lfhttpd --sanitize asan \
	  --minutes $(MINUTES) --out build/soak-asan
else ifeq ($(SANITIZE),)
soak: soak-deps $(B)/lfhttpd
	$(PYTHON) tests/soak/soak.py --bin $(B)/lfhttpd --minutes $(MINUTES) --out build/soak
else
soak:
	@echo "make soak: SANITIZE is asan or nothing, not '$(SANITIZE)'"; exit 1
endif

# Real applications behind lfhttpd (tests/apps/), each with its documented nginx
# configuration; run by hand, never part of `make test`. WordPress (Debian's wordpress, its
# files copied) runs on a PHP-FPM pool and a MariaDB server of the test's own, on unix
# sockets in a temporary directory; the same site runs on nginx for comparison. The packages
# are installed as check-deps installs the test tools (a file or command each, and the
# package that brings it).
APP_PKGS := /usr/share/wordpress/wp-login.php:wordpress mariadbd:mariadb-server \
            mariadb-install-db:mariadb-server php-fpm8.2:php8.2-fpm \
            /etc/php/8.2/mods-available/mysqli.ini:php8.2-mysql \
            /etc/php/8.2/mods-available/gd.ini:php8.2-gd nginx:nginx-light
apps-deps:
	@missing=""; \
	for pair in $(APP_PKGS); do \
	  what=$${pair%%:*}; pkg=$${pair#*:}; \
	  case $$what in \
	    /*) [ -e $$what ] ;; \
	    *) command -v $$what >/dev/null 2>&1 || [ -x /usr/sbin/$$what ] ;; \
	  esac || case " $$missing " in *" $$pkg "*) ;; *) missing="$$missing $$pkg" ;; esac; \
	done; \
	$(PYTHON) -c 'import pytest' 2>/dev/null || missing="$$missing python3-pytest"; \
	$(call APT_INSTALL,application test packages)

test-apps: apps-deps $(B)/lfhttpd
	LFHTTPD_BIN=$(abspath $(B)/lfhttpd) $(PYTHON) -m pytest -q -p no:cacheprovider -rs tests/apps

# The benchmark harness (make bench, make bench QUICK=1) lives beside its scripts.
-include tests/bench/bench.mk

clean:
	rm -rf build
