//! Byte-level scanning primitives shared by the type, attribute and op
//! parsers: whitespace and comments, identifiers, numbers, strings and
//! balanced-bracket skipping. Everything works on `&[u8]` without
//! allocating.

/// Result type of parser internals; errors carry a byte offset until they
/// are rendered.
pub type PResult<T> = Result<T, RawError>;

/// An error at a byte offset, rendered into a [`ParseError`] at the end.
#[derive(Debug, Clone)]
pub struct RawError {
    /// Byte offset into the source.
    pub pos: usize,
    /// Message.
    pub msg: String,
}

/// Deepest nesting of regions, attributes and types accepted.
pub const MAX_DEPTH: u32 = 256;

/// A position in the source with scanning helpers.
pub struct Cursor<'s> {
    /// The source text.
    pub text: &'s str,
    /// The source bytes.
    pub src: &'s [u8],
    /// Current byte offset.
    pub pos: usize,
    /// Current nesting depth (guards against stack overflow).
    pub depth: u32,
}

#[inline]
pub(crate) fn is_id_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

#[inline]
pub(crate) fn is_id_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b == b'.'
}

#[inline]
pub(crate) fn is_suffix_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'$' | b'.' | b'-')
}

impl<'s> Cursor<'s> {
    /// A cursor at the start of `src`.
    pub fn new(text: &'s str) -> Self {
        Cursor {
            text,
            src: text.as_bytes(),
            pos: 0,
            depth: 0,
        }
    }

