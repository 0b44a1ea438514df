# `make demo` and `make test` create .venv if it is missing, then do their job.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO := runs/demo

.PHONY: demo test docs venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.14.1 torchvision==0.29.1
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q

# The generated docs: the command reference from the Typer app, and the benchmarks' figures from
# benchmarks/results/*.json. tests/test_docs.py fails when they are out of date.
docs: $(STAMP)
	$(BIN)/typer omnitune.cli.commands utils docs --name omnitune --output docs/commands.md
	$(BIN)/python -m benchmarks.summary
	$(BIN)/python -m benchmarks.docs

demo: $(STAMP)
	$(BIN)/omnitune profile --workload teacher-mlp --out profiles/demo.json
	$(BIN)/omnitune plan --profile profiles/demo.json --workload teacher-mlp --target-accuracy 0.95 --out $(DEMO)/plan.json
	$(BIN)/omnitune run $(DEMO)/plan.json --out-dir $(DEMO)
	@echo "Results: profiles/demo.json, $(DEMO)/plan.json, $(DEMO)/summary.json, $(DEMO)/metrics.jsonl"

clean:
	rm -rf $(VENV) runs
