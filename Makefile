# `make demo` runs the example; `make test` runs the tests. Both install what they need.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# What the demo needs: the package alone (no dev tools, no plotting library, no tsc).
CORE_STAMP := $(VENV)/.installed-core
TSC := node_modules/.bin/tsc
TS_BUNDLE := sandbox/typescript.bundle.js

.PHONY: install system-deps seccomp-dep test check demo bench bench-quick clean

install: $(STAMP) $(TSC) $(TS_BUNDLE)

# libseccomp.so.2 is loaded by pyseccomp through ctypes; it is a system library.
seccomp-dep:
	@if ! ldconfig -p 2>/dev/null | grep -q 'libseccomp\.so\.2'; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing libseccomp2 with apt-get"; \
	    (apt-get install -y libseccomp2 || (apt-get update && apt-get install -y libseccomp2)); \
	  else \
	    echo "libseccomp.so.2 is missing: install it with your package manager" \
	         "(Debian/Ubuntu: sudo apt-get install libseccomp2; Fedora: sudo dnf install libseccomp)"; \
	    exit 1; \
	  fi; \
	fi

system-deps: seccomp-dep
	@# openssl makes the self-signed certificates the runner service's TLS tests use.
	@if ! command -v openssl >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get install -y openssl || (apt-get update && apt-get install -y openssl)); \
	  else echo "openssl is missing: install it (Debian/Ubuntu: sudo apt-get install openssl)"; exit 1; fi; \
	fi

	@# The PostgreSQL server: the store tests start a throwaway cluster of their own with it.
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing postgresql with apt-get"; \
	    (apt-get install -y postgresql || (apt-get update && apt-get install -y postgresql)); \
	  else echo "PostgreSQL's server is missing: install it (Debian/Ubuntu: sudo apt-get install postgresql)"; exit 1; fi; \
	fi

$(STAMP): pyproject.toml | system-deps
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	touch $(STAMP) $(CORE_STAMP)

# The demo's lean install: the package and its runtime dependencies only.
$(CORE_STAMP): pyproject.toml | seccomp-dep
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	touch $(CORE_STAMP)

# The TypeScript compiler (TypeScript 7, a native binary) checks each script against the tools'
# declarations before its first call, and the tests check the declarations with it.
$(TSC): package.json
	@if ! command -v npm >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get install -y nodejs npm || (apt-get update && apt-get install -y nodejs npm)); \
	  else echo "npm is missing: install Node.js (Debian/Ubuntu: sudo apt-get install nodejs npm)"; exit 1; fi; \
	fi
	npm install --no-audit --no-fund --silent
	touch $(TSC)

# Sucrase (from node_modules, MIT), bundled with sandbox/typescript.js into one file the
# sandbox compiles once per fork server to remove a script's TypeScript types. Committed, with
# the licenses of the packages in it beside it, so that every install strips types (`make
# demo`'s, which has no Node.js, and a wheel's); rebuilt here from package-lock.json's
# versions, which gives the same bytes. tests/sandbox/test_typescript.py builds it again
# (`make TS_BUNDLE=elsewhere elsewhere`) and checks the committed files are that build.
$(TS_BUNDLE): sandbox/typescript.js $(TSC)
	node_modules/.bin/esbuild sandbox/typescript.js --bundle --minify --format=iife \
	  --platform=neutral --main-fields=main,module --log-level=warning --outfile=$@ \
	  --metafile=$@.meta.json
	$(PYTHON) scripts/bundle_licenses.py $@.meta.json $@.LICENSE.txt
	rm -f $@.meta.json

# The suite starts hundreds of Python processes (CLIs, servers, workers): where the
# environment sets PYTHONDONTWRITEBYTECODE (this machine's does), each would compile the
# engine's source again (0.25 s of CPU a process here) and each pytest worker rewrite every
# test module's asserts again (10 s each). Caching bytecode is Python's default.
test: install
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q

check: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# Needs only the lean install: scripts run without the type check when tsc is absent.
demo: $(CORE_STAMP)
	$(PY) -m engine.cli run examples/stale_prs.js --tools examples/tracker_tools.py

bench: install
	$(PY) -m bench

bench-quick: install
	$(PY) -m bench --quick

# Not $(TS_BUNDLE): it is committed, and a lean install (make demo's, no npm) cannot rebuild it.
clean:
	rm -rf $(VENV) node_modules .mypy_cache .ruff_cache .pytest_cache
