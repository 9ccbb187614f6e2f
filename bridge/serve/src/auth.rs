//! Bearer-token authentication: the token is read from a file at startup;
//! every Predict/Metadata call must carry `authorization: Bearer <token>`,
//! compared in constant time. The health service stays open.

use crate::error::ServeError;
use std::path::Path;
use tonic::{Request, Status};

/// A bearer token.
#[derive(Clone)]
pub struct Token(Vec<u8>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

impl Token {
    /// Reads the token (surrounding whitespace trimmed; at least 16 bytes).
    pub fn from_file(path: &Path) -> Result<Token, ServeError> {
        let raw = std::fs::read(path).map_err(|source| ServeError::Io {
            context: format!("reading the token file {}", path.display()),
            source,
        })?;
        let t = String::from_utf8(raw)
            .map_err(|_| ServeError::Config("the token file is not UTF-8".into()))?;
        Token::new(t.trim())
    }

    /// A token from a string (at least 16 bytes, printable ASCII).
    pub fn new(t: &str) -> Result<Token, ServeError> {
        if t.len() < 16 || !t.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ServeError::Config(
                "the token must be at least 16 printable ASCII characters".into(),
            ));
        }
        Ok(Token(t.as_bytes().to_vec()))
    }

    /// Whether `candidate` equals the token; the time taken does not depend
    /// on where they differ.
    pub fn matches(&self, candidate: &[u8]) -> bool {
        constant_time_eq(&self.0, candidate)
    }

    /// Checks a request's `authorization` header.
    #[allow(clippy::result_large_err)]
    pub fn check<T>(&self, req: Request<T>) -> Result<Request<T>, Status> {
        let ok = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
            .is_some_and(|t| self.matches(t));
        if ok {
            Ok(req)
        } else {
            Err(Status::unauthenticated("missing or wrong bearer token"))
        }
    }
}

/// Constant-time equality (only the lengths leak).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut d = 0u8;
    for (x, y) in a.iter().zip(b) {
        d |= x ^ y;
    }
    // Keep the compiler from short-circuiting the loop.
    std::hint::black_box(d) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_whole_tokens() {
        let t = Token::new("0123456789abcdef").unwrap();
        assert!(t.matches(b"0123456789abcdef"));
        assert!(!t.matches(b"0123456789abcdeF"));
        assert!(!t.matches(b"0123456789abcde"));
        assert!(!t.matches(b""));
        assert!(Token::new("short").is_err());
        assert!(Token::new("0123456789 abcdef").is_err());
    }
}
