//! The CLI's single error type. Every message is what the command prints
//! on stderr before exiting (status 1; `compile`'s out-of-memory: 2).

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A file (or `<stdin>`/`<stdout>`) could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file, as given.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Module text, a stitch plan or a list file that does not parse.
    #[error("{0}")]
    Parse(String),
    /// A bad argument or input file (`--input`, `--xla-option`, `.npy`,
    /// bindings, suite layout).
    #[error("{0}")]
    Input(String),
    /// Loading the PJRT plugin or creating its client.
    #[error("{0}")]
    Plugin(String),
    /// The compile service refused the program.
    #[error("{}", compile_message(.0))]
    Compile(#[from] hlobridge_compile::CompileError),
    /// Running the program or copying its outputs.
    #[error("{0}")]
    Run(String),
    /// A result that does not match its expectation (conform checks).
    #[error("{0}")]
    Mismatch(String),
    /// Stitching a plan.
    #[error("{0}")]
    Stitch(String),
    /// Drawing a graph (Graphviz).
    #[error("{0}")]
    Render(String),
    /// `hlobridge serve` stopped with an error.
    #[error("hlobridge serve: {0}")]
    Serve(String),
    /// A named error of `compile --target` (`UnknownTarget`,
    /// `AcceleratorNotInstalled`, `OutOfMemory`: their messages lead with
    /// the name).
    #[error("{0}")]
    Target(pjrt_client::Error),
    /// `compile --target`: the compiler rejected the program for another
    /// reason, or the input could not be read.
    #[error("CompileFailed: {0}")]
    CompileFailed(String),
}

fn compile_message(e: &hlobridge_compile::CompileError) -> String {
    match e {
        hlobridge_compile::CompileError::Pjrt(e) => format!("compile error: {e}"),
        e => e.to_string(),
    }
}

impl CliError {
    /// `path: source` for an I/O error.
    pub(crate) fn io(path: impl std::fmt::Display, source: std::io::Error) -> Self {
        CliError::Io {
            path: path.to_string(),
            source,
        }
    }

    /// Process exit status: 2 for out-of-memory, else 1.
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            CliError::Target(pjrt_client::Error::OutOfMemory { .. }) => 2,
            _ => 1,
        }
    }

    /// `compile --target`'s reading of a target-compile error: a named
    /// one as it is, any other as `CompileFailed`.
    pub(crate) fn target(e: pjrt_client::Error) -> Self {
        use pjrt_client::Error as E;
        match e {
            E::UnknownTarget(_) | E::AcceleratorNotInstalled { .. } | E::OutOfMemory { .. } => {
                CliError::Target(e)
            }
            e => CliError::CompileFailed(e.to_string()),
        }
    }
}

/// Result alias for the CLI.
pub(crate) type Result<T, E = CliError> = std::result::Result<T, E>;
