//! Shared helpers for integration tests (run against the CPU plugin found by
//! discovery; fail loudly if none is installed).
#![allow(dead_code)]

use pjrt_client::{Client, ClientOptions, Plugin};
use std::sync::OnceLock;

/// The discovered plugin; panics with a clear message if none is installed.
pub fn plugin() -> Plugin {
    static P: OnceLock<Plugin> = OnceLock::new();
    P.get_or_init(|| match Plugin::discover() {
        Ok(p) => p,
        Err(e) => panic!("no PJRT plugin available for tests (run `make` to set up .venv): {e}"),
    })
    .clone()
}

/// A CPU client with `n` devices.
pub fn client(n: i64) -> Client {
    Client::new(&plugin(), &ClientOptions::new().cpu_device_count(n)).expect("create CPU client")
}

/// Deterministic pseudo-random f32s in [-3, 3).
pub fn random_f32(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 6.0 - 3.0
        })
        .collect()
}

/// Asserts element-wise closeness.
pub fn assert_close(got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "length mismatch");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "index {i}: got {g}, want {w}"
        );
    }
}

/// `sin(x) * exp(y)` on tensor<Nxf32>.
pub fn sine_exp_module(n: usize) -> String {
    format!(
        r#"module @sine_exp {{
  func.func public @main(%arg0: tensor<{n}xf32>, %arg1: tensor<{n}xf32>) -> tensor<{n}xf32> {{
    %0 = stablehlo.sine %arg0 : tensor<{n}xf32>
    %1 = stablehlo.exponential %arg1 : tensor<{n}xf32>
    %2 = stablehlo.multiply %0, %1 : tensor<{n}xf32>
    return %2 : tensor<{n}xf32>
  }}
}}"#
    )
}

/// `sin(x)` on tensor<Nxf32>.
pub fn sine_module(n: usize) -> String {
    format!(
        r#"module @sine {{
  func.func public @main(%arg0: tensor<{n}xf32>) -> tensor<{n}xf32> {{
    %0 = stablehlo.sine %arg0 : tensor<{n}xf32>
    return %0 : tensor<{n}xf32>
  }}
}}"#
    )
}
