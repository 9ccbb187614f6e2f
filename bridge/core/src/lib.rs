//! hlobridge core: an arena-based model of StableHLO/MLIR modules, a lossless
//! text parser and printer, and (later) the stitcher that merges modules from
//! different producers into one program.
//!
//! The crate has no Python and no dynamic-loading dependencies; the runtime
//! lives in `pjrt-client` and the Python glue in `python/`.

pub mod conform;
pub mod dialects;
pub mod error;
pub mod inspect;
pub mod intern;
pub mod ir;
pub mod lower;
pub mod parse;
pub mod print;
pub mod stitch;
pub mod viz;

pub use error::{Error, ParseError, Result, SeamMismatch};
pub use ir::Module;
pub use parse::{parse_module, parse_module_named, parse_type_into};
pub use print::{print_module, PrintOptions};
