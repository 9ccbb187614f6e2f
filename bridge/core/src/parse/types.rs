//! Type parsing: builtin scalar types, tensors with static, `?` and bounded
//! dims and encodings, complex, tuples, function types and verbatim
//! dialect types.

use super::cursor::PResult;
use super::Parser;
use crate::ir::{FloatKind, Signedness, Type, TypeId, DYNAMIC};
use smallvec::SmallVec;

/// A list of types (inline up to four: most ops have few operands).
pub type TypeList = SmallVec<[TypeId; 4]>;

impl<'s> Parser<'s> {
    /// Parse any type.
    pub fn parse_type(&mut self) -> PResult<TypeId> {
        self.c.ws();
        match self.c.cur() {
            Some(b'(') => self.parse_function_type(),
            Some(b'!') => self.parse_dialect_type(),
            Some(b't') => self.parse_type_cached(),
            Some(b) if b.is_ascii_alphabetic() => self.parse_builtin_type(),
            _ => self.c.expected("type"),
        }
    }

    /// Types starting with `t` (`tensor<...>`, `tuple<...>`, `tf32`) are
    /// looked up by their exact source text first: real modules repeat a
    /// few tensor types thousands of times.
    fn parse_type_cached(&mut self) -> PResult<TypeId> {
        let start = self.c.pos;
        let src = self.c.src;
        // The text up to the '>' that closes the first '<' (no strings or
        // parentheses inside: otherwise skip the cache).
        let mut depth = 0usize;
        let mut end = None;
        for (i, &b) in src[start..].iter().enumerate().take(256) {
            match b {
                b'<' => depth += 1,
                b'>' => {
                    if depth <= 1 {
                        end = Some(start + i + 1);
                        break;
                    }
                    depth -= 1;
                }
                b'"' | b'(' | b'\n' => break,
                _ => {}
            }
        }
        let Some(end) = end.filter(|_| depth >= 1) else {
            return self.parse_builtin_type();
        };
        let key = self.c.slice(start, end);
        if let Some(&t) = self.type_cache.get(key) {
            self.c.pos = end;
            return Ok(t);
        }
        let t = self.parse_builtin_type()?;
        if self.c.pos == end {
            self.type_cache.insert(key, t);
        }
        Ok(t)
    }

    /// True if a type can start at the cursor.
    pub fn at_type(&mut self) -> bool {
        self.c.ws();
        matches!(self.c.cur(), Some(b'(' | b'!')) || {
            match self.c.peek_ident() {
                Some(id) => is_builtin_type_name(id),
                None => false,
            }
        }
    }

    /// Parse `(T, ...) -> T` or `(T, ...) -> (T, ...)`.
    pub fn parse_function_type(&mut self) -> PResult<TypeId> {
        let (inputs, results) = self.parse_function_type_parts()?;
        Ok(self.m.intern_type(Type::Function {
            inputs: inputs.into_vec(),
            results: results.into_vec(),
        }))
    }

    /// Parse a function type into its input and result lists.
    pub fn parse_function_type_parts(&mut self) -> PResult<(TypeList, TypeList)> {
        self.c.enter()?;
        self.c.expect(b'(')?;
        let inputs = self.parse_type_list_until(b')')?;
        if !self.c.eat_arrow() {
            return self.c.expected("'->' in function type");
        }
        let results = self.parse_result_types()?;
        self.c.leave();
        Ok((inputs, results))
    }

    /// Parse a result type list: a single type, or `(T, ...)`.
    pub fn parse_result_types(&mut self) -> PResult<TypeList> {
        if self.c.peek() == Some(b'(') {
            // `(T) -> ...` would be a function type result; MLIR requires
            // parentheses around function-typed results, so `(` opens a list.
            self.c.pos += 1;
            self.parse_type_list_until(b')')
        } else {
            Ok(smallvec::smallvec![self.parse_type()?])
        }
    }

    /// Parse a comma-separated type list up to and including `close`.
    pub fn parse_type_list_until(&mut self, close: u8) -> PResult<TypeList> {
        let mut out = TypeList::new();
        if self.c.eat(close) {
            return Ok(out);
        }
        loop {
            out.push(self.parse_type()?);
            if self.c.eat(close) {
                return Ok(out);
            }
            if !self.c.eat(b',') {
                return self.c.expected(&format!("',' or '{}'", close as char));
            }
        }
    }

    /// Parse a comma-separated list of at least one type (no brackets).
    pub fn parse_type_list(&mut self) -> PResult<TypeList> {
        let mut out: TypeList = smallvec::smallvec![self.parse_type()?];
        while self.c.eat(b',') {
            out.push(self.parse_type()?);
        }
        Ok(out)
    }

    fn parse_dialect_type(&mut self) -> PResult<TypeId> {
        let start = self.c.pos;
        self.c.pos += 1; // '!'
        if self.c.suffix_id().is_none() {
            return self.c.expected("dialect type name after '!'");
        }
        if self.c.cur() == Some(b'<') {
            let open = self.c.pos;
            self.c.pos += 1;
            self.c.balanced(open)?;
        }
        let text = self.c.slice(start, self.c.pos);
        Ok(self.m.intern_type(Type::Opaque(text.into())))
    }

