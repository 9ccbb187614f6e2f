//! Typed `u32` ids into the arenas of a [`super::Module`].

macro_rules! define_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub u32);

        impl $name {
            /// The arena index of this id.
            #[inline]
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }
    };
}

define_id!(
    /// An operation.
    OpId
);
define_id!(
    /// An SSA value: an op result or a block argument.
    ValueId
);
define_id!(
    /// A basic block inside a region.
    BlockId
);
define_id!(
    /// A region attached to an operation.
    RegionId
);
define_id!(
    /// An interned type.
    TypeId
);
define_id!(
    /// An attribute.
    AttrId
);
define_id!(
    /// A source location.
    LocId
);
