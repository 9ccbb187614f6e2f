//! The crate's one error type, and parse errors that render `file:line:col`
//! with the offending source line and a caret.

use std::fmt;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every error the `hlobridge` core can report.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Malformed module text.
    #[error("{0}")]
    Parse(#[from] ParseError),
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file involved.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The IR is structurally invalid for the requested operation.
    #[error("invalid IR: {0}")]
    Invalid(String),
    /// A stitch plan is malformed (bad file, duplicate or unknown names,
    /// wrong port counts).
    #[error("stitch plan: {0}")]
    Plan(String),
    /// A seam joins ports of different types.
    #[error("{0}")]
    SeamMismatch(Box<SeamMismatch>),
    /// Handles form a cycle.
    #[error("stitch plan has a cycle: {0}")]
    Cycle(String),
    /// Two segments disagree on a module-level setting or a mesh.
    #[error("conflict: {0}")]
    Conflict(String),
    /// A requested input-output alias does not fit the stitched program
    /// (index out of range, types differ, an input or output aliased twice,
    /// a donated input).
    #[error("input-output alias: {0}")]
    Alias(String),
    /// A collective cannot be rewritten for the devices a program runs on
    /// (`lower::collectives`).
    #[error("collective: {0}")]
    Collective(String),
    /// A shape assertion of a dynamic module does not hold for the shapes
    /// it is refined to (`refine`).
    #[error("{at}: shape assertion failed: {dimension} must satisfy {constraint}: {message}")]
    ShapeAssertion {
        /// Where: `file:line:col: op in @func` (or `op in @func`).
        at: String,
        /// The dimension (variable or `args[i].shape[k]`) it constrains.
        dimension: String,
        /// The constraint that failed.
        constraint: String,
        /// The assertion's message with its placeholders filled in.
        message: String,
    },
    /// A dynamic module cannot be specialised to the given shapes
    /// (`refine`): wrong argument shapes, a shape that does not fold to a
    /// constant, conflicting shapes, an unsupported op.
    #[error("{at}: shape refinement: {message}")]
    ShapeRefinement {
        /// Where: `file:line:col: op in @func` (or `op in @func`).
        at: String,
        /// What went wrong.
        message: String,
    },
}

/// The two sides of a seam whose types differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeamMismatch {
    /// The handle.
    pub handle: String,
    /// Producing segment (or `program input`).
    pub producer: String,
    /// Producing port.
    pub producer_port: String,
    /// Its type.
    pub producer_type: String,
    /// Consuming segment.
    pub consumer: String,
    /// Consuming port.
    pub consumer_port: String,
    /// The type it expects.
    pub consumer_type: String,
}

impl fmt::Display for SeamMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seam type mismatch at handle '{}': {} {} has type {}, but {} {} expects {}",
            self.handle,
            self.producer,
            self.producer_port,
            self.producer_type,
            self.consumer,
            self.consumer_port,
            self.consumer_type
        )
    }
}

/// A parse failure with its location in the source text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// Name of the file (or `<input>`).
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column, counted in characters.
    pub col: u32,
    /// What went wrong.
    pub message: String,
    /// The offending line (or a window of it when it is very long).
    pub source_line: String,
    /// Character index of the caret within `source_line`.
    pub caret: usize,
}

/// Lines longer than this are shown as a window around the caret.
const MAX_SHOWN_LINE: usize = 200;

impl ParseError {
    /// Build an error for byte offset `offset` in `src`.
    pub fn at(file: &str, src: &[u8], offset: usize, message: impl Into<String>) -> Self {
        let offset = offset.min(src.len());
        let line_start = src[..offset]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |p| p + 1);
        let line_end = src[offset..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(src.len(), |p| offset + p);
        let line = src[..line_start].iter().filter(|&&b| b == b'\n').count() as u32 + 1;
        let col = String::from_utf8_lossy(&src[line_start..offset])
            .chars()
            .count();
        let full: Vec<char> = String::from_utf8_lossy(&src[line_start..line_end])
            .trim_end_matches('\r')
            .chars()
            .collect();
        let (source_line, caret) = if full.len() > MAX_SHOWN_LINE {
            let lo = col.saturating_sub(MAX_SHOWN_LINE / 2);
            let hi = (lo + MAX_SHOWN_LINE).min(full.len());
            let window: String = full[lo..hi].iter().collect();
            let prefix = if lo > 0 { "..." } else { "" };
            (format!("{prefix}{window}"), col - lo + prefix.len())
        } else {
            (full.iter().collect(), col)
        };
        ParseError {
            file: file.to_string(),
            line,
            col: col as u32 + 1,
            message: message.into(),
            source_line,
            caret,
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Tabs keep their width in the caret line so the caret lines up.
        let pad: String = self
            .source_line
            .chars()
            .take(self.caret)
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        write!(
            f,
            "{}:{}:{}: error: {}\n{}\n{}^",
            self.file, self.line, self.col, self.message, self.source_line, pad
        )
    }
}

impl std::error::Error for ParseError {}
