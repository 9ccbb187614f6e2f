//! hlobridge's configuration in one place: the table of every
//! `HLOBRIDGE_*` environment variable ([`Var`], [`VarInfo`]; defined in
//! `table.rs`), typed accessors through which every Rust read of one goes,
//! and the check that warns about unknown `HLOBRIDGE_*` variables with the
//! nearest known name.
//!
//! - [`get`], [`get_os`], [`path`]: the raw value; an empty (or
//!   whitespace-only) value counts as unset.
//! - [`is_off`], [`level`], [`flag`]: switches. The off words are `0`,
//!   `false`, `off` and `no`; the on words `1`, `true`, `on` and `yes`
//!   (case-insensitive, surrounding whitespace ignored).
//! - [`parse`]: any [`FromStr`] value, or a [`BadValue`] naming the
//!   variable; what to do about a bad value (fail, or warn and use the
//!   default) stays with the caller.
//! - [`check_environment`]: one warning per unknown `HLOBRIDGE_*` variable
//!   in the process environment (the CLI and the Python package log them
//!   at startup).
//! - [`render_markdown`]: `docs/configuration.md` (tests keep the file, the
//!   table and the names used across the source tree in agreement).
//!
//! A leaf crate with no dependencies, below `pjrt-client` in the layering:
//! every layer may read its variables from here.

mod markdown;
mod suggest;
mod table;

pub use markdown::render_markdown;
pub use suggest::{levenshtein, nearest};
pub use table::{Reader, Var, VarInfo};

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// The prefix every variable of the table has.
pub const PREFIX: &str = "HLOBRIDGE_";

/// The variable's value as the OS gave it, if set and not blank.
pub fn get_os(var: Var) -> Option<OsString> {
    std::env::var_os(var.name()).filter(|v| !v.to_string_lossy().trim().is_empty())
}

/// The variable's value (non-UTF-8 bytes replaced), if set and not blank.
pub fn get(var: Var) -> Option<String> {
    get_os(var).map(|v| v.to_string_lossy().into_owned())
}

/// The variable's value as a path, if set and not blank.
pub fn path(var: Var) -> Option<PathBuf> {
    get_os(var).map(PathBuf::from)
}

/// The file name of oneDNN's shared library (version 3).
pub const ONEDNN_LIBRARY_FILE: &str = "libdnnl.so.3";

/// oneDNN's shared library, if there is one to load: the
/// `HLOBRIDGE_ONEDNN_LIBRARY` path (`None` for an off word), else
/// `$VIRTUAL_ENV/lib/libdnnl.so.3`; only a path that exists. The lowering
/// (which routes work to the library) and the host kernel (which loads it)
/// both ask here, so they agree.
pub fn onednn_library() -> Option<PathBuf> {
    let p = match get(Var::OneDnnLibrary) {
        Some(v) if is_off_word(&v) => return None,
        Some(v) => PathBuf::from(v.trim()),
        None => PathBuf::from(std::env::var_os("VIRTUAL_ENV")?)
            .join("lib")
            .join(ONEDNN_LIBRARY_FILE),
    };
    p.is_file().then_some(p)
}

/// Whether `s` is an off word: `0`, `false`, `off` or `no`.
pub fn is_off_word(s: &str) -> bool {
    matches!(
        s.trim().to_ascii_lowercase().as_str(),
        "0" | "false" | "off" | "no"
    )
}

/// Whether `s` is an on word: `1`, `true`, `on` or `yes`.
pub fn is_on_word(s: &str) -> bool {
    matches!(
        s.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "on" | "yes"
    )
}

/// Whether the variable is set to an off word (a switch that is on by
/// default: anything else, unset included, leaves it on).
pub fn is_off(var: Var) -> bool {
    get(var).is_some_and(|v| is_off_word(&v))
}

/// A three-way switch: off, on (the default), or on for everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// An off word.
    Off,
    /// Unset, or any value other than an off word or `all`.
    On,
    /// `all`.
    All,
}

/// The variable as a [`Level`] (`HLOBRIDGE_HOST_GEMM`, `HLOBRIDGE_HOST_CONV`).
pub fn level(var: Var) -> Level {
    level_of(get(var).as_deref())
}

/// [`level`] of a raw value.
pub fn level_of(value: Option<&str>) -> Level {
    match value {
        Some(v) if is_off_word(v) => Level::Off,
        Some(v) if v.trim().eq_ignore_ascii_case("all") => Level::All,
        _ => Level::On,
    }
}

/// The variable as a strict boolean: `None` if unset, an error naming it
/// for a value that is neither an on nor an off word.
pub fn flag(var: Var) -> Result<Option<bool>, BadValue> {
    match get(var) {
        None => Ok(None),
        Some(v) if is_on_word(&v) => Ok(Some(true)),
        Some(v) if is_off_word(&v) => Ok(Some(false)),
        Some(value) => Err(BadValue { var, value }),
    }
}

/// The variable parsed as `T` (surrounding whitespace ignored): `None` if
/// unset, an error naming it if the value does not parse.
pub fn parse<T: FromStr>(var: Var) -> Result<Option<T>, BadValue> {
    match get(var) {
        None => Ok(None),
        Some(value) => match value.trim().parse() {
            Ok(t) => Ok(Some(t)),
            Err(_) => Err(BadValue { var, value }),
        },
    }
}

/// A value that does not parse as its variable requires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadValue {
    /// The variable.
    pub var: Var,
    /// Its value.
    pub value: String,
}

impl fmt::Display for BadValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let info = self.var.info();
        write!(
            f,
            "{}={:?} is not a valid value (default {}): {}",
            info.name, self.value, info.default, info.meaning
        )
    }
}

impl std::error::Error for BadValue {}

/// One warning per `HLOBRIDGE_*` name among `names` that is not in the
/// table, naming the nearest known variable when one is close; sorted,
/// without repeats. Names without the prefix are ignored.
pub fn check_names<I, S>(names: I) -> Vec<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let mut unknown: Vec<String> = names
        .into_iter()
        .map(|n| n.as_ref().to_owned())
        .filter(|n| n.starts_with(PREFIX) && Var::from_name(n).is_none())
        .collect();
    unknown.sort();
    unknown.dedup();
    unknown
        .into_iter()
        .map(|n| match nearest(&n) {
            Some(v) => format!("{n} is not a known variable; did you mean {v}?"),
            None => format!(
                "{n} is not a known variable (docs/configuration.md lists every HLOBRIDGE_* variable)"
            ),
        })
        .collect()
}

/// [`check_names`] over the process environment.
pub fn check_environment() -> Vec<String> {
    check_names(
        std::env::vars_os()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect::<Vec<_>>(),
    )
}

#[cfg(test)]
mod tests;
