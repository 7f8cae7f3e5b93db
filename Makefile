# Two entry points (README): `make demo` and `make test`. Both create .venv when it is missing.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: demo test test-full venv clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,plot,dist,cuda,sign,images]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/edgeops demo

# CI and `make test`: everything except real-GPU tests, slow suites on their representative subset
test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not gpu" $(PYTEST_ARGS)

# every suite, including the long qemu / CUDA-simulator / soak runs
test-full: $(STAMP)
	EDGEOPS_TEST_FULL=1 $(BIN)/python -m pytest -q -m "not gpu" $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
