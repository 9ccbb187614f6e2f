//! Location parsing: `loc(...)` with file/line/col, names, call sites,
//! fused locations, `unknown`, and `#loc` alias references.

use super::cursor::PResult;
use super::Parser;
use crate::ir::{LocId, Location};

impl<'s> Parser<'s> {
    /// Parse an optional trailing `loc(...)`.
    pub fn parse_optional_loc(&mut self) -> PResult<Option<LocId>> {
        if self.c.peek() == Some(b'l') && self.c.eat_kw("loc") {
            Ok(Some(self.parse_loc_parens()?))
        } else {
            Ok(None)
        }
    }

    /// Parse `(location)` after the `loc` keyword.
    pub fn parse_loc_parens(&mut self) -> PResult<LocId> {
        self.c.enter()?;
        self.c.expect(b'(')?;
        let l = self.parse_loc_body()?;
        self.c.expect(b')')?;
        self.c.leave();
        Ok(l)
    }

    /// Parse a bare location (inside `loc(...)`).
    fn parse_loc_body(&mut self) -> PResult<LocId> {
        self.c.enter()?;
        self.c.ws();
        let loc = match self.c.cur() {
            Some(b'"') => {
                let text = self.c.string()?;
                if self.c.cur() == Some(b':') {
                    let start = self.c.pos;
                    self.scan_line_col()?;
                    if self.c.eat_kw("to") {
                        self.c.ws();
                        if self.c.cur() == Some(b':') {
                            self.scan_line_col()?;
                        } else {
                            self.c.uint()?;
                            if self.c.cur() == Some(b':') {
                                self.scan_line_col()?;
                            }
                        }
                    }
                    let pos = String::from_utf8_lossy(&self.c.src[start..self.c.pos]);
                    Location::FileLineCol {
                        file: text.into(),
                        pos: pos.into_owned().into(),
                    }
                } else if self.c.peek() == Some(b'(') {
                    self.c.pos += 1;
                    let child = self.parse_loc_body()?;
                    self.c.expect(b')')?;
                    Location::Name {
                        name: text.into(),
                        child: Some(child),
                    }
                } else {
                    Location::Name {
                        name: text.into(),
                        child: None,
                    }
                }
            }
            Some(b'#') => {
                self.c.pos += 1;
                let Some(name) = self.c.suffix_id() else {
                    return self.c.expected("location alias name");
                };
                if self.c.cur() == Some(b'<') {
                    // A dialect location attribute, kept verbatim.
                    let open = self.c.pos;
                    self.c.pos += 1;
                    let body = self.c.balanced(open)?;
                    Location::Opaque(format!("#{name}<{body}>").into())
                } else {
                    Location::Alias(self.m.sym(name))
                }
            }
            _ => match self.c.ident() {
                Some("unknown") => Location::Unknown,
                Some("callsite") => {
                    self.c.expect(b'(')?;
                    let callee = self.parse_loc_body()?;
                    self.c.expect_kw("at")?;
                    let caller = self.parse_loc_body()?;
                    self.c.expect(b')')?;
                    Location::CallSite { callee, caller }
                }
                Some("fused") => {
                    let metadata = if self.c.eat(b'<') {
                        let a = self.parse_attribute()?;
                        self.c.expect(b'>')?;
                        Some(a)
                    } else {
                        None
                    };
                    self.c.expect(b'[')?;
                    let mut locs = Vec::new();
                    if !self.c.eat(b']') {
                        loop {
                            locs.push(self.parse_loc_body()?);
                            if self.c.eat(b']') {
                                break;
                            }
                            self.c.expect(b',')?;
                        }
                    }
                    Location::Fused { metadata, locs }
                }
                _ => return self.c.expected("location"),
            },
        };
        self.c.leave();
        Ok(self.m.add_loc(loc))
    }

    /// Scan `:line` or `:line:col` (no spaces allowed inside).
    fn scan_line_col(&mut self) -> PResult<()> {
        self.c.expect(b':')?;
        self.c.uint()?;
        if self.c.cur() == Some(b':') {
            self.c.pos += 1;
            self.c.uint()?;
        }
        Ok(())
    }
}
