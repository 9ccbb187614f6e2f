//! Attribute parsing. Numbers, strings and dense bodies are validated and
//! kept verbatim; arrays, dictionaries, dense arrays and symbol refs are
//! structured; dialect attributes are kept verbatim with balanced brackets.

use super::cursor::{is_id_start, PResult};
use super::types::is_builtin_type_name;
use super::Parser;
use crate::intern::Sym;
use crate::ir::{AttrId, Attribute, DenseArrayData, NamedAttr, Type, TypeId};

impl<'s> Parser<'s> {
    /// Parse any attribute value.
    pub fn parse_attribute(&mut self) -> PResult<AttrId> {
        self.c.enter()?;
        let a = self.parse_attribute_inner()?;
        self.c.leave();
        Ok(a)
    }

    fn parse_attribute_inner(&mut self) -> PResult<AttrId> {
        self.c.ws();
        let Some(b) = self.c.cur() else {
            return self.c.expected("attribute");
        };
        let attr = match b {
            b'"' => {
                let escaped = self.c.string()?.into();
                let ty = self.parse_optional_colon_type()?;
                Attribute::String { escaped, ty }
            }
            b'[' => {
                self.c.pos += 1;
                let mut elems = Vec::new();
                if !self.c.eat(b']') {
                    loop {
                        elems.push(self.parse_attribute()?);
                        if self.c.eat(b']') {
                            break;
                        }
                        if !self.c.eat(b',') {
                            return self.c.expected("',' or ']' in array attribute");
                        }
                    }
                }
                Attribute::Array(elems)
            }
            b'{' => Attribute::Dict(self.parse_attr_dict_body()?),
            b'@' => Attribute::SymbolRef(self.parse_symbol_ref()?),
            b'#' => return self.parse_hash_attribute(),
            b'-' | b'+' | b'0'..=b'9' => {
                let (text, is_float) = self.c.number()?;
                let ty = self.parse_optional_colon_type()?;
                let is_float =
                    is_float || ty.is_some_and(|t| matches!(self.m.ty(t), Type::Float(_)));
                if is_float {
                    Attribute::Float {
                        text: text.into(),
                        ty,
                    }
                } else {
                    Attribute::Integer {
                        text: text.into(),
                        ty,
                    }
                }
            }
            b'(' | b'!' => Attribute::Type(self.parse_type()?),
            _ if is_id_start(b) => return self.parse_keyword_attribute(),
            _ => return self.c.expected("attribute"),
        };
        Ok(self.m.add_attr(attr))
    }

    /// Parse `: type` if present.
    pub fn parse_optional_colon_type(&mut self) -> PResult<Option<TypeId>> {
        self.c.ws();
        // `::` would be a symbol separator, never a type.
        if self.c.cur() == Some(b':') && self.c.src.get(self.c.pos + 1) != Some(&b':') {
            self.c.pos += 1;
            Ok(Some(self.parse_type()?))
        } else {
            Ok(None)
        }
    }

    fn parse_keyword_attribute(&mut self) -> PResult<AttrId> {
        let start = self.c.pos;
        let id = self.c.peek_ident().unwrap_or("");
        let attr = match id {
            "true" | "false" => {
                self.c.pos += id.len();
                Attribute::Bool(id == "true")
            }
            "unit" => {
                self.c.pos += 4;
                Attribute::Unit
            }
            "dense" => {
                self.c.pos += 5;
                let body = self.parse_angle_body()?;
                self.validate_dense_body(body)?;
                self.c.expect(b':')?;
                let ty = self.parse_type()?;
                Attribute::Dense {
                    body: body.into(),
                    ty,
                }
            }
            "dense_resource" => {
                self.c.pos += id.len();
                let body = self.parse_angle_body()?;
                self.c.expect(b':')?;
                let ty = self.parse_type()?;
                Attribute::DenseResource {
                    handle: body.trim().into(),
                    ty,
                }
            }
            "array" => {
                self.c.pos += 5;
                self.parse_dense_array()?
            }
            "loc" => {
                self.c.pos += 3;
                let l = self.parse_loc_parens()?;
                Attribute::Location(l)
            }
            "sparse" | "affine_map" | "affine_set" | "strided" | "opaque" | "distinct" => {
                self.c.pos += id.len();
                self.c.ws();
                if matches!(self.c.cur(), Some(b'<' | b'[')) {
                    let open = self.c.pos;
                    self.c.pos += 1;
                    self.c.balanced(open)?;
                    if id == "distinct" {
                        self.c.ws();
                        if self.c.cur() == Some(b'<') {
                            let open = self.c.pos;
                            self.c.pos += 1;
                            self.c.balanced(open)?;
                        }
                    }
                }
                let end = self.c.pos;
                let ty = self.parse_optional_colon_type()?;
                let mut text = String::from_utf8_lossy(&self.c.src[start..end]).into_owned();
                if let Some(t) = ty {
                    text.push_str(" : ");
                    text.push_str(&crate::print::type_to_string(&self.m, t));
                }
                Attribute::Opaque(text.into())
            }
            _ if is_builtin_type_name(id) => Attribute::Type(self.parse_type()?),
            _ => return self.c.err_at(start, format!("unknown attribute '{id}'")),
        };
        Ok(self.m.add_attr(attr))
    }

