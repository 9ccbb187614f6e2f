# hlobridge: the two commands.
#   make demo  - set everything up, then run the main job on the embedded CPU plugin
#   make test  - set everything up, then run all tests
SHELL := /bin/bash
.DEFAULT_GOAL := help
export INSTA_UPDATE ?= no
export PJRT_DEVICE ?= CPU

.PHONY: help setup demo test test-rust test-python bench bench-quick bench-criterion fmt

help:
	@echo "make demo   # set up and run the main job"
	@echo "make test   # set up and run all tests"
	@echo "make bench  # end-to-end benchmark suite -> bench-results/e2e.json, docs/bench/*.png"
	@echo "make bench-criterion  # the cargo criterion benches (parse/print, stitch, execute)"

setup:
	@scripts/setup.sh

demo: setup
	@scripts/demo.sh

test: setup test-rust test-python

test-rust:
	cargo test --release -q

test-python:
	.venv/bin/python -m pytest -q -W error tests/python

bench: setup
	.venv/bin/python benches/e2e/run.py --docs docs/bench

bench-quick: setup
	.venv/bin/python benches/e2e/run.py --quick --out bench-results/quick

bench-criterion: setup
	.venv/bin/python tests/tools/gen_big_module.py
	.venv/bin/python tests/tools/gen_big_module.py --layers 12 --out .cache/big/transformer12_train.mlir
	cargo bench -p hlobridge
	cargo bench -p pjrt-client

fmt:
	cargo fmt --all
