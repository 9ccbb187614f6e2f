# hlobridge: the two commands.
#   make demo  - set everything up, then run the main job on the embedded CPU plugin
#   make test  - set everything up, then run all tests
SHELL := /bin/bash
.DEFAULT_GOAL := help
export INSTA_UPDATE ?= no
export PJRT_DEVICE ?= CPU

.PHONY: help setup demo test test-rust test-tch test-python test-1core test-nodonate test-1core-nodonate soak \
	bench bench-quick bench-criterion bench-real fmt sweep sweep-inductor

help:
	@echo "make help                 # this list"
	@echo "make setup                # venv with the pinned stack, accelerator compilers, the CLI, the Python package (idempotent)"
	@echo "make demo                 # set up and run the main job"
	@echo "make test                 # set up and run all tests (Rust, the tch builds, Python)"
	@echo "make test-rust            # the cargo tests of every default workspace member (profile ci-test)"
	@echo "make test-tch             # the deploy/serve crates' tch feature: tests and example binaries"
	@echo "make test-python          # the pytest suite (-W error)"
	@echo "make test-1core           # all tests pinned to one core (taskset -c 0)"
	@echo "make test-nodonate        # all tests with HLOBRIDGE_GEMM_DONATE=0"
	@echo "make test-1core-nodonate  # pinned to one core, then pinned with HLOBRIDGE_GEMM_DONATE=0"
	@echo "make soak MINUTES=N       # N-minute soak from 4 threads (default 2); -> bench-results/soak.json"
	@echo "make bench                # end-to-end suite (incl. model zoo) -> bench-results/e2e.json, docs/bench/*.png; serve load test"
	@echo "make bench-quick          # a short end-to-end bench -> bench-results/quick"
	@echo "make bench-criterion      # the cargo criterion benches (parse/print, stitch, execute)"
	@echo "make bench-real           # real-size models vs eager and inductor, thread settings (~30 min, quiet machine) -> docs/bench/real/"
	@echo "make sweep                # op sweep: op_db x dtypes, fwd+bwd, vs eager (sharded, resumable; hours) -> docs/op_numerics.md"
	@echo "make sweep-inductor       # the same sweep through inductor (its counts beside ours in the report)"
	@echo "make fmt                  # cargo fmt --all"

setup:
	@scripts/setup.sh

demo: setup
	@scripts/demo.sh

test: setup test-rust test-tch
	HLOBRIDGE_REQUIRE_TCH=1 $(MAKE) --no-print-directory test-python

# The ci-test profile (Cargo.toml) is release without LTO or debug info:
# all test binaries and their dependencies built from scratch in 6 minutes
# on 2 cores, where --release took 13 to rebuild only those downstream of
# bridge/core (a thin-LTO pass per test binary).
# oneDNN's library from the venv (requirements.txt), so that the host
# convolution's oneDNN tests run rather than skip.
test-rust:
	$(if $(wildcard .venv/lib/libdnnl.so.3),HLOBRIDGE_ONEDNN_LIBRARY=$(CURDIR)/.venv/lib/libdnnl.so.3) cargo test --profile ci-test -q

# The deploy crate's `tch` feature, built against the libtorch inside the
# pinned torch wheel (torch-sys compiles its C++ shim: minutes, first time),
# its tests, and the example binaries tests/python/test_export.py
# (deploy_tch: the artifact from Rust) and test_serve.py (serve_client_tch:
# the served model over gRPC from Rust) run.
TORCH_LIB = $(shell .venv/bin/python -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))' 2>/dev/null)
test-tch:
	LIBTORCH_USE_PYTORCH=1 PATH=$(CURDIR)/.venv/bin:$$PATH LD_LIBRARY_PATH=$(TORCH_LIB) \
		cargo test --release -q -p hlobridge-deploy --features tch
	LIBTORCH_USE_PYTORCH=1 PATH=$(CURDIR)/.venv/bin:$$PATH \
		cargo build --release -q -p hlobridge-deploy --features tch --example deploy_tch
	LIBTORCH_USE_PYTORCH=1 PATH=$(CURDIR)/.venv/bin:$$PATH \
		cargo build --release -q -p hlobridge-serve --features tch --example serve_client_tch

