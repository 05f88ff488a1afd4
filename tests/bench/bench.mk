# tests/bench/bench.mk — `make bench`: lfhttpd against nginx, lighttpd and h2o (included by
# the top-level Makefile). Results go to build/bench/ (results.csv, results.md,
# bench.png); the driver is tests/bench/bench.py.
#   make bench            5 rounds of 5 s per workload (about 38 minutes), then the
#                         strategies (about 6 minutes; 11 with the L/F grid, once lfhttpd
#                         knows `groups` and `reactivation`): about 44 (49) minutes in all
#   make bench QUICK=1    2 rounds of 2 s, 1 for the variants (about seven minutes)
#   make bench PIN=1      each load workload also pinned (servers on half the CPUs, the
#                         load generator on the rest), in the same rounds: twice as long
#   make bench BENCH_ARGS="--only small_ka,gzip --rounds 3"
#   make bench-strategies [QUICK=1] [STRATEGY_ARGS="--only small_ka --rounds 5"]
# `make bench` ends with the comparison of concurrency strategies (bench_strategies.py).
# The server is built with release flags into its own folder, apart from build/lfhttpd.

BENCH_OUT   := build/bench
BENCH_OBJ   := build/bench-obj
BENCH_FLAGS := -O2 -DNDEBUG
# command:package pairs; mod_deflate is its own package on Debian. php-fpm8.2 serves the
# PHP workloads, php and php_ka (bench.py run by hand without it skips them and says why).
BENCH_PKGS  := wrk:wrk ab:apache2-utils nginx:nginx-light lighttpd:lighttpd \
               /usr/lib/lighttpd/mod_deflate.so:lighttpd-mod-deflate gnuplot:gnuplot-nox \
               curl:curl h2o:h2o php-fpm8.2:php8.2-fpm

.PHONY: bench bench-strategies bench-deps bench-build bench-clean

bench: bench-deps bench-build build/tests/alloc_counter.so
	$(PYTHON) tests/bench/bench.py --bin $(BENCH_OUT)/lfhttpd --ceiling $(BENCH_OUT)/ceiling --alloc-lib build/tests/alloc_counter.so $(if $(QUICK),--quick) $(if $(PIN),--pin) $(BENCH_ARGS)
	$(PYTHON) tests/bench/bench_strategies.py --bin $(BENCH_OUT)/lfhttpd \
	  --alloc-lib build/tests/alloc_counter.so $(if $(QUICK),--quick)

# Only the comparison of concurrency strategies (Leader/Followers with LIFO or condvar
# promotion, half-sync/half-async, thread-per-connection, and the L/F grid of groups x
# threads per group with oneshot or edge reactivation): build/bench/strategies.*
bench-strategies: bench-deps bench-build build/tests/alloc_counter.so
	$(PYTHON) tests/bench/bench_strategies.py --bin $(BENCH_OUT)/lfhttpd \
	  --alloc-lib build/tests/alloc_counter.so $(if $(QUICK),--quick) $(STRATEGY_ARGS)

# Missing tools are installed when running as root; otherwise the exact command is
# printed and make stops. (nginx and lighttpd are found in /usr/sbin even when it is
# not in PATH.)
bench-deps:
	@missing=""; \
	for pair in $(BENCH_PKGS); do \
	  cmd=$${pair%%:*}; pkg=$${pair#*:}; \
	  if [ "$${cmd#/}" != "$$cmd" ]; then [ -e "$$cmd" ] && continue; \
	  else PATH="$$PATH:/usr/sbin:/sbin" command -v $$cmd >/dev/null 2>&1 && continue; fi; \
	  missing="$$missing $$pkg"; \
	done; \
	$(call APT_INSTALL,benchmark tools)

# Release build in its own folder, then copied where the driver expects it (copy and
# rename: a binary still running from an earlier run cannot be overwritten in place).
bench-build: $(BENCH_OUT)/ceiling
	@$(MAKE) --no-print-directory -j2 B=$(BENCH_OBJ) CFLAGS="$(BENCH_FLAGS)" $(BENCH_OBJ)/lfhttpd
	@mkdir -p $(BENCH_OUT)
	@cp $(BENCH_OBJ)/lfhttpd $(BENCH_OUT)/.lfhttpd.tmp && mv -f $(BENCH_OUT)/.lfhttpd.tmp $(BENCH_OUT)/lfhttpd

# The ceiling (tests/bench/ceiling.c): canned 1 KiB answers, nothing shared between its
# threads; built with the same release flags as lfhttpd.
$(BENCH_OUT)/ceiling: tests/bench/ceiling.c
	@mkdir -p $(BENCH_OUT)
	$(CC) $(BENCH_FLAGS) $(STD) $(WARN) -o $@.tmp $< -pthread && mv -f $@.tmp $@

bench-clean:
	rm -rf $(BENCH_OUT) $(BENCH_OBJ)
