//! String interning: every identifier-like string in a module (op names,
//! attribute names, symbol names, value name hints) is stored once and
//! referred to by a [`Sym`].

use rustc_hash::FxHashMap;
use std::sync::Arc;

/// An interned string id, valid for the [`Interner`] that produced it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sym(pub u32);

/// A string table with O(1) lookup both ways.
#[derive(Default, Clone, Debug)]
pub struct Interner {
    // One allocation per string, shared by the map and the table.
    map: FxHashMap<Arc<str>, Sym>,
    strs: Vec<Arc<str>>,
}

impl Interner {
    /// Intern `s`, returning its id.
    pub fn intern(&mut self, s: &str) -> Sym {
        if let Some(&sym) = self.map.get(s) {
            return sym;
        }
        let sym = Sym(self.strs.len() as u32);
        let shared: Arc<str> = Arc::from(s);
        self.strs.push(shared.clone());
        self.map.insert(shared, sym);
        sym
    }

    /// Look up `s` without interning it.
    pub fn get(&self, s: &str) -> Option<Sym> {
        self.map.get(s).copied()
    }

    /// The string for `sym`.
    pub fn resolve(&self, sym: Sym) -> &str {
        &self.strs[sym.0 as usize]
    }

    /// Number of interned strings.
    pub fn len(&self) -> usize {
        self.strs.len()
    }

    /// True when nothing has been interned.
    pub fn is_empty(&self) -> bool {
        self.strs.is_empty()
    }
}