# The Python suite runs in HLOBRIDGE_PYTEST_WORKERS pytest-xdist processes
# (default: the cores in the affinity mask, at most 4; nproc follows taskset,
# so test-1core runs one); worksteal keeps the long tests from forming a tail.
HLOBRIDGE_PYTEST_WORKERS ?= $(shell n=$$(nproc); echo $$(( n < 4 ? n : 4 )))
test-python:
	.venv/bin/python -m pytest -q -W error -n $(HLOBRIDGE_PYTEST_WORKERS) --dist worksteal tests/python

# The same suite on one core (the cargo test harness and pytest's workers
# follow the affinity mask), and with host-GEMM work donation off. See
# docs/testing.md.
test-1core: setup
	taskset -c 0 $(MAKE) --no-print-directory test-rust test-python

test-nodonate: setup
	HLOBRIDGE_GEMM_DONATE=0 $(MAKE) --no-print-directory test-rust test-python

test-1core-nodonate: setup
	taskset -c 0 $(MAKE) --no-print-directory test-rust test-python
	HLOBRIDGE_GEMM_DONATE=0 taskset -c 0 $(MAKE) --no-print-directory test-rust test-python

# Not part of `make test`: call_jax, torch.compile, compile_train_step and
# stitching from 4 threads for MINUTES minutes; fails if RSS, open fds or
# the thread count grow past the stated allowance (docs/testing.md).
MINUTES ?= 2
soak: setup
	.venv/bin/python scripts/soak.py --minutes $(MINUTES)

bench: setup
	.venv/bin/python benches/e2e/run.py --docs docs/bench
	.venv/bin/python benches/serve_load.py --json bench-results/serve_load.json
	.venv/bin/python benches/first_call.py --json bench-results/first_call.json
	.venv/bin/pip install -q -r benches/requirements.txt
	.venv/bin/python benches/call_torch_bench.py --json bench-results/call_torch.json --md docs/bench/call_torch.md
	.venv/bin/python benches/dynamic_shapes_bench.py --full --docs docs/bench

bench-quick: setup
	.venv/bin/python benches/e2e/run.py --quick --out bench-results/quick

bench-real: setup
	.venv/bin/python benches/real_size/run.py --docs docs/bench/real $(BENCH_REAL_ARGS)
	.venv/bin/python benches/real_size/threads.py --out docs/bench/real

bench-criterion: setup
	.venv/bin/python tests/tools/gen_big_module.py
	.venv/bin/python tests/tools/gen_big_module.py --layers 12 --out .cache/big/transformer12_train.mlir
	cargo bench -p hlobridge
	cargo bench -p pjrt-client

# Not part of `make test` (its subset is: tests/python/test_op_sweep_subset.py).
# Resumable: rerun to continue. SWEEP_SHARDS shards run one after another at
# low priority; one shard alone: scripts/op_sweep.py --shard 3/8. SWEEP_ARGS
# adds options (e.g. --dtypes float32,int32). Fails on an unlisted failure or
# a stale entry of tests/python/op_expected_failures.toml. docs/op_numerics.md.
SWEEP_SHARDS ?= 8
SWEEP_ARGS ?=
sweep: setup
	for i in $$(seq 0 $$(($(SWEEP_SHARDS) - 1))); do \
		nice -n 19 .venv/bin/python scripts/op_sweep.py --shard $$i/$(SWEEP_SHARDS) --report '' $(SWEEP_ARGS) || exit 1; \
	done
	.venv/bin/python scripts/op_sweep.py --report-only --check

sweep-inductor: setup
	for i in $$(seq 0 $$(($(SWEEP_SHARDS) - 1))); do \
		nice -n 19 .venv/bin/python scripts/op_sweep.py --backend inductor --shard $$i/$(SWEEP_SHARDS) --report '' $(SWEEP_ARGS) || exit 1; \
	done
	.venv/bin/python scripts/op_sweep.py --report-only

fmt:
	cargo fmt --all
