# The commands the README gives. `make test` and `make demo` create .venv when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo demo-counting test test-slow bench clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m vlrl.demo --config configs/demo/refcoco.yaml

demo-counting: $(STAMP)
	$(BIN)/python -m vlrl.demo --config configs/demo/counting.yaml

test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

bench: $(STAMP)
	$(BIN)/python bench/step_vs_trl.py
	$(BIN)/python bench/ap_vs_pycocotools.py

clean:
	rm -rf runs data/synthetic .cache
