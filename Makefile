# Developer entry points. The Python environment lives in .venv; the extension is built into it
# with maturin and rebuilt only when Rust sources, Cargo files or pyproject.toml change.

PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
# maturin develop installs into the environment named by VIRTUAL_ENV.
MATURIN := VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin
MATURIN_FLAGS ?= --release
DEMO_FLAGS ?=

DEPS_STAMP := $(VENV)/.deps-stamp
BUILD_STAMP := $(VENV)/.build-stamp
RUST_INPUTS := Cargo.toml Cargo.lock $(shell find crates -name '*.rs' -o -name '*.toml' 2>/dev/null)

.PHONY: env demo test test-py lint fuzz bench bench-pgo pgo clean browser valgrind vm workloads clang

env: $(BUILD_STAMP) valgrind vm workloads clang

# Valgrind runs the programs `tiersim capture` traces (and its tests); its header
# valgrind/valgrind.h (in Debian's valgrind package) builds the capture's preload shim, and its
# tool headers (pub_tool_*.h) and libcoregrind/libvex archives, in the same package, build
# tiersim's own Valgrind tool. Installed from Debian only when any is missing, with sudo only when
# not root.
valgrind:
	@{ command -v valgrind && echo '#include <valgrind/valgrind.h>' | $${CC:-cc} -E -x c - -o /dev/null \
		&& test -f /usr/include/valgrind/pub_tool_basics.h \
		&& ls /usr/lib/*/valgrind/libcoregrind-*.a /usr/lib/valgrind/libcoregrind-*.a 2>/dev/null | grep -q .; } >/dev/null 2>&1 || { \
		SUDO=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
		$$SUDO apt-get update -q && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q valgrind; }
	@# QEMU user mode runs them with tiersim's plugin (`tiersim capture --valgrind-tool qemu`).
	@command -v qemu-x86_64 >/dev/null 2>&1 || { \
		SUDO=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
		$$SUDO apt-get update -q && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends qemu-user; }

# clang and lld build programs for the instrumented path with LTO, which inlines the tracing
# runtime's per-access path into them (`tiersim capture --build-runtime --lto`, docs/capture.md).
# Installed from Debian only when missing, with sudo only when not root.
clang:
	@{ command -v clang && command -v ld.lld; } >/dev/null 2>&1 || { \
		SUDO=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
		$$SUDO apt-get update -q && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends clang lld; }

# `tiersim validate linux` boots Debian's 6.1 kernel in QEMU (docs/validate.md): QEMU, the static
# busybox for the guest's shell, ndctl/daxctl for the dax/kmem slow node, and the kernel image with
# its modules unpacked (not installed on the host) into VM_DIR, where tiersim looks for it. All
# from Debian's archive, installed only when missing; sudo only when not root.
VM_DIR ?= $(or $(TIERSIM_VM_DIR),$(HOME)/.cache/tiersim/vm)
vm:
	@{ command -v qemu-system-x86_64 && test -x /bin/busybox && command -v ndctl && command -v daxctl; } >/dev/null 2>&1 || { \
		SUDO=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
		$$SUDO apt-get update -q && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
			qemu-system-x86 busybox-static ndctl daxctl; }
	@ls $(VM_DIR)/linux/boot/vmlinuz-6.1.* >/dev/null 2>&1 || { \
		set -e; pkg=$$(apt-cache depends linux-image-amd64 | sed -n 's/.*Depends: \(linux-image-6\.1\.[^ ]*\)$$/\1/p' | head -1); \
		test -n "$$pkg" || { echo "make vm: no linux-image-6.1 package behind linux-image-amd64"; exit 1; }; \
		mkdir -p $(VM_DIR)/deb && cd $(VM_DIR)/deb && apt-get download -q $$pkg && \
		rm -rf $(VM_DIR)/linux.tmp && dpkg -x $${pkg}_*.deb $(VM_DIR)/linux.tmp && \
		rm -rf $(VM_DIR)/linux && mv $(VM_DIR)/linux.tmp $(VM_DIR)/linux && rm -f $${pkg}_*.deb; }

# The real programs `tiersim workload` captures (docs/workloads.md, "Real programs"): WiredTiger's
# library and headers for our driver, redis-server and redis-benchmark, RocksDB's db_bench,
# memcached and its load generator memcslap. Installed from Debian only when one is missing, with
# sudo only when not root.
WORKLOAD_PKGS := libwiredtiger-dev wiredtiger redis-server redis-tools rocksdb-tools memcached libmemcached-tools
workloads:
	@{ [ -e /usr/include/wiredtiger.h ] && command -v wt && command -v redis-server && command -v redis-benchmark \
		&& command -v db_bench && command -v memcached && command -v memcslap; } >/dev/null 2>&1 || { \
		SUDO=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
		$$SUDO apt-get update -q && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(WORKLOAD_PKGS); }

$(VPY):
	$(PYTHON) -m venv $(VENV)

# Tools and the project's runtime + test dependencies, read from pyproject.toml so the list
# is written in one place.
$(DEPS_STAMP): pyproject.toml | $(VPY)
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet maturin
	$(VPY) -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; print("\n".join(p["dependencies"] + p["optional-dependencies"]["test"]))' > $(VENV)/requirements.txt
	$(VPY) -m pip install --quiet -r $(VENV)/requirements.txt
	touch $@

$(BUILD_STAMP): $(DEPS_STAMP) $(RUST_INPUTS) pyproject.toml
	$(MATURIN) develop $(MATURIN_FLAGS)
	touch $@

demo: env
	$(VENV)/bin/tiersim demo $(DEMO_FLAGS)

test: env browser lint
	cargo test --workspace --exclude tiersim-py
	$(VPY) -m pytest

# The habits CI holds: rustfmt (rustfmt.toml), clippy with warnings as errors, ruff's lint and
# format on the Python, and mypy --strict on the tiersim package (pyproject.toml [tool.mypy]).
lint: $(DEPS_STAMP)
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings
	$(VENV)/bin/ruff check python tests tools
	$(VENV)/bin/ruff format --check python tests tools
	$(VENV)/bin/mypy

# Headless Chromium from Debian, for the test that opens report.html in a real browser. Installed
# only when missing; sudo only when not already root.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
		SUDO=$$( [ "$$(id -u)" -eq 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium; }

# Only the Python suite, against the current build.
test-py: env browser
	$(VPY) -m pytest

# The fuzz suite with 20x the CI case counts (same seeds, so CI's cases are a prefix), each
# Rust test binary under a 4 GiB address-space limit. docs/reliability.md has the figures.
FUZZ_CASES ?= 10000
fuzz: env
	TIERSIM_FUZZ_CASES=$(FUZZ_CASES) prlimit --as=4294967296 -- cargo test --release -p tiersim-trace --test integrity --test fuzz_text -- --nocapture
	TIERSIM_FUZZ_CASES=$(FUZZ_CASES) prlimit --as=4294967296 -- cargo test --release -p tiersim-engine --test fuzz_config -- --nocapture
	TIERSIM_FUZZ_CASES_PY=500 $(VPY) -m pytest -q tests/test_fuzz_cli.py

BENCH_CRATES := -p tiersim-trace -p tiersim-devices -p tiersim-engine
bench:
	cargo bench $(BENCH_CRATES)

# A profile-guided build (tools/pgo.sh; about 10 % faster on the CXL-flash replay, BENCHMARKS.md
# "Profile-guided builds"). Needs the toolchain's LLVM tools: `rustup component add llvm-tools`.
# The profile is trained again whenever a Rust source changes.
PGO_PROFILE := target/pgo/tiersim.profdata
$(PGO_PROFILE): $(DEPS_STAMP) $(RUST_INPUTS) tools/pgo.sh tools/pgo_train.py
	tools/pgo.sh profile

# The extension built with the profile, into .venv: `tiersim` and `import tiersim` use it until
# a Rust source changes, when the next make target rebuilds it plainly.
pgo: $(PGO_PROFILE)
	tools/pgo.sh python
	touch $(BUILD_STAMP)

bench-pgo: $(PGO_PROFILE)
	tools/pgo.sh bench $(BENCH_CRATES)

clean:
	cargo clean
	rm -rf $(VENV) .pytest_cache
	rm -f python/tiersim/_native*.so
	find python tests -name __pycache__ -type d -prune -exec rm -rf {} +
