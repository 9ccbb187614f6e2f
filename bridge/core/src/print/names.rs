//! SSA value naming for the printer: source names are kept as hints
//! (`%cst`, `%arg0`, `%iterArg`) and made unique per naming scope;
//! unnamed values get MLIR-style numbers, entry-block arguments `%argN`.

use crate::ir::{Module, ValueId};
use rustc_hash::FxHashSet;

#[derive(Clone, Copy)]
enum Slot {
    Unset,
    Num(u32),
    Str(u32),
}

/// Names assigned so far, and the counters of the current scope.
pub struct Names {
    slots: Vec<Slot>,
    strs: Vec<Box<str>>,
    scopes: Vec<ScopeState>,
}

#[derive(Default)]
struct ScopeState {
    next_num: u32,
    /// One uniquing counter per scope shared by every name, as MLIR has
    /// (`%cst`, `%cst_0`, ..., `%c_388`).
    next_suffix: u32,
    next_arg: u32,
    used: FxHashSet<Box<str>>,
}

impl Names {
    /// Naming state for `m`.
    pub fn new(m: &Module) -> Self {
        Names {
            slots: vec![Slot::Unset; m.values.len()],
            strs: Vec::new(),
            scopes: vec![ScopeState::default()],
        }
    }

    /// Enter a naming scope (an isolated op such as `func.func`).
    pub fn push_scope(&mut self) {
        self.scopes.push(ScopeState::default());
    }

    /// Leave a naming scope.
    pub fn pop_scope(&mut self) {
        if self.scopes.len() > 1 {
            self.scopes.pop();
        }
    }

    fn scope(&mut self) -> &mut ScopeState {
        let last = self.scopes.len() - 1;
        &mut self.scopes[last]
    }

    fn claim(&mut self, base: &str) -> u32 {
        let s = self.scope();
        let name: Box<str> = if !s.used.contains(base) {
            base.into()
        } else {
            loop {
                let cand = format!("{base}_{}", s.next_suffix);
                s.next_suffix += 1;
                if !s.used.contains(cand.as_str()) {
                    break cand.into();
                }
            }
        };
        s.used.insert(name.clone());
        self.strs.push(name);
        (self.strs.len() - 1) as u32
    }

    /// Write the name of `v` (without `%`), assigning one if needed.
    /// `entry_arg` asks for `argN` style when there is no hint.
    pub fn write(&mut self, m: &Module, v: ValueId, entry_arg: bool, out: &mut String) {
        let idx = v.index();
        if idx >= self.slots.len() {
            self.slots.resize(m.values.len().max(idx + 1), Slot::Unset);
        }
        let slot = match self.slots[idx] {
            Slot::Unset => {
                let slot = match m.values[idx].name {
                    Some(h) => Slot::Str(self.claim(m.str(h))),
                    None if entry_arg => loop {
                        let n = self.scope().next_arg;
                        self.scope().next_arg += 1;
                        let cand = format!("arg{n}");
                        if !self.scope().used.contains(cand.as_str()) {
                            break Slot::Str(self.claim(&cand));
                        }
                    },
                    None => {
                        let n = self.scope().next_num;
                        self.scope().next_num += 1;
                        Slot::Num(n)
                    }
                };
                self.slots[idx] = slot;
                slot
            }
            s => s,
        };
        match slot {
            Slot::Num(n) => push_int(out, n as i64),
            Slot::Str(i) => out.push_str(&self.strs[i as usize]),
            Slot::Unset => {}
        }
    }
}

impl Names {
    /// The value that names `v`'s result group, and `v`'s index in it when
    /// the group has more than one member (`%0#1`).
    pub fn group_of(&self, m: &Module, v: ValueId) -> (ValueId, Option<u32>) {
        if let crate::ir::ValueDef::OpResult { op, index } = m.values[v.index()].def {
            let res = &m.op(op).results;
            if res.len() > 1 && !results_named_apart(m, res) {
                return (res[0], Some(index));
            }
        }
        (v, None)
    }
}

/// True when an op's results carry distinct name hints (`%a, %b = ...`),
/// so each is printed as its own name rather than as `%a:2`.
pub fn results_named_apart(m: &Module, res: &[ValueId]) -> bool {
    res.len() > 1
        && res.iter().all(|r| m.values[r.index()].name.is_some())
        && res
            .windows(2)
            .all(|w| m.values[w[0].index()].name != m.values[w[1].index()].name)
}

impl Names {
    /// Name `v` after `base` (`base`, `base_0`, ...) unless it already has
    /// a name; its source hint is ignored.
    pub fn name_as(&mut self, v: ValueId, base: &str) {
        let idx = v.index();
        if idx >= self.slots.len() {
            self.slots.resize(idx + 1, Slot::Unset);
        }
        if matches!(self.slots[idx], Slot::Unset) {
            self.slots[idx] = Slot::Str(self.claim(base));
        }
    }

    /// Make `v` print with the same name as `target` (naming `target`
    /// first if needed, `argN` style when it has no hint).
    pub fn share(&mut self, m: &Module, v: ValueId, target: ValueId) {
        let mut scratch = String::new();
        self.write(m, target, true, &mut scratch);
        let need = v.index().max(target.index()) + 1;
        if self.slots.len() < need {
            self.slots.resize(need, Slot::Unset);
        }
        self.slots[v.index()] = self.slots[target.index()];
    }
}

/// Append a decimal integer without going through `fmt`.
#[inline]
pub fn push_int(out: &mut String, v: i64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    let neg = v < 0;
    let mut u = v.unsigned_abs();
    loop {
        i -= 1;
        buf[i] = b'0' + (u % 10) as u8;
        u /= 10;
        if u == 0 {
            break;
        }
    }
    if neg {
        out.push('-');
    }
    // ASCII digits: always valid UTF-8.
    if let Ok(digits) = std::str::from_utf8(&buf[i..]) {
        out.push_str(digits);
    }
}