    fn parse_builtin_type(&mut self) -> PResult<TypeId> {
        let start = self.c.pos;
        let Some(id) = self.c.ident() else {
            return self.c.expected("type");
        };
        let ty = match id {
            "tensor" => return self.parse_tensor_body(),
            "complex" => {
                self.c.enter()?;
                self.c.expect(b'<')?;
                let e = self.parse_type()?;
                self.c.expect(b'>')?;
                self.c.leave();
                Type::Complex(e)
            }
            "tuple" => {
                self.c.enter()?;
                self.c.expect(b'<')?;
                let elems = self.parse_type_list_until(b'>')?;
                self.c.leave();
                Type::Tuple(elems.into_vec())
            }
            "index" => Type::Index,
            "none" => Type::None,
            "memref" | "vector" => {
                // Kept verbatim: hlobridge never needs their structure.
                if self.c.cur() != Some(b'<') {
                    return self.c.expected("'<'");
                }
                let open = self.c.pos;
                self.c.pos += 1;
                self.c.balanced(open)?;
                let text = self.c.slice(start, self.c.pos);
                Type::Opaque(text.into())
            }
            _ => match scalar_type(id) {
                Some(t) => t,
                None => {
                    return self.c.err_at(start, format!("unknown type '{id}'"));
                }
            },
        };
        Ok(self.m.intern_type(ty))
    }

    /// Parse `<dims x elem [, encoding]>` after `tensor`.
    fn parse_tensor_body(&mut self) -> PResult<TypeId> {
        if self.c.cur() != Some(b'<') {
            return self.c.expected("'<' after 'tensor'");
        }
        self.c.pos += 1;
        self.c.enter()?;
        self.c.ws();
        if self.c.cur() == Some(b'*') {
            self.c.pos += 1;
            self.c.ws();
            if self.c.cur() != Some(b'x') {
                return self.c.expected("'x' in unranked tensor type");
            }
            self.c.pos += 1;
            let elem = self.parse_type()?;
            self.c.expect(b'>')?;
            self.c.leave();
            return Ok(self.m.intern_type(Type::UnrankedTensor(elem)));
        }
        let mut dims: SmallVec<[i64; 4]> = SmallVec::new();
        let src = self.c.src;
        loop {
            let p = self.c.pos;
            let dim = match src.get(p) {
                Some(b'?') => {
                    self.c.pos += 1;
                    DYNAMIC
                }
                Some(b'0'..=b'9') => {
                    let mut q = p;
                    let mut v: i64 = 0;
                    while let Some(d @ b'0'..=b'9') = src.get(q) {
                        v = match v
                            .checked_mul(10)
                            .and_then(|v| v.checked_add((d - b'0') as i64))
                        {
                            Some(v) => v,
                            None => return self.c.err_at(p, "dimension size is too large"),
                        };
                        q += 1;
                    }
                    // A number not followed by 'x' is not a dimension.
                    if src.get(q) != Some(&b'x') {
                        return self.c.err_at(q, "expected 'x' after dimension size");
                    }
                    self.c.pos = q;
                    v
                }
                _ => break,
            };
            if src.get(self.c.pos) != Some(&b'x') {
                return self.c.expected("'x' after dimension");
            }
            self.c.pos += 1;
            dims.push(dim);
        }
        let elem = self.parse_type()?;
        let encoding = if self.c.eat(b',') {
            self.c.ws();
            let estart = self.c.pos;
            self.parse_attribute()?;
            let text = self.c.slice(estart, self.c.pos);
            Some(text.trim_end().into())
        } else {
            None
        };
        self.c.expect(b'>')?;
        self.c.leave();
        Ok(self.m.intern_type(Type::Tensor {
            dims,
            elem,
            encoding,
        }))
    }
}

/// True if `id` names a builtin type (used to disambiguate attributes).
pub(crate) fn is_builtin_type_name(id: &str) -> bool {
    matches!(
        id,
        "tensor" | "complex" | "tuple" | "index" | "none" | "memref" | "vector"
    ) || scalar_type(id).is_some()
}

/// Parse an integer or float type name such as `i32`, `ui8`, `bf16`.
pub(crate) fn scalar_type(id: &str) -> Option<Type> {
    if let Some(k) = FloatKind::from_name(id) {
        return Some(Type::Float(k));
    }
    let (signedness, digits) = if let Some(d) = id.strip_prefix("ui") {
        (Signedness::Unsigned, d)
    } else if let Some(d) = id.strip_prefix("si") {
        (Signedness::Signed, d)
    } else if let Some(d) = id.strip_prefix('i') {
        (Signedness::Signless, d)
    } else {
        return None;
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.starts_with('0') {
        return None;
    }
    let width: u32 = digits.parse().ok()?;
    if width == 0 || width > (1 << 24) {
        return None;
    }
    Some(Type::Integer { width, signedness })
}
