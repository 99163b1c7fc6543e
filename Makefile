# pmm: process memory monitor.
#   make            build the module, the hook library, examples, test programs
#                   (tests/progs/) and benchmark programs (bench/)
#   make test       install what is missing, run the host tests beside the in-guest suite (one VM)
#   make demo       the main job: find a leak, end to end
#   make bench      benchmarks (figures, not pass/fail)
#   make check      linters: include circles, W=1, sparse, checkpatch, ruff, mypy
#   make deb        Debian packages in build/deb/: pmm-dkms, libpmmhook(-dbgsym),
#                   pmm-tools
#   make test-debug the in-guest suite on a KASAN/lockdep/kmemleak/UBSAN kernel
#   make test-kernels
#                   the module on every Debian kernel line (5.10 to sid's), each
#                   with its own compiler, W=1; the kernel-facing guest tests on each

KVER ?= $(shell scripts/kver.sh 2>/dev/null)
export KVER
PY := .venv/bin/python
SUBDIRS := hooklib examples tests/progs bench

.PHONY: all setup kmod userspace test test-host test-vm bench demo check clean \
	debug-kernel test-debug test-kernels install uninstall deb

all: kmod userspace

setup:
	scripts/setup.sh

kmod:
	$(MAKE) -C kmod KVER=$(KVER)

userspace:
	@for d in $(SUBDIRS); do \
		if [ -f $$d/Makefile ]; then $(MAKE) -C $$d || exit 1; fi; \
	done

# the host suite runs beside the VM: it mostly waits on the programs it
# watches, so the two take less than one after the other (the guest runs
# slower meanwhile); -O prints each suite's output whole when it ends
test: setup
	$(MAKE) all
	$(MAKE) check
	$(MAKE) -j2 -O test-host test-vm

test-host:
	$(PY) -m pytest -q -ra tests/host

test-vm: deb
	scripts/vmtest.sh

bench: setup
	$(MAKE) all
	scripts/bench.sh

demo: setup
	$(MAKE) all
	scripts/demo.sh

debug-kernel: setup
	scripts/debug-kernel.sh

test-debug: setup
	scripts/test-debug.sh

test-kernels: setup
	@$(MAKE) -s userspace
	scripts/test-kernels.sh

check: setup
	scripts/include-graph.py
	scripts/import-graph.py
	$(MAKE) -C kmod KVER=$(KVER) check
	.venv/bin/ruff check src pmctl pmd tests bench
	.venv/bin/mypy --strict src/pmm
	.venv/bin/mypy pmctl pmd
	.venv/bin/mypy tests/host
	.venv/bin/mypy tests/guest tests/debug
	.venv/bin/mypy bench

install: all
	scripts/install.sh install

uninstall:
	scripts/install.sh uninstall

deb: setup
	scripts/build-deb.sh

clean:
	$(MAKE) -C kmod KVER=$(KVER) clean
	@for d in $(SUBDIRS); do \
		if [ -f $$d/Makefile ]; then $(MAKE) -C $$d clean; fi; \
	done
	rm -rf build
