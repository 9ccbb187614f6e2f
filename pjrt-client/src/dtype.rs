//! Element types (`PJRT_Buffer_Type`) and the host types that map to them.

use hlobridge_proto::xla::PrimitiveType;

macro_rules! element_types {
    ($( $(#[$m:meta])* $name:ident = $raw:literal, $prim:ident, $bits:literal, $mlir:literal; )*) => {
        /// Array element type, mirroring `PJRT_Buffer_Type`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(i32)]
        pub enum ElementType {
            $( $(#[$m])* $name = $raw, )*
        }

        impl ElementType {
            /// All known element types.
            pub const ALL: &'static [ElementType] = &[$(ElementType::$name),*];

            /// From a raw `PJRT_Buffer_Type`; `None` for unknown values.
            pub fn from_raw(raw: i32) -> Option<Self> {
                match raw {
                    $( $raw => Some(ElementType::$name), )*
                    _ => None,
                }
            }

            /// The raw `PJRT_Buffer_Type` value.
            pub fn to_raw(self) -> i32 {
                self as i32
            }

            /// From XLA's `PrimitiveType` (as used in HLO shapes).
            pub fn from_primitive(p: PrimitiveType) -> Option<Self> {
                match p {
                    $( PrimitiveType::$prim => Some(ElementType::$name), )*
                    _ => None,
                }
            }

            /// XLA's `PrimitiveType` for this element type.
            pub fn to_primitive(self) -> PrimitiveType {
                match self {
                    $( ElementType::$name => PrimitiveType::$prim, )*
                }
            }

            /// Bits per element (0 for `Invalid`/`Token`).
            pub fn bit_width(self) -> usize {
                match self {
                    $( ElementType::$name => $bits, )*
                }
            }

            /// MLIR / StableHLO spelling (`f32`, `bf16`, `i1`, `complex<f32>`...).
            pub fn mlir_name(self) -> &'static str {
                match self {
                    $( ElementType::$name => $mlir, )*
                }
            }

            /// Parses the MLIR / StableHLO spelling (`invalid` is rejected).
            pub fn from_mlir_name(s: &str) -> Option<Self> {
                let t = match s {
                    $( $mlir => Some(ElementType::$name), )*
                    _ => None,
                };
                t.filter(|t| *t != ElementType::Invalid)
            }
        }
    };
}

element_types! {
    /// Invalid / unset.
    Invalid = 0, Invalid, 0, "invalid";
    /// Boolean (`i1`), stored as one byte.
    Pred = 1, Pred, 8, "i1";
    /// Signed 8-bit integer.
    S8 = 2, S8, 8, "i8";
    /// Signed 16-bit integer.
    S16 = 3, S16, 16, "i16";
    /// Signed 32-bit integer.
    S32 = 4, S32, 32, "i32";
    /// Signed 64-bit integer.
    S64 = 5, S64, 64, "i64";
    /// Unsigned 8-bit integer.
    U8 = 6, U8, 8, "ui8";
    /// Unsigned 16-bit integer.
    U16 = 7, U16, 16, "ui16";
    /// Unsigned 32-bit integer.
    U32 = 8, U32, 32, "ui32";
    /// Unsigned 64-bit integer.
    U64 = 9, U64, 64, "ui64";
    /// IEEE half.
    F16 = 10, F16, 16, "f16";
    /// IEEE single.
    F32 = 11, F32, 32, "f32";
    /// IEEE double.
    F64 = 12, F64, 64, "f64";
    /// bfloat16.
    Bf16 = 13, Bf16, 16, "bf16";
    /// Complex of two f32.
    C64 = 14, C64, 64, "complex<f32>";
    /// Complex of two f64.
    C128 = 15, C128, 128, "complex<f64>";
    /// float8 e5m2.
    F8E5M2 = 16, F8e5m2, 8, "f8E5M2";
    /// float8 e4m3fn.
    F8E4M3FN = 17, F8e4m3fn, 8, "f8E4M3FN";
    /// float8 e4m3b11fnuz.
    F8E4M3B11FNUZ = 18, F8e4m3b11fnuz, 8, "f8E4M3B11FNUZ";
    /// float8 e5m2fnuz.
    F8E5M2FNUZ = 19, F8e5m2fnuz, 8, "f8E5M2FNUZ";
    /// float8 e4m3fnuz.
    F8E4M3FNUZ = 20, F8e4m3fnuz, 8, "f8E4M3FNUZ";
    /// Signed 4-bit integer.
    S4 = 21, S4, 4, "i4";
    /// Unsigned 4-bit integer.
    U4 = 22, U4, 4, "ui4";
    /// Token (no data).
    Token = 23, Token, 0, "token";
    /// Signed 2-bit integer.
    S2 = 24, S2, 2, "i2";
    /// Unsigned 2-bit integer.
    U2 = 25, U2, 2, "ui2";
    /// float8 e4m3.
    F8E4M3 = 26, F8e4m3, 8, "f8E4M3";
    /// float8 e3m4.
    F8E3M4 = 27, F8e3m4, 8, "f8E3M4";
    /// float8 e8m0fnu.
    F8E8M0FNU = 28, F8e8m0fnu, 8, "f8E8M0FNU";
    /// float4 e2m1fn.
    F4E2M1FN = 29, F4e2m1fn, 4, "f4E2M1FN";
}

impl ElementType {
    /// Bytes one element occupies in a dense host array (sub-byte types
    /// use one byte per element, as PJRT host transfers expect).
    pub fn host_byte_size(self) -> usize {
        self.bit_width().div_ceil(8)
    }

    /// Host bytes needed for a dense array of `dims`.
    pub fn host_size_of(self, dims: &[i64]) -> Option<usize> {
        let mut n: usize = self.host_byte_size();
        for &d in dims {
            n = n.checked_mul(usize::try_from(d).ok()?)?;
        }
        Some(n)
    }
}

impl std::fmt::Display for ElementType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.mlir_name())
    }
}

/// Rust host types with a fixed PJRT element type.
///
/// # Safety
/// Implementors must be plain-old-data whose in-memory representation is
/// exactly the PJRT element encoding (so byte casts are valid both ways).
pub unsafe trait NativeType: Copy + Send + Sync + 'static {
    /// The matching element type.
    const TYPE: ElementType;
}

macro_rules! native {
    ($($t:ty => $e:ident),*) => {$(
        // SAFETY: primitive POD with the same encoding as the PJRT type.
        unsafe impl NativeType for $t { const TYPE: ElementType = ElementType::$e; }
    )*};
}
native!(f32 => F32, f64 => F64, i8 => S8, i16 => S16, i32 => S32, i64 => S64,
        u8 => U8, u16 => U16, u32 => U32, u64 => U64, bool => Pred);

/// Views a native slice as bytes.
pub(crate) fn as_bytes<T: NativeType>(data: &[T]) -> &[u8] {
    // SAFETY: T is POD (NativeType contract); any initialized T is valid bytes.
    unsafe { std::slice::from_raw_parts(data.as_ptr() as *const u8, std::mem::size_of_val(data)) }
}
