//! The table: every `HLOBRIDGE_*` variable the project reads, in Rust,
//! Python, scripts, benches, examples or tests, with its default, meaning
//! and readers. One entry per variable; `docs/configuration.md` is rendered
//! from it ([`crate::render_markdown`]) and a test keeps the two equal.
//!
//! To add a variable: add an entry here, read it through
//! [`crate::get`] and friends (Rust) or the Python package's config module,
//! and regenerate the doc
//! (`cargo run -q -p hlobridge-config --example config_doc > docs/configuration.md`).

use std::fmt;

/// Who reads a variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reader {
    /// The Rust crates (library code: CLI, serve, the Python extension's
    /// Rust half, pjrt-client, core).
    Rust,
    /// The Python package (`python/hlobridge`).
    Python,
    /// Scripts, benches and examples (`scripts/`, `benches/`, `examples/`,
    /// the Makefile).
    Scripts,
    /// Test suites and their tools (`tests/`, crate `tests/`).
    Tests,
}

impl Reader {
    /// The lower-case word (`rust`, `python`, `scripts`, `tests`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Reader::Rust => "rust",
            Reader::Python => "python",
            Reader::Scripts => "scripts",
            Reader::Tests => "tests",
        }
    }
}

impl fmt::Display for Reader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VarInfo {
    /// The variable's name (`HLOBRIDGE_...`).
    pub name: &'static str,
    /// The value (or behaviour) when unset, in words.
    pub default: &'static str,
    /// What it does.
    pub meaning: &'static str,
    /// Who reads it.
    pub read_by: &'static [Reader],
    /// The section of `docs/configuration.md` it is listed in.
    pub section: &'static str,
}

impl VarInfo {
    /// The readers as one string: `rust, tests`.
    pub fn read_by_str(&self) -> String {
        let words: Vec<&str> = self.read_by.iter().map(|r| r.as_str()).collect();
        words.join(", ")
    }
}

macro_rules! variables {
    ($(
        section $section:literal {
            $(
                $variant:ident = $name:literal,
                default $default:literal,
                read_by [$($reader:ident),+],
                $meaning:literal;
            )*
        }
    )*) => {
        /// Every `HLOBRIDGE_*` variable, by name (see [`Var::info`]).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Var {
            $($(
                #[doc = concat!("`", $name, "`: ", $meaning)]
                $variant,
            )*)*
        }

        impl Var {
            /// Every variable, in table order.
            pub const ALL: &'static [Var] = &[$($(Var::$variant,)*)*];

            /// The variable's row of the table.
            pub const fn info(self) -> &'static VarInfo {
                match self {
                    $($(
                        Var::$variant => &VarInfo {
                            name: $name,
                            default: $default,
                            meaning: $meaning,
                            read_by: &[$(Reader::$reader),+],
                            section: $section,
                        },
                    )*)*
                }
            }
        }
    };
}

