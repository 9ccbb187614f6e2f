//! The accessors against the real process environment. Every test holds
//! `LOCK` (the environment is process-global) and uses variables that
//! nothing in this test binary reads otherwise.

use hlobridge_config::{
    check_environment, flag, get, get_os, is_off, level, parse, path, BadValue, Level, Var,
};
use std::sync::Mutex;

static LOCK: Mutex<()> = Mutex::new(());

fn with_env<R>(name: &str, value: Option<&str>, f: impl FnOnce() -> R) -> R {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    match value {
        Some(v) => std::env::set_var(name, v),
        None => std::env::remove_var(name),
    }
    let r = f();
    std::env::remove_var(name);
    r
}

#[test]
fn get_treats_blank_as_unset() {
    let v = Var::Zoo;
    assert_eq!(with_env(v.name(), None, || get(v)), None);
    assert_eq!(with_env(v.name(), Some(""), || get(v)), None);
    assert_eq!(with_env(v.name(), Some("  "), || get(v)), None);
    assert_eq!(
        with_env(v.name(), Some("all"), || get(v)).as_deref(),
        Some("all")
    );
    assert_eq!(
        with_env(v.name(), Some("/a b/c"), || (get_os(v), path(v))),
        (Some("/a b/c".into()), Some("/a b/c".into()))
    );
}

#[test]
fn is_off_and_level() {
    let v = Var::HostConv;
    assert!(!with_env(v.name(), None, || is_off(v)));
    assert!(with_env(v.name(), Some("off"), || is_off(v)));
    assert!(with_env(v.name(), Some("0"), || is_off(v)));
    assert!(!with_env(v.name(), Some("1"), || is_off(v)));
    assert_eq!(with_env(v.name(), None, || level(v)), Level::On);
    assert_eq!(with_env(v.name(), Some("all"), || level(v)), Level::All);
    assert_eq!(with_env(v.name(), Some("false"), || level(v)), Level::Off);
}

#[test]
fn flag_is_strict() {
    let v = Var::CudaPreallocate;
    assert_eq!(with_env(v.name(), None, || flag(v)), Ok(None));
    assert_eq!(with_env(v.name(), Some("yes"), || flag(v)), Ok(Some(true)));
    assert_eq!(with_env(v.name(), Some("0"), || flag(v)), Ok(Some(false)));
    assert_eq!(
        with_env(v.name(), Some("maybe"), || flag(v)),
        Err(BadValue {
            var: v,
            value: "maybe".into()
        })
    );
}

#[test]
fn parse_typed_values() {
    let v = Var::MutationSecs;
    assert_eq!(with_env(v.name(), None, || parse::<u64>(v)), Ok(None));
    assert_eq!(
        with_env(v.name(), Some(" 42 "), || parse::<u64>(v)),
        Ok(Some(42))
    );
    assert_eq!(
        with_env(v.name(), Some("0.5"), || parse::<f32>(v)),
        Ok(Some(0.5))
    );
    let e = with_env(v.name(), Some("-3"), || parse::<u64>(v)).unwrap_err();
    assert_eq!(e.var, v);
    assert_eq!(e.value, "-3");
    assert!(e.to_string().contains("HLOBRIDGE_MUTATION_SECS=\"-3\""));
}

#[test]
fn check_environment_sees_unknown_variables() {
    let got = with_env("HLOBRIDGE_CACHE_DIRR", Some("/tmp/x"), check_environment);
    assert!(
        got.contains(
            &"HLOBRIDGE_CACHE_DIRR is not a known variable; did you mean HLOBRIDGE_CACHE_DIR?"
                .to_string()
        ),
        "{got:?}"
    );
    let got = with_env("HLOBRIDGE_CACHE_DIRR", None, check_environment);
    assert!(
        !got.iter().any(|w| w.contains("HLOBRIDGE_CACHE_DIRR")),
        "{got:?}"
    );
}
