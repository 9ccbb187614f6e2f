//! SSA name scopes: value definitions per region, forward references, and
//! block labels.

use super::cursor::{PResult, RawError};
use crate::ir::{BlockId, Module, TypeId, ValueDef, ValueId};
use rustc_hash::FxHashMap;
use smallvec::SmallVec;

/// One region's names.
#[derive(Default)]
struct Scope<'s> {
    values: FxHashMap<&'s str, SmallVec<[ValueId; 1]>>,
    /// Uses seen before their definition: (name, result number) → value,
    /// with the byte offset of the first use.
    forward: FxHashMap<(&'s str, u32), (ValueId, usize)>,
    blocks: FxHashMap<&'s str, (BlockId, Option<usize>)>,
    /// Numeric names (`%12`) defined in this scope, cleared from the
    /// shared table when the scope ends.
    num_defs: Vec<u32>,
}

/// Numeric names above this use the hash map path.
const MAX_FAST_NUM: u32 = 1 << 24;

/// The stack of scopes, innermost last.
#[derive(Default)]
pub(crate) struct Scopes<'s> {
    stack: Vec<Scope<'s>>,
    /// Fast path for MLIR's numbered values: number → 1 + index into
    /// `num_groups` (0 = not defined in any open scope).
    num_table: Vec<u32>,
    num_groups: Vec<SmallVec<[ValueId; 1]>>,
}

/// `%123` → 123, when the name is a plain (small) decimal number.
#[inline]
fn numeric(name: &str) -> Option<u32> {
    let b = name.as_bytes();
    if b.is_empty() || b.len() > 7 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = b.iter().fold(0u32, |acc, d| acc * 10 + (d - b'0') as u32);
    (n < MAX_FAST_NUM).then_some(n)
}

impl<'s> Scopes<'s> {
    pub fn push(&mut self) {
        self.stack.push(Scope::default());
    }

    /// Push a scope expected to hold about `n` names (avoids rehashing for
    /// large function bodies).
    pub fn push_with_capacity(&mut self, n: usize) {
        let mut s = Scope::default();
        s.values.reserve(n);
        self.stack.push(s);
    }

    /// Pop a scope. Unresolved forward value references move to the
    /// enclosing scope (they may be defined later there); at the outermost
    /// level they are errors. Undefined block labels are errors.
    pub fn pop(&mut self) -> PResult<()> {
        let Some(scope) = self.stack.pop() else {
            return Ok(());
        };
        for &n in &scope.num_defs {
            self.num_table[n as usize] = 0;
        }
        if let Some((name, (_, pos))) = scope
            .blocks
            .iter()
            .filter_map(|(n, (b, pos))| pos.map(|p| (n, (b, p))))
            .min_by_key(|(_, (_, p))| *p)
        {
            return Err(RawError {
                pos,
                msg: format!("reference to an undefined block '^{name}'"),
            });
        }
        match self.stack.last_mut() {
            Some(parent) => {
                for (k, v) in scope.forward {
                    parent.forward.entry(k).or_insert(v);
                }
                Ok(())
            }
            None => match scope.forward.iter().min_by_key(|(_, (_, pos))| *pos) {
                Some(((name, num), (_, pos))) => Err(RawError {
                    pos: *pos,
                    msg: if *num == 0 {
                        format!("use of undefined value '%{name}'")
                    } else {
                        format!("use of undefined value '%{name}#{num}'")
                    },
                }),
                None => Ok(()),
            },
        }
    }

    /// Bind `name` to a group of values in the innermost scope, resolving
    /// earlier forward references to it.
    pub fn define(
        &mut self,
        m: &mut Module,
        name: &'s str,
        values: SmallVec<[ValueId; 1]>,
        pos: usize,
    ) -> PResult<()> {
        let Some(scope) = self.stack.last_mut() else {
            return Err(RawError {
                pos,
                msg: "value defined outside of any region".into(),
            });
        };
        let num = numeric(name);
        let redefined = match num {
            Some(n) => self.num_table.get(n as usize).is_some_and(|&g| g != 0),
            None => scope.values.contains_key(name),
        };
        if redefined {
            return Err(RawError {
                pos,
                msg: format!("redefinition of SSA value '%{name}'"),
            });
        }
        let mut values = values;
        if !scope.forward.is_empty() {
            for (i, v) in values.iter_mut().enumerate() {
                if let Some((fwd, _)) = scope.forward.remove(&(name, i as u32)) {
                    let real = m.values[v.index()].clone();
                    if m.values[fwd.index()].ty != real.ty {
                        return Err(RawError {
                            pos,
                            msg: format!(
                                "definition of '%{name}' has a different type than its earlier uses"
                            ),
                        });
                    }
                    // Reuse the placeholder id so earlier uses stay valid.
                    m.values[fwd.index()] = real.clone();
                    replace_def(m, fwd);
                    *v = fwd;
                }
            }
        }
        match num {
            Some(n) => {
                let n = n as usize;
                if self.num_table.len() <= n {
                    self.num_table.resize((n + 1).max(1024), 0);
                }
                self.num_groups.push(values);
                self.num_table[n] = self.num_groups.len() as u32;
                scope.num_defs.push(n as u32);
            }
            None => {
                scope.values.insert(name, values);
            }
        }
        Ok(())
    }