variables! {
    section "Plugin, runtime and logging" {
        Plugin = "HLOBRIDGE_PLUGIN",
            default "(discovery)",
            read_by [Rust],
            "Path of the PJRT plugin shared library to load. Skips discovery (the `xla_plugins`/`jax_plugins` entry points of the site-packages, `PJRT_NAMES_AND_LIBRARY_PATHS`, `TPU_LIBRARY_PATH`).";
        Python = "HLOBRIDGE_PYTHON",
            default "(none)",
            read_by [Rust],
            "Python interpreter whose site-packages plugin and accelerator discovery searches first (before `VIRTUAL_ENV`, `./.venv` and `python3`).";
        AfterFork = "HLOBRIDGE_AFTER_FORK",
            default "error",
            read_by [Rust],
            "What a forked child does with the PJRT client inherited from its parent: `error` raises `ForkError` on first use, `reinit` leaks the inherited client and creates a fresh one.";
        Log = "HLOBRIDGE_LOG",
            default "warn (CLI), debug (Python extension)",
            read_by [Rust, Tests],
            "`tracing` filter directives for the Rust log events (e.g. `info`, `pjrt_client=trace`). The CLI prints to stderr; the Python extension forwards to Python's `logging` (logger `hlobridge.<target>`), whose own levels then apply.";
        PluginMemoryPool = "HLOBRIDGE_PLUGIN_MEMORY_POOL",
            default "auto",
            read_by [Rust, Tests],
            "Whether the plugin's large host allocations (8 MiB and up: a program's temporary buffer, large results) come from a cache of huge-page blocks that keeps freed blocks for the next execution, instead of glibc, which maps them fresh from the OS on every execution and takes a page fault per 4 KiB page (about 16% of a BERT-base training step on a 2-core Xeon; docs/reliability.md, \"Plugin memory\"): `auto` for the CPU plugin (a plugin file whose name contains `cpu`), `1` (or `true`, `on`, `yes`) for any plugin, `0` (or `false`, `off`, `no`) never. Read when the plugin is loaded.";
        PluginMemoryCacheMb = "HLOBRIDGE_PLUGIN_MEMORY_CACHE_MB",
            default "(a quarter of the machine's memory)",
            read_by [Rust],
            "Most MiB of freed plugin blocks that `HLOBRIDGE_PLUGIN_MEMORY_POOL` keeps for reuse; a block freed beyond it goes back to the OS. `hlobridge.runtime().trim_memory()` returns all of them. Read when the plugin is loaded.";
        SpinUs = "HLOBRIDGE_SPIN_US",
            default "250",
            read_by [Rust],
            "Microseconds the runtime polls for a program's completion (yielding the core) before blocking. Read once per process.";
    }
    section "Compile cache" {
        Cache = "HLOBRIDGE_CACHE",
            default "1",
            read_by [Rust, Tests, Scripts],
            "`0` (or `false`, `off`, `no`) turns the persistent on-disk compile cache off.";
        CacheDir = "HLOBRIDGE_CACHE_DIR",
            default "$XDG_CACHE_HOME/hlobridge/executables, else ~/.cache/hlobridge/executables, else <tmp>/hlobridge-<uid>/executables",
            read_by [Rust, Tests, Scripts],
            "Directory of the persistent compile cache. The test tools also keep their generated files (live corpus, stitch plans, the big module) under it, default `./.cache` there; `tests/python/conftest.py` sets it to a fresh temporary directory.";
        CacheMaxBytes = "HLOBRIDGE_CACHE_MAX_BYTES",
            default "2147483648 (2 GiB)",
            read_by [Rust, Tests],
            "Size limit of the compile cache directory in bytes; the least recently used entries are evicted beyond it.";
        CacheHostId = "HLOBRIDGE_CACHE_HOST_ID",
            default "(detected: CPU vendor, model and ISA flags)",
            read_by [Rust, Tests],
            "Replaces the host identity in every compile-cache key (tests, or a cache shared by machines known to be identical).";
        MemoryCacheEntries = "HLOBRIDGE_MEMORY_CACHE_ENTRIES",
            default "32",
            read_by [Rust],
            "How many recently compiled or fetched programs the in-process memory cache keeps alive beyond those still in use (which it always shares with every caller). Each live program holds memory mappings of its code, and Linux limits a process to `vm.max_map_count` of them, so the cache is bounded. `0` keeps only programs in use. Read once per process.";
    }
    section "Host kernels" {
        HostKernels = "HLOBRIDGE_HOST_KERNELS",
            default "1",
            read_by [Rust, Tests],
            "`0` (or `false`, `off`, `no`) registers no host kernels with the plugin, so no product or convolution is rewritten to them.";
        HostGemm = "HLOBRIDGE_HOST_GEMM",
            default "on",
            read_by [Rust, Tests, Scripts],
            "`off` (or `0`, `false`, `no`) keeps every dot product with XLA; `all` sends every eligible product to the host GEMM kernels whatever its size (for testing the kernels on whole suites). Part of the compile-cache key.";
        HostConv = "HLOBRIDGE_HOST_CONV",
            default "on",
            read_by [Rust, Tests, Scripts],
            "`off` (or `0`, `false`, `no`) keeps every convolution with XLA; `all` sends every eligible convolution to the host kernel whatever its size. Part of the compile-cache key.";
        OneDnnConv = "HLOBRIDGE_ONEDNN_CONV",
            default "1",
            read_by [Rust, Tests, Scripts],
            "`0` (or `false`, `off`, `no`) keeps forward-form f32 convolutions on the host kernel or XLA instead of the CPU plugin's oneDNN convolution (`__onednn$convolution`, docs/host_conv.md); `plain` keeps the route but leaves the calls' activations in their own layouts instead of channels-last (rewrite version 5's routing); `fuse` also folds each channels-last call's epilogue (eval BatchNorm, bias, residual add, ReLU) into its oneDNN post-ops (rewrite version 7; off by default, measured no faster); `HLOBRIDGE_HOST_CONV=off` or `all` turns the oneDNN route off too. Part of the compile-cache key.";
        OneDnnMatmul = "HLOBRIDGE_ONEDNN_MATMUL",
            default "auto",
            read_by [Rust, Tests, Scripts],
            "Whether f32 matrix products of at least 256³ multiply-adds (batches included: attention's) run in the CPU plugin's oneDNN matrix product (`__onednn$matmul`) instead of the host GEMM kernel or XLA's dot (docs/host_gemm.md): `auto` on Intel CPUs (measured 1.1–1.8× faster there, with AVX-512), off on others (not measured); `1` (or `true`, `on`, `yes`) on whatever the CPU; `0` (or `false`, `off`, `no`) off; `all` every f32 product of at least 8 rows and columns, whatever its size (for tests). Programs with oneDNN calls are not written to the disk cache. `HLOBRIDGE_HOST_GEMM=off` turns it off too. Part of the compile-cache key.";
        OneDnnMatmulReorient = "HLOBRIDGE_ONEDNN_MATMUL_REORIENT",
            default "1",
            read_by [Rust, Scripts],
            "`0` (or `false`, `off`, `no`) keeps every oneDNN matrix product in the orientation the program has; by default a product whose right operand is stored `[K, N]` with `N` of at least 2560 (the MLP width of BERT-base, GPT-2, ViT-B) gives oneDNN that operand transposed: by running the product swapped when its left operand is stored transposed (a weight gradient), or, from 128 rows, by splitting it into one call per block of 1024 of the operand's columns (docs/host_gemm.md, \"Orientation\"; oneDNN ran such products at 0.45–0.75× of its speed on Intel). Part of the compile-cache key.";
        DotOperands = "HLOBRIDGE_DOT_OPERANDS",
            default "1",
            read_by [Rust, Scripts],
            "`0` (or `false`, `off`, `no`) leaves the CPU program's matrix products that stay with XLA as the program has them; by default a batched product whose operand torch_xla reshaped to merge its batch dims is given the operand itself, with the transposes and scalar scalings under that reshape folded into the product (docs/host_gemm.md, \"Products left to XLA\"; a GPT-2 decode step's attention stopped copying and transposing its KV caches). Part of the compile-cache key.";
        ReduceStages = "HLOBRIDGE_REDUCE_STAGES",
            default "1",
            read_by [Rust, Tests, Scripts],
            "`0` (or `false`, `off`, `no`) leaves the CPU program's large reductions (sum, max, min) as the program has them; by default each runs in two stages, a reduction over a factor of at most 32 of its largest run of reduced dims, fused with what computes its input, then the rest over a 32× smaller array (docs/host_gemm.md, \"Reductions in two stages\"; XLA:CPU otherwise splits a reduction over a dim longer than 32 into a `reduce-window` that cannot fuse with its producer and is itself slow: batch norm's statistics at ResNet-50's sizes took 4–6× as long). Part of the compile-cache key.";
        OneDnnSoftmax = "HLOBRIDGE_ONEDNN_SOFTMAX",
            default "1",
            read_by [Rust, Tests, Scripts],
            "`0` (or `false`, `off`, `no`) keeps XLA's own softmax instead of the CPU plugin's oneDNN softmax (`__onednn$softmax`): f32 softmaxes of at least 2¹⁷ elements in the form torch_xla and JAX lower them to (max-subtract, exponential, sum, divide along one dim) become one call guarded for eager's NaN rows (docs/host_gemm.md, \"Softmax\"; 4–5× faster than XLA's six kernels at BERT's attention shapes); `all` sends every size (for tests). Programs with oneDNN calls are not written to the disk cache. Part of the compile-cache key.";
        ConvWgrad = "HLOBRIDGE_CONV_WGRAD",
            default "auto",
            read_by [Rust, Tests, Scripts],
            "Where the f32 convolutions of training go: `auto` the host kernel when oneDNN's library is found (`HLOBRIDGE_ONEDNN_LIBRARY`), which runs them on the library: every ungrouped weight gradient XLA's convolution would take, as oneDNN backward-weights convolutions (1.3–2.2× faster than XLA's convolution at ResNet-50's shapes), every strided forward's input gradient, as backward-data ones, and in a training program (one with backward convolutions, or the forward half of one, which returns its convolutions' inputs) every other forward-form convolution too, instead of the plugin's oneDNN thunk (docs/host_conv.md, \"Training convolutions on the library\"); XLA's own convolution and the thunk otherwise; `onednn-gradients` the library for those gradients only, a training program's forward convolutions staying on the thunk; `xla` (or `0`, `false`, `off`, `no`) XLA's own convolution; `host` the host kernel's weight-gradient path for those of at least 256 window taps, found library or not (without it: GEMMs over an im2col of the input, measured slower than XLA inside ResNet-50's training step); `all` also the 1×1 ones that are otherwise batched matrix products. Part of the compile-cache key.";
        OneDnnLibrary = "HLOBRIDGE_ONEDNN_LIBRARY",
            default "(the Python environment's `lib/libdnnl.so.3`)",
            read_by [Rust, Python, Tests],
            "Path of oneDNN's shared library (version 3, the `onednn-cpu-gomp` wheel that `requirements.txt` installs), which the host convolution kernel loads to run weight gradients (and depthwise ones) as oneDNN backward-weights convolutions; `0` (or `false`, `off`, `no`) does without it. Unset: the Python package sets it to `sys.prefix/lib/libdnnl.so.3` when that file exists; a Rust program without it looks in `$VIRTUAL_ENV/lib`. Without the library those convolutions keep XLA's convolution or the host kernel's own loops (docs/host_conv.md, \"oneDNN backward weights\"). The library is loaded once per process; an off word set later makes the kernel skip it from then on.";
        ConvDwWgrad = "HLOBRIDGE_CONV_DW_WGRAD",
            default "rows",
            read_by [Rust, Scripts],
            "Loop order of the host kernel's depthwise weight gradient: `rows` (window row outer, every result element's lanes kept across the window) or `elements` (result element outer, the earlier order; docs/host_conv.md). Read at each call.";
        GemmDonate = "HLOBRIDGE_GEMM_DONATE",
            default "1",
            read_by [Rust, Scripts],
            "`0` (or `false`, `off`, `no`) turns work donation off: threads waiting for a program no longer run chunks of its host GEMM products. Read once per process.";
        GemmKernel = "HLOBRIDGE_GEMM_KERNEL",
            default "gemm",
            read_by [Rust, Scripts],
            "The library that runs host GEMM products (and the products under host convolutions): `gemm` (the `gemm` crate), `matrixmultiply`, or `mkl` (the MKL inside PyTorch's `libtorch_cpu.so`, single-threaded per row chunk, for f32 and f64, when the process has loaded that library and it passes a self-check; the `gemm` crate otherwise); another value is logged and the default used (docs/host_gemm.md). Read once per process.";
    }
    section "Compile targets and accelerators" {
        Targets = "HLOBRIDGE_TARGETS",
            default "(none)",
            read_by [Rust],
            "A TOML file of compile targets merged over the shipped `pjrt-client/targets/targets.toml`.";
        Accel = "HLOBRIDGE_ACCEL",
            default "1",
            read_by [Scripts, Tests],
            "`0` makes `scripts/setup.sh` skip installing the accelerator compilers (libtpu, the CUDA plugin, ptxas) into `.venv/accel`; the deviceless-compile tests then skip instead of failing.";
        AccelDir = "HLOBRIDGE_ACCEL_DIR",
            default "<venv>/accel",
            read_by [Rust],
            "Directory searched first for the accelerator packages (libtpu, the CUDA plugin, the CUDA data dir, the Mosaic GPU runtime), before `<venv>/accel` and the site-packages.";
        CudaPlugin = "HLOBRIDGE_CUDA_PLUGIN",
            default "(searched in the accelerator directories)",
            read_by [Rust, Tests],
            "Path of the CUDA PJRT plugin (`xla_cuda_plugin.so`).";
        CudaDataDir = "HLOBRIDGE_CUDA_DATA_DIR",
            default "(searched in the accelerator directories)",
            read_by [Rust, Tests],
            "CUDA data directory holding `bin/ptxas` and `nvvm/libdevice`, passed to XLA as `--xla_gpu_cuda_data_dir`.";
        MosaicGpuRuntime = "HLOBRIDGE_MOSAIC_GPU_RUNTIME",
            default "(searched in the accelerator directories)",
            read_by [Rust],
            "Path of `libmosaic_gpu_runtime.so`, whose symbols a Pallas Mosaic GPU kernel resolves at compile time.";
        CudaAllocator = "HLOBRIDGE_CUDA_ALLOCATOR",
            default "bfc",
            read_by [Rust, Tests],
            "Device allocator of the CUDA client: `default`, `platform`, `bfc` or `cuda_async`. A bad value is an `InvalidArgument` error naming the variable.";
        CudaMemoryFraction = "HLOBRIDGE_CUDA_MEMORY_FRACTION",
            default "0.75",
            read_by [Rust, Tests],
            "Fraction of the GPU memory the CUDA client may use, in (0, 1].";
        CudaPreallocate = "HLOBRIDGE_CUDA_PREALLOCATE",
            default "0",
            read_by [Rust, Tests],
            "`1` preallocates the memory fraction when the CUDA client starts (hlobridge shares the GPU with torch, so it does not by default).";
        CudaVisibleDevices = "HLOBRIDGE_CUDA_VISIBLE_DEVICES",
            default "(all)",
            read_by [Rust, Tests],
            "Comma-separated CUDA ordinals the CUDA client may use (e.g. `0,1`).";
    }
    section "Python package" {
        PallasAutoInterpret = "HLOBRIDGE_PALLAS_AUTO_INTERPRET",
            default "1",
            read_by [Python, Tests],
            "`0` turns off running Pallas kernels in interpret mode inside hlobridge's CPU lowerings: such a kernel then raises `PallasLoweringError`. Read at each lowering.";
        TorchEngine = "HLOBRIDGE_TORCH_ENGINE",
            default "torch_xla_lazy",
            read_by [Python],
            "The engine that captures the torch side of a whole-step program (only `torch_xla_lazy` today).";
        CoordinatorPort = "HLOBRIDGE_COORDINATOR_PORT",
            default "MASTER_PORT + 1",
            read_by [Python, Tests],
            "Port of the JAX distributed coordinator that `hlobridge.spmd` starts.";
        LocalDevices = "HLOBRIDGE_LOCAL_DEVICES",
            default "1",
            read_by [Python],
            "CPU devices per process in `hlobridge.spmd` (`jax_num_cpu_devices`).";
    }
    section "Scripts, benches and examples" {
        AptPackages = "HLOBRIDGE_APT_PACKAGES",
            default "(none)",
            read_by [Scripts],
            "Space-separated Debian packages `scripts/setup.sh` installs when missing.";
        DemoSeed = "HLOBRIDGE_DEMO_SEED",
            default "0",
            read_by [Scripts, Tests],
            "Seed of the examples (`examples/hybrid_train_step.py`, `examples/whole_step.py`).";
        DemoPlanDir = "HLOBRIDGE_DEMO_PLAN_DIR",
            default "(none)",
            read_by [Scripts],
            "Directory where `examples/hybrid_train_step.py` writes its stitch plan (`scripts/demo.sh` sets it).";
        BenchCache = "HLOBRIDGE_BENCH_CACHE",
            default "./.cache",
            read_by [Scripts],
            "Cache directory of `benches/e2e/run.py`.";
        BenchTrace = "HLOBRIDGE_BENCH_TRACE",
            default "(unset)",
            read_by [Scripts],
            "When set, `benches/compile_backend_bench.py` prints the traceback of a regime that failed.";
        BigModule = "HLOBRIDGE_BIG_MODULE",
            default ".cache/big/transformer24_train.mlir",
            read_by [Scripts],
            "The large module the `parse_print` bench parses and prints.";
        ZooJson = "HLOBRIDGE_ZOO_JSON",
            default "(none)",
            read_by [Tests, Scripts],
            "File the model-zoo tests merge every cell's result into; `scripts/gen_models_table.py` renders `docs/models.md` from it.";
    }
    section "Tests" {
        TestSeed = "HLOBRIDGE_TEST_SEED",
            default "(random; the zoo: 20240917)",
            read_by [Tests],
            "Seed of the randomized Python tests; every failure message prints the seed it used, and setting it replays that run.";
        StitchSeed = "HLOBRIDGE_STITCH_SEED",
            default "(random)",
            read_by [Tests],
            "Base seed of `tests/python/test_stitch_equivalence.py`.";
        LiveSeed = "HLOBRIDGE_LIVE_SEED",
            default "(random)",
            read_by [Tests],
            "Seed of the live jax/torch programs `tests/python/live_programs.py` generates.";
        LiveForce = "HLOBRIDGE_LIVE_FORCE",
            default "0",
            read_by [Tests],
            "`1` regenerates the live programs with new shapes and seeds.";
        SkipLive = "HLOBRIDGE_SKIP_LIVE",
            default "0",
            read_by [Tests],
            "`1`: do not generate the live jax/torch modules at test collection time.";
        Corpus = "HLOBRIDGE_CORPUS",
            default "../shared/corpus",
            read_by [Tests],
            "Directory of the StableHLO corpus the lossless and stitch tests read.";
        CorpusSample = "HLOBRIDGE_CORPUS_SAMPLE",
            default "0 (every file)",
            read_by [Tests],
            "Check only every k-th corpus file so that about this many remain (quick runs).";
        Shared = "HLOBRIDGE_SHARED",
            default "../shared",
            read_by [Tests],
            "Shared data directory (with `corpus/`) of the CLI's Rust tests.";
        Bin = "HLOBRIDGE_BIN",
            default ".venv/bin/hlobridge, else target/release/hlobridge",
            read_by [Tests],
            "The `hlobridge` binary the Python tests run.";
        BinTimeout = "HLOBRIDGE_BIN_TIMEOUT",
            default "120",
            read_by [Tests],
            "Seconds the Python test harness waits for one `hlobridge` binary call.";
        RequireBin = "HLOBRIDGE_REQUIRE_BIN",
            default "0",
            read_by [Tests],
            "`1`: fail instead of skip when no `hlobridge` binary is found (implied by `CI=true`).";
        RequireTch = "HLOBRIDGE_REQUIRE_TCH",
            default "0",
            read_by [Tests, Scripts],
            "`1`: the export and serve tests fail instead of skip when the tch-based Rust binaries were not built (`make test` sets it).";
        TestWorkers = "HLOBRIDGE_TEST_WORKERS",
            default "min(2, cores in the affinity mask)",
            read_by [Tests],
            "Worker processes of the Python test harness.";
        PytestWorkers = "HLOBRIDGE_PYTEST_WORKERS",
            default "min(4, cores in the affinity mask)",
            read_by [Scripts],
            "pytest-xdist worker processes that `make test-python` runs the Python suite in (`--dist worksteal`); `0` runs it in pytest's own process (docs/testing.md).";
        FakePretty = "HLOBRIDGE_FAKE_PRETTY",
            default "(unset)",
            read_by [Tests],
            "`mlir`: the fake binary `tests/tools/fake_hlobridge.py` prints with MLIR's own pretty printer.";
        FakeValidate = "HLOBRIDGE_FAKE_VALIDATE",
            default "0",
            read_by [Tests],
            "`1`: the fake binary first rejects what MLIR rejects.";
        GpuRequired = "HLOBRIDGE_GPU_REQUIRED",
            default "0",
            read_by [Tests],
            "`1`: the CUDA tests fail instead of skip without a GPU (`tests/gpu/run.sh` sets it).";
        GpuSetup = "HLOBRIDGE_GPU_SETUP",
            default "1",
            read_by [Tests],
            "`0`: `tests/gpu/run.sh` does not run `scripts/setup.sh` when hlobridge does not import.";
        UpdateSnapshots = "HLOBRIDGE_UPDATE_SNAPSHOTS",
            default "0",
            read_by [Tests],
            "`1` rewrites the Pallas structural snapshots in `tests/python/snapshots/`.";
        Zoo = "HLOBRIDGE_ZOO",
            default "(unset)",
            read_by [Tests],
            "`all` also runs the model-zoo cells held out of `make test`.";
        MutationSecs = "HLOBRIDGE_MUTATION_SECS",
            default "20",
            read_by [Tests],
            "Time budget in seconds of the parser's mutation test (`bridge/core/tests/mutation.rs`).";
    }
}

impl Var {
    /// The variable's name (`HLOBRIDGE_...`).
    pub const fn name(self) -> &'static str {
        self.info().name
    }

    /// The variable named `name`, if it is in the table.
    pub fn from_name(name: &str) -> Option<Var> {
        Var::ALL.iter().copied().find(|v| v.name() == name)
    }
}

impl fmt::Display for Var {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
