//! How a host thread waits for a PJRT event: poll first, then block.
//!
//! The XLA CPU client runs every program that is not trivially cheap on its
//! own worker pool and signals completion through a futex. On small VMs a
//! futex wake-up of the sleeping caller costs tens of microseconds (measured
//! here: a 16×16 dot took 117 µs when blocking, 18 µs when polling). Most
//! programs hlobridge runs per step finish within a few hundred microseconds,
//! so [`Event::wait`](crate::Event::wait) first polls `PJRT_Event_IsReady`,
//! yielding the core between polls so the worker keeps running, and only
//! then blocks in `PJRT_Event_Await`.
//!
//! The polling budget is `HLOBRIDGE_SPIN_US` microseconds (default
//! [`DEFAULT_SPIN_US`]; `0` always blocks at once), read once per process.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Default polling budget before blocking, in microseconds.
pub const DEFAULT_SPIN_US: u64 = 250;

/// The process-wide polling budget (`HLOBRIDGE_SPIN_US`, read once).
pub fn spin_budget() -> Duration {
    static BUDGET: OnceLock<Duration> = OnceLock::new();
    *BUDGET.get_or_init(|| {
        let us = match hlobridge_config::parse::<u64>(hlobridge_config::Var::SpinUs) {
            Ok(v) => v.unwrap_or(DEFAULT_SPIN_US),
            Err(e) => {
                tracing::warn!(value = %e.value, "HLOBRIDGE_SPIN_US is not a number of microseconds; using the default");
                DEFAULT_SPIN_US
            }
        };
        Duration::from_micros(us)
    })
}

/// Polls `ready` until it returns `Ok(true)`, an error, or `budget` runs
/// out. Returns `Ok(true)` when the event completed while polling, so the
/// caller can skip blocking.
pub fn poll_until<E>(
    budget: Duration,
    mut ready: impl FnMut() -> Result<bool, E>,
) -> Result<bool, E> {
    if budget.is_zero() {
        return Ok(false);
    }
    let start = Instant::now();
    loop {
        if ready()? {
            return Ok(true);
        }
        if start.elapsed() >= budget {
            return Ok(false);
        }
        // Run part of a host kernel the program is executing, if it posted
        // one (see `host_kernels::donation`); otherwise give the core to the
        // worker that runs the program: on a machine with fewer cores than
        // runnable threads a pure spin would delay the very completion it
        // waits for.
        if !crate::host_kernels::donation::help() {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_budget_never_polls() {
        let mut calls = 0;
        let done = poll_until::<()>(Duration::ZERO, || {
            calls += 1;
            Ok(true)
        })
        .unwrap();
        assert!(!done);
        assert_eq!(calls, 0);
    }

    #[test]
    fn completes_when_ready_turns_true() {
        let mut n = 0;
        let done = poll_until::<()>(Duration::from_secs(5), || {
            n += 1;
            Ok(n >= 3)
        })
        .unwrap();
        assert!(done);
        assert_eq!(n, 3);
    }

    #[test]
    fn gives_up_after_the_budget() {
        let t = Instant::now();
        let done = poll_until::<()>(Duration::from_millis(2), || Ok(false)).unwrap();
        assert!(!done);
        assert!(t.elapsed() >= Duration::from_millis(2));
    }

    #[test]
    fn errors_stop_polling() {
        let r = poll_until(Duration::from_secs(5), || Err::<bool, &str>("boom"));
        assert_eq!(r, Err("boom"));
    }
}
