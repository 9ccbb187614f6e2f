//! The in-memory model of an MLIR module as StableHLO producers write it.
//!
//! Everything lives in arenas owned by [`Module`] and is referred to by typed
//! `u32` ids ([`OpId`], [`ValueId`], [`BlockId`], [`RegionId`], [`TypeId`],
//! [`AttrId`], [`LocId`]). Types are interned structurally, so two equal
//! types always have the same [`TypeId`].

mod attrs;
mod clone;
mod ids;
mod location;
mod module;
mod types;

pub use attrs::{Attribute, DenseArrayData, NamedAttr};
pub use clone::{copy_op_within, Cloner};
pub use ids::{AttrId, BlockId, LocId, OpId, RegionId, TypeId, ValueId};
pub use location::Location;
pub use module::{AliasValue, BlockData, Module, OpData, RegionData, TopItem, ValueData, ValueDef};
pub use types::{FloatKind, Signedness, Type, DYNAMIC};