    /// Parse `<...>` and return the body text.
    fn parse_angle_body(&mut self) -> PResult<&'s str> {
        self.c.ws();
        if self.c.cur() != Some(b'<') {
            return self.c.expected("'<'");
        }
        let open = self.c.pos;
        self.c.pos += 1;
        self.c.balanced(open)
    }

    /// Check that a `dense<...>` body is made of literals only.
    fn validate_dense_body(&self, body: &str) -> PResult<()> {
        let base = self.c.pos - body.len() - 1;
        let b = body.as_bytes();
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b' ' | b'\n' | b'\t' | b'\r' | b'[' | b']' | b'(' | b')' | b',' => i += 1,
                b'"' => {
                    i += 1;
                    while i < b.len() && b[i] != b'"' {
                        i += 1;
                    }
                    i += 1;
                }
                b'-' | b'+' | b'.' | b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z' => {
                    while i < b.len()
                        && (b[i].is_ascii_alphanumeric() || matches!(b[i], b'.' | b'-' | b'+'))
                    {
                        i += 1;
                    }
                }
                _ => {
                    return Err(super::RawError {
                        pos: base + i,
                        msg: format!("unexpected '{}' in dense elements literal", b[i] as char),
                    })
                }
            }
        }
        Ok(())
    }

    /// Parse `<T: v, v, ...>` after `array`.
    fn parse_dense_array(&mut self) -> PResult<Attribute> {
        self.c.expect(b'<')?;
        let elem = self.parse_type()?;
        let is_float = matches!(self.m.ty(elem), Type::Float(_));
        let is_int = matches!(self.m.ty(elem), Type::Integer { .. });
        if !is_float && !is_int {
            return self
                .c
                .expected("integer or float element type in array<...>");
        }
        let data = if is_float {
            let mut vals = Vec::new();
            if self.c.eat(b':') {
                loop {
                    let (t, _) = self.c.number()?;
                    vals.push(t.into());
                    if !self.c.eat(b',') {
                        break;
                    }
                }
            }
            DenseArrayData::Float(vals)
        } else {
            let mut vals = Vec::new();
            if self.c.eat(b':') {
                loop {
                    if self.c.eat_kw("true") {
                        vals.push(1);
                    } else if self.c.eat_kw("false") {
                        vals.push(0);
                    } else {
                        vals.push(self.c.int()?);
                    }
                    if !self.c.eat(b',') {
                        break;
                    }
                }
            }
            DenseArrayData::Int(vals)
        };
        self.c.expect(b'>')?;
        Ok(Attribute::DenseArray { elem, data })
    }

    /// Parse `@a` or `@a::@b...`, returning the names without `@`.
    pub fn parse_symbol_ref(&mut self) -> PResult<Vec<Sym>> {
        let mut out = vec![self.parse_symbol_name()?];
        while self.c.eat_str("::") {
            out.push(self.parse_symbol_name()?);
        }
        Ok(out)
    }

    /// Parse `@name` or `@"quoted name"`; quoted names keep their quotes.
    pub fn parse_symbol_name(&mut self) -> PResult<Sym> {
        self.c.ws();
        if self.c.cur() != Some(b'@') {
            return self.c.expected("symbol name ('@...')");
        }
        self.c.pos += 1;
        if self.c.cur() == Some(b'"') {
            return self.parse_quoted_name();
        }
        match self.c.suffix_id() {
            Some(s) => Ok(self.m.sym(s)),
            None => self.c.expected("symbol name after '@'"),
        }
    }

    /// Parse a `#...` attribute: an alias reference or a dialect attribute.
    fn parse_hash_attribute(&mut self) -> PResult<AttrId> {
        let start = self.c.pos;
        self.c.pos += 1;
        let Some(name) = self.c.suffix_id() else {
            return self.c.expected("attribute name after '#'");
        };
        if self.c.cur() == Some(b'<') {
            let open = self.c.pos;
            self.c.pos += 1;
            self.c.balanced(open)?;
            let text = self.c.slice(start + 1, self.c.pos);
            return Ok(self.m.add_attr(Attribute::Opaque(text.into())));
        }
        if name.contains('.') && !name.starts_with("loc") {
            // `#dialect.mnemonic` without parameters.
            return Ok(self.m.add_attr(Attribute::Opaque(name.into())));
        }
        let sym = self.m.sym(name);
        Ok(self.m.add_attr(Attribute::Alias(sym)))
    }

    /// Parse `{name = value, name, ...}` (the braces included).
    pub fn parse_attr_dict_body(&mut self) -> PResult<Vec<NamedAttr>> {
        self.c.expect(b'{')?;
        let mut out = Vec::new();
        if self.c.eat(b'}') {
            return Ok(out);
        }
        loop {
            let name = self.parse_attr_name()?;
            let value = if self.c.eat(b'=') {
                self.parse_attribute()?
            } else {
                self.m.add_attr(Attribute::Unit)
            };
            out.push(NamedAttr { name, value });
            if self.c.eat(b'}') {
                return Ok(out);
            }
            if !self.c.eat(b',') {
                return self.c.expected("',' or '}' in attribute dictionary");
            }
        }
    }

    /// Parse an attribute name: a bare identifier or a string.
    pub fn parse_attr_name(&mut self) -> PResult<Sym> {
        self.c.ws();
        if self.c.cur() == Some(b'"') {
            return self.parse_quoted_name();
        }
        match self.c.ident() {
            Some(id) => Ok(self.m.sym(id)),
            None => self.c.expected("attribute name"),
        }
    }
}

impl Parser<'_> {
    /// A quoted name (`"..."`): interned without quotes when it could have
    /// been written bare (so `"foo"` and `foo` are the same name), else with
    /// its quotes.
    fn parse_quoted_name(&mut self) -> PResult<Sym> {
        let start = self.c.pos;
        let body = self.c.string()?;
        if is_bare_ident(body) {
            return Ok(self.m.sym(body));
        }
        let text = self.c.slice(start, self.c.pos);
        Ok(self.m.sym(text))
    }
}

/// True if `s` can be written without quotes as an attribute or symbol name.
pub(crate) fn is_bare_ident(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty() && is_id_start(b[0]) && b[1..].iter().all(|&c| super::cursor::is_id_char(c))
}