    /// Resolve a use of `%name#num` with expected type `ty`.
    pub fn resolve(
        &mut self,
        m: &mut Module,
        name: &'s str,
        num: u32,
        ty: TypeId,
        pos: usize,
    ) -> PResult<ValueId> {
        let fast = numeric(name)
            .and_then(|n| self.num_table.get(n as usize).copied())
            .filter(|&g| g != 0)
            .map(|g| &self.num_groups[g as usize - 1]);
        for scope in self.stack.iter().rev() {
            if let Some(group) = fast.or_else(|| scope.values.get(name)) {
                let Some(&v) = group.get(num as usize) else {
                    return Err(RawError {
                        pos,
                        msg: format!(
                            "'%{name}' has {} result(s); #{num} is out of range",
                            group.len()
                        ),
                    });
                };
                if m.values[v.index()].ty != ty {
                    return Err(RawError {
                        pos,
                        msg: format!(
                            "use of value '%{name}' expects a different type than its definition: {} vs {}",
                            crate::print::type_to_string(m, ty),
                            crate::print::type_to_string(m, m.values[v.index()].ty)
                        ),
                    });
                }
                return Ok(v);
            }
            if let Some(&(v, _)) = scope.forward.get(&(name, num)) {
                if m.values[v.index()].ty != ty {
                    return Err(RawError {
                        pos,
                        msg: format!("use of value '%{name}' with inconsistent types"),
                    });
                }
                return Ok(v);
            }
        }
        let Some(scope) = self.stack.last_mut() else {
            return Err(RawError {
                pos,
                msg: format!("use of undefined value '%{name}'"),
            });
        };
        let v = m.add_value(ty, ValueDef::Pending, None);
        scope.forward.insert((name, num), (v, pos));
        Ok(v)
    }

    /// The block for label `name` in the innermost scope, creating a
    /// forward reference if it is not defined yet.
    pub fn block_ref(&mut self, m: &mut Module, name: &'s str, pos: usize) -> PResult<BlockId> {
        let Some(scope) = self.stack.last_mut() else {
            return Err(RawError {
                pos,
                msg: "block reference outside of any region".into(),
            });
        };
        if let Some(&(b, _)) = scope.blocks.get(name) {
            return Ok(b);
        }
        let b = m.add_block();
        scope.blocks.insert(name, (b, Some(pos)));
        Ok(b)
    }

    /// Define label `name` in the innermost scope.
    pub fn block_def(&mut self, m: &mut Module, name: &'s str, pos: usize) -> PResult<BlockId> {
        let Some(scope) = self.stack.last_mut() else {
            return Err(RawError {
                pos,
                msg: "block outside of any region".into(),
            });
        };
        match scope.blocks.get_mut(name) {
            Some((b, fwd @ Some(_))) => {
                *fwd = None;
                Ok(*b)
            }
            Some((_, None)) => Err(RawError {
                pos,
                msg: format!("redefinition of block '^{name}'"),
            }),
            None => {
                let b = m.add_block();
                scope.blocks.insert(name, (b, None));
                Ok(b)
            }
        }
    }
}

/// Make the op result / block arg slot that `new`'s definition names
/// point at `new` (used when a forward-reference placeholder takes over).
fn replace_def(m: &mut Module, new: ValueId) {
    match m.values[new.index()].def {
        ValueDef::OpResult { op, index } => {
            m.ops[op.index()].results[index as usize] = new;
        }
        ValueDef::BlockArg { block, index } => {
            m.blocks[block.index()].args[index as usize] = new;
        }
        ValueDef::Pending => {}
    }
}
