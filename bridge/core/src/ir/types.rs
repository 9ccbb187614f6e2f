//! Types as they appear in StableHLO: builtin integer/float/index types,
//! ranked and unranked tensors (with `?` dims and encodings such as
//! `#stablehlo.bounds`), complex, tuples, function types, and dialect types
//! (`!stablehlo.token`, `!quant.uniform<...>`, ...) kept verbatim.

use super::TypeId;
use smallvec::SmallVec;

/// The dimension size that stands for `?`.
pub const DYNAMIC: i64 = i64::MIN;

/// Integer signedness as spelled in MLIR (`i32`, `si32`, `ui32`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Signedness {
    /// `iN`
    Signless,
    /// `siN`
    Signed,
    /// `uiN`
    Unsigned,
}

/// Every builtin floating-point type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FloatKind {
    F16,
    BF16,
    F32,
    F64,
    F80,
    F128,
    TF32,
    F8E5M2,
    F8E4M3,
    F8E4M3FN,
    F8E5M2FNUZ,
    F8E4M3FNUZ,
    F8E4M3B11FNUZ,
    F8E3M4,
    F8E8M0FNU,
    F6E2M3FN,
    F6E3M2FN,
    F4E2M1FN,
}

impl FloatKind {
    /// All kinds with their MLIR spelling.
    pub const ALL: [(FloatKind, &'static str); 18] = [
        (FloatKind::F16, "f16"),
        (FloatKind::BF16, "bf16"),
        (FloatKind::F32, "f32"),
        (FloatKind::F64, "f64"),
        (FloatKind::F80, "f80"),
        (FloatKind::F128, "f128"),
        (FloatKind::TF32, "tf32"),
        (FloatKind::F8E5M2, "f8E5M2"),
        (FloatKind::F8E4M3, "f8E4M3"),
        (FloatKind::F8E4M3FN, "f8E4M3FN"),
        (FloatKind::F8E5M2FNUZ, "f8E5M2FNUZ"),
        (FloatKind::F8E4M3FNUZ, "f8E4M3FNUZ"),
        (FloatKind::F8E4M3B11FNUZ, "f8E4M3B11FNUZ"),
        (FloatKind::F8E3M4, "f8E3M4"),
        (FloatKind::F8E8M0FNU, "f8E8M0FNU"),
        (FloatKind::F6E2M3FN, "f6E2M3FN"),
        (FloatKind::F6E3M2FN, "f6E3M2FN"),
        (FloatKind::F4E2M1FN, "f4E2M1FN"),
    ];

    /// The MLIR spelling, e.g. `bf16`.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(k, _)| *k == self)
            .map(|(_, n)| *n)
            .unwrap_or("f32")
    }

    /// Parse an MLIR spelling.
    pub fn from_name(s: &str) -> Option<FloatKind> {
        Self::ALL.iter().find(|(_, n)| *n == s).map(|(k, _)| *k)
    }

    /// Storage width in bits.
    pub fn bits(self) -> u32 {
        match self {
            FloatKind::F16 | FloatKind::BF16 => 16,
            FloatKind::F32 | FloatKind::TF32 => 32,
            FloatKind::F64 => 64,
            FloatKind::F80 => 80,
            FloatKind::F128 => 128,
            FloatKind::F6E2M3FN | FloatKind::F6E3M2FN => 6,
            FloatKind::F4E2M1FN => 4,
            _ => 8,
        }
    }
}

/// A type. Stored interned in the module; compare by [`TypeId`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Type {
    /// `iN`, `siN`, `uiN`.
    Integer {
        /// Bit width.
        width: u32,
        /// Signedness.
        signedness: Signedness,
    },
    /// A builtin float type.
    Float(FloatKind),
    /// `index`.
    Index,
    /// `none`.
    None,
    /// `complex<T>`.
    Complex(TypeId),
    /// `tensor<DxDx...xT[, encoding]>`; `?` dims are [`DYNAMIC`].
    Tensor {
        /// Dimension sizes.
        dims: SmallVec<[i64; 4]>,
        /// Element type.
        elem: TypeId,
        /// The encoding attribute, verbatim (e.g. `#stablehlo.bounds<8, ?>`).
        encoding: Option<Box<str>>,
    },
    /// `tensor<*xT>`.
    UnrankedTensor(TypeId),
    /// `tuple<...>`.
    Tuple(Vec<TypeId>),
    /// `(inputs) -> results`.
    Function {
        /// Parameter types.
        inputs: Vec<TypeId>,
        /// Result types.
        results: Vec<TypeId>,
    },
    /// Any other type, verbatim: `!stablehlo.token`, `!quant.uniform<..>`,
    /// `memref<..>`, `vector<..>`, ...
    Opaque(Box<str>),
}

impl Type {
    /// True for `tensor<...>` (ranked or not).
    pub fn is_tensor(&self) -> bool {
        matches!(self, Type::Tensor { .. } | Type::UnrankedTensor(_))
    }
}
