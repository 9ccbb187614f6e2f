//! hlobridge core: an arena-based model of StableHLO/MLIR modules
//! ([`ir`]), a lossless text parser ([`parse`]) and printer ([`print`]), the
//! stitcher that merges modules from different producers into one program
//! ([`stitch`]), the target-specific rewrites applied just before compiling
//! ([`lower`]: host GEMM/convolution calls, collectives), the differential
//! conformance runner's pure parts ([`conform`]), graph views ([`viz`]), and
//! shape refinement of dynamic modules to concrete shapes ([`refine`]).
//!
//! The crate has no Python and no dynamic-loading dependencies; the runtime
//! lives in `pjrt-client`, compiling a module for a plugin in
//! `hlobridge-compile` (`bridge/compile`), and the Python glue in `python/`.
//! ARCHITECTURE.md at the repository root has the whole map.

pub mod conform;
pub mod dialects;
pub mod error;
pub mod inspect;
pub mod intern;
pub mod ir;
pub mod lower;
pub mod parse;
pub mod print;
pub mod refine;
pub mod stitch;
pub mod viz;

pub use error::{Error, ParseError, Result, SeamMismatch};
pub use ir::Module;
pub use parse::{parse_module, parse_module_named, parse_type_into};
pub use print::{print_module, PrintOptions};