    /// The source text between two byte offsets. Every offset the
    /// scanners produce sits next to an ASCII delimiter, so it is a char
    /// boundary; anything else yields "".
    #[inline]
    pub fn slice(&self, start: usize, end: usize) -> &'s str {
        self.text.get(start..end).unwrap_or("")
    }

    /// An error at the current position.
    #[cold]
    pub fn err<T>(&self, msg: impl Into<String>) -> PResult<T> {
        Err(RawError {
            pos: self.pos,
            msg: msg.into(),
        })
    }

    /// An error at `pos`.
    #[cold]
    pub fn err_at<T>(&self, pos: usize, msg: impl Into<String>) -> PResult<T> {
        Err(RawError {
            pos,
            msg: msg.into(),
        })
    }

    /// Enter one nesting level; errors past [`MAX_DEPTH`].
    #[inline]
    pub fn enter(&mut self) -> PResult<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return self.err(format!("nesting deeper than {MAX_DEPTH} levels"));
        }
        Ok(())
    }

    /// Leave one nesting level.
    #[inline]
    pub fn leave(&mut self) {
        self.depth -= 1;
    }

    /// Skip whitespace and `//` comments.
    #[inline]
    pub fn ws(&mut self) {
        let src = self.src;
        let mut p = self.pos;
        loop {
            while p < src.len() && matches!(src[p], b' ' | b'\n' | b'\t' | b'\r') {
                p += 1;
            }
            if p + 1 < src.len() && src[p] == b'/' && src[p + 1] == b'/' {
                while p < src.len() && src[p] != b'\n' {
                    p += 1;
                }
                continue;
            }
            break;
        }
        self.pos = p;
    }

    /// The next byte after whitespace, without consuming it.
    #[inline]
    pub fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.src.get(self.pos).copied()
    }

    /// The byte at the current position (no whitespace skipping).
    #[inline]
    pub fn cur(&self) -> Option<u8> {
        self.src.get(self.pos).copied()
    }

    /// True at end of input (after whitespace).
    pub fn at_end(&mut self) -> bool {
        self.peek().is_none()
    }

    /// Consume byte `b` (after whitespace) if it is next.
    #[inline]
    pub fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// Consume `s` (after whitespace) if it is next.
    #[inline]
    pub fn eat_str(&mut self, s: &str) -> bool {
        self.ws();
        if self.src[self.pos..].starts_with(s.as_bytes()) {
            self.pos += s.len();
            true
        } else {
            false
        }
    }

    /// Consume `->`.
    #[inline]
    pub fn eat_arrow(&mut self) -> bool {
        self.eat_str("->")
    }

    /// Require byte `b`.
    #[inline]
    pub fn expect(&mut self, b: u8) -> PResult<()> {
        if self.eat(b) {
            Ok(())
        } else {
            self.expected(&format!("'{}'", b as char))
        }
    }

    /// Require the string `s`.
    pub fn expect_str(&mut self, s: &str) -> PResult<()> {
        if self.eat_str(s) {
            Ok(())
        } else {
            self.expected(&format!("'{s}'"))
        }
    }

    /// An "expected X" error describing what was found instead.
    #[cold]
    pub fn expected<T>(&mut self, what: &str) -> PResult<T> {
        self.ws();
        let found = self.describe_here();
        self.err(format!("expected {what}, found {found}"))
    }

    /// A short description of the token at the cursor, for error messages.
    pub fn describe_here(&self) -> String {
        let rest = &self.src[self.pos.min(self.src.len())..];
        if rest.is_empty() {
            return "end of input".into();
        }
        let n = rest
            .iter()
            .take(24)
            .position(|&b| b == b'\n')
            .unwrap_or(rest.len().min(24));
        let mut s = String::from_utf8_lossy(&rest[..n.max(1)]).into_owned();
        if let Some(first_ws) = s.find([' ', '\t']) {
            if first_ws > 0 {
                s.truncate(first_ws);
            }
        }
        format!("'{s}'")
    }

    /// Peek a bare identifier (`[a-zA-Z_][a-zA-Z0-9_$.]*`) without consuming.
    #[inline]
    pub fn peek_ident(&mut self) -> Option<&'s str> {
        self.ws();
        let src = self.src;
        let start = self.pos;
        if start >= src.len() || !is_id_start(src[start]) {
            return None;
        }
        let mut p = start + 1;
        while p < src.len() && is_id_char(src[p]) {
            p += 1;
        }
        Some(self.slice(start, p))
    }

    /// Consume a bare identifier.
    #[inline]
    pub fn ident(&mut self) -> Option<&'s str> {
        let id = self.peek_ident()?;
        self.pos += id.len();
        Some(id)
    }

    /// Require a bare identifier.
    pub fn expect_ident(&mut self, what: &str) -> PResult<&'s str> {
        match self.ident() {
            Some(id) => Ok(id),
            None => self.expected(what),
        }
    }

    /// Consume keyword `kw` if it is the next whole identifier.
    #[inline]
    pub fn eat_kw(&mut self, kw: &str) -> bool {
        self.ws();
        let end = self.pos + kw.len();
        if self.src.get(self.pos..end) == Some(kw.as_bytes())
            && !self.src.get(end).is_some_and(|&b| is_id_char(b))
        {
            self.pos = end;
            true
        } else {
            false
        }
    }

    /// Require keyword `kw`.
    pub fn expect_kw(&mut self, kw: &str) -> PResult<()> {
        if self.eat_kw(kw) {
            Ok(())
        } else {
            self.expected(&format!("'{kw}'"))
        }
    }

    /// Consume a suffix id (after `%`, `^`, `#`, `!`): digits, or
    /// `[a-zA-Z$._-][a-zA-Z0-9$._-]*`.
    #[inline]
    pub fn suffix_id(&mut self) -> Option<&'s str> {
        let src = self.src;
        let start = self.pos;
        let mut p = start;
        if p < src.len() && src[p].is_ascii_digit() {
            while p < src.len() && src[p].is_ascii_digit() {
                p += 1;
            }
        } else {
            while p < src.len() && is_suffix_char(src[p]) {
                p += 1;
            }
        }
        if p == start {
            return None;
        }
        self.pos = p;
        Some(self.slice(start, p))
    }

    /// Consume a string literal (after whitespace), returning the escaped
    /// body between the quotes. Validates escapes.
    pub fn string(&mut self) -> PResult<&'s str> {
        self.ws();
        let start = self.pos;
        if self.cur() != Some(b'"') {
            return self.expected("string literal");
        }
        let src = self.src;
        let mut p = start + 1;
        loop {
            match src.get(p) {
                None | Some(b'\n') => {
                    return self.err_at(start, "unterminated string literal");
                }
                Some(b'"') => break,
                Some(b'\\') => match src.get(p + 1) {
                    Some(b'"' | b'\\' | b'n' | b't') => p += 2,
                    Some(c)
                        if c.is_ascii_hexdigit()
                            && src.get(p + 2).is_some_and(|c| c.is_ascii_hexdigit()) =>
                    {
                        p += 3;
                    }
                    _ => return self.err_at(p, "invalid escape in string literal"),
                },
                Some(_) => p += 1,
            }
        }
        self.pos = p + 1;
        Ok(self.slice(start + 1, p))
    }

    /// True if a number literal starts here (after whitespace).
    #[inline]
    pub fn at_number(&mut self) -> bool {
        self.ws();
        match self.cur() {
            Some(b'0'..=b'9') => true,
            Some(b'-' | b'+') => self
                .src
                .get(self.pos + 1)
                .is_some_and(|b| b.is_ascii_digit()),
            _ => false,
        }
    }

    /// Consume a number literal; returns its text and whether it is a float
    /// (has a `.` or an exponent). Hex literals are integers here.
    pub fn number(&mut self) -> PResult<(&'s str, bool)> {
        self.ws();
        let src = self.src;
        let start = self.pos;
        let mut p = start;
        if matches!(src.get(p), Some(b'-' | b'+')) {
            p += 1;
        }
        if !src.get(p).is_some_and(|b| b.is_ascii_digit()) {
            return self.expected("number");
        }
        if src[p] == b'0' && src.get(p + 1) == Some(&b'x') {
            p += 2;
            let hs = p;
            while p < src.len() && src[p].is_ascii_hexdigit() {
                p += 1;
            }
            if p == hs {
                return self.err_at(start, "expected hex digits after '0x'");
            }
            self.pos = p;
            return Ok((self.slice(start, p), false));
        }
        while p < src.len() && src[p].is_ascii_digit() {
            p += 1;
        }
        let mut is_float = false;
        if src.get(p) == Some(&b'.') {
            is_float = true;
            p += 1;
            while p < src.len() && src[p].is_ascii_digit() {
                p += 1;
            }
        }
        if matches!(src.get(p), Some(b'e' | b'E'))
            && (src.get(p + 1).is_some_and(|b| b.is_ascii_digit())
                || (matches!(src.get(p + 1), Some(b'+' | b'-'))
                    && src.get(p + 2).is_some_and(|b| b.is_ascii_digit())))
        {
            is_float = true;
            p += 2;
            while p < src.len() && src[p].is_ascii_digit() {
                p += 1;
            }
        }
        self.pos = p;
        Ok((self.slice(start, p), is_float))
    }

    /// Consume a non-negative decimal integer that fits in `i64`.
    pub fn uint(&mut self) -> PResult<i64> {
        self.ws();
        let start = self.pos;
        let (text, is_float) = self.number()?;
        if is_float || text.starts_with('-') || text.starts_with('+') {
            return self.err_at(start, "expected a non-negative integer");
        }
        parse_int_text(text).ok_or(RawError {
            pos: start,
            msg: format!("integer {text} is out of range"),
        })
    }

    /// Consume a (possibly negative) integer that fits in `i64`.
    pub fn int(&mut self) -> PResult<i64> {
        self.ws();
        let start = self.pos;
        let (text, is_float) = self.number()?;
        if is_float {
            return self.err_at(start, "expected an integer");
        }
        parse_int_text(text).ok_or(RawError {
            pos: start,
            msg: format!("integer {text} is out of range"),
        })
    }

    /// Skip a balanced body up to and including the closer matching an
    /// already-consumed opener, honoring nested `<>()[]{}` and strings.
    /// Returns the body text (without the final closer). `->` is not
    /// treated as a closing `>`.
    pub fn balanced(&mut self, open_pos: usize) -> PResult<&'s str> {
        let src = self.src;
        let start = self.pos;
        let mut stack: Vec<u8> = Vec::with_capacity(8);
        let mut p = start;
        let opener = src[open_pos];
        stack.push(closer_of(opener));
        while p < src.len() {
            let b = src[p];
            match b {
                b'"' => {
                    self.pos = p;
                    self.string()?;
                    p = self.pos;
                    continue;
                }
                b'<' | b'(' | b'[' | b'{' => {
                    if stack.len() > MAX_DEPTH as usize {
                        return self.err_at(p, "nesting too deep");
                    }
                    stack.push(closer_of(b));
                }
                b'-' if src.get(p + 1) == Some(&b'>') => {
                    p += 2;
                    continue;
                }
                b'>' | b')' | b']' | b'}' => {
                    let want = stack.pop().unwrap_or(0);
                    if want != b {
                        return self.err_at(
                            p,
                            format!("unbalanced '{}': expected '{}'", b as char, want as char),
                        );
                    }
                    if stack.is_empty() {
                        self.pos = p + 1;
                        return Ok(self.slice(start, p));
                    }
                }
                _ => {}
            }
            p += 1;
        }
        self.err_at(open_pos, format!("unterminated '{}'", opener as char))
    }
}

fn closer_of(b: u8) -> u8 {
    match b {
        b'<' => b'>',
        b'(' => b')',
        b'[' => b']',
        _ => b'}',
    }
}

/// Parse a decimal or `0x` hex integer literal (with optional sign).
pub fn parse_int_text(text: &str) -> Option<i64> {
    let (neg, body) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let v: i128 = if let Some(h) = body.strip_prefix("0x") {
        i128::from_str_radix(h, 16).ok()?
    } else {
        body.parse::<i128>().ok()?
    };
    let v = if neg { -v } else { v };
    i64::try_from(v).ok()
}
