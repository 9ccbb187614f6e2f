//! What the deploy test files share: a scratch directory per test, seeded
//! inputs (a small LCG: no `rand` dependency), f32 <-> little-endian bytes,
//! and the demo artifact (`y = x * [1, 2, 3]`, `s = y.sum(1)`) run and
//! checked against host arithmetic.

#![allow(dead_code)] // each test file uses its own subset

use hlobridge_deploy::{DeployError, Model, Tensor, TensorRef};
use pjrt_client::ElementType;

mod shared;
pub use shared::{bytes, floats, tmp};

/// A small deterministic generator.
pub struct Lcg(pub u64);

impl Lcg {
    /// The next 31-bit value.
    pub fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    /// `n` values in [-1, 1].
    pub fn f32s(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| (self.next() % 2001) as f32 / 1000.0 - 1.0)
            .collect()
    }
}

/// `n` values in [-1, 1], fresh per seed.
pub fn values(seed: u64, n: usize) -> Vec<f32> {
    Lcg(seed).f32s(n)
}

/// Run the demo artifact on `x` as a `[b, 3]` f32 input named `x`.
pub fn run(model: &Model, x: &[f32], b: i64) -> Result<Vec<(String, Tensor)>, DeployError> {
    let xb = bytes(x);
    model.run(&[(
        "x",
        TensorRef {
            dtype: ElementType::F32,
            shape: &[b, 3],
            data: &xb,
        },
    )])
}

/// The demo's outputs `[y, s]` for input `x` of `b` rows, checked
/// elementwise (tolerance 1e-6 on `y`, 1e-5 on `s`).
pub fn check(outs: &[Tensor], x: &[f32], b: i64) {
    assert_eq!(outs[0].shape, vec![b, 3]);
    assert_eq!(outs[1].shape, vec![b]);
    let (y, s) = (floats(&outs[0].data), floats(&outs[1].data));
    for r in 0..b as usize {
        let mut sum = 0.0f32;
        for (c, w) in [1.0f32, 2.0, 3.0].iter().enumerate() {
            let want = x[r * 3 + c] * w;
            assert!(
                (y[r * 3 + c] - want).abs() <= 1e-6,
                "y[{r},{c}] at batch {b}"
            );
            sum += want;
        }
        assert!((s[r] - sum).abs() <= 1e-5, "s[{r}] at batch {b}");
    }
}

/// [`run`] then [`check`], with the outputs' names (`y`, `s`).
pub fn run_and_check(model: &Model, x: &[f32], b: i64) {
    let outs = run(model, x, b).unwrap();
    let names: Vec<&str> = outs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["y", "s"]);
    let tensors: Vec<Tensor> = outs.into_iter().map(|(_, t)| t).collect();
    check(&tensors, x, b);
}
