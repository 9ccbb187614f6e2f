//! Writing a command's main output to stdout. A reader that closes the
//! pipe early (`hlobridge inspect --json m.mlir | head`) ends the output
//! quietly, as for other Unix tools, instead of panicking in `println!`.

use crate::error::{CliError, Result};
use std::io::{ErrorKind, Write};

/// Writes `text` to stdout; a closed pipe is not an error.
pub fn write(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != ErrorKind::BrokenPipe => Err(CliError::io("<stdout>", e)),
        _ => Ok(()),
    }
}
