//! Finding a PJRT plugin shared library.
//!
//! Order: explicit path → `HLOBRIDGE_PLUGIN` → `PJRT_NAMES_AND_LIBRARY_PATHS`
//! (`name:path,name:path`) → Python wheels declaring entry points in the
//! `xla_plugins` / `jax_plugins` groups (site-packages of `HLOBRIDGE_PYTHON`,
//! `VIRTUAL_ENV`, a `.venv` in the current directory or its ancestors, or
//! `python3`) → `TPU_LIBRARY_PATH`.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// Where a plugin was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundPlugin {
    /// Plugin name (`cpu`, the entry-point name, ...), if known.
    pub name: String,
    /// Path of the shared library.
    pub path: PathBuf,
    /// How it was found (`explicit`, `HLOBRIDGE_PLUGIN`, `entry_point`, ...).
    pub source: &'static str,
}

/// Inputs for [`find_plugin`].
#[derive(Debug, Clone, Default)]
pub struct DiscoveryOptions {
    /// Use exactly this file.
    pub explicit: Option<PathBuf>,
    /// Prefer plugins whose name contains this (e.g. `cpu`, `cuda`).
    pub prefer: Option<String>,
}

/// Finds one plugin according to the module-level order.
pub fn find_plugin(opts: &DiscoveryOptions) -> Result<FoundPlugin> {
    if let Some(p) = &opts.explicit {
        return found_file("explicit", "explicit", p);
    }
    if let Some(p) = hlobridge_config::get_os(hlobridge_config::Var::Plugin) {
        return found_file("HLOBRIDGE_PLUGIN", "env", Path::new(&p));
    }
    let all = list_plugins();
    let pick = match &opts.prefer {
        Some(pref) => all
            .iter()
            .find(|f| f.name.contains(pref.as_str()))
            .or(all.first()),
        None => all.first(),
    };
    match pick {
        Some(p) => Ok(p.clone()),
        None => Err(Error::NoPluginFound {
            searched: "HLOBRIDGE_PLUGIN, PJRT_NAMES_AND_LIBRARY_PATHS, xla_plugins/jax_plugins entry points in site-packages (HLOBRIDGE_PYTHON, VIRTUAL_ENV, ./.venv, python3), TPU_LIBRARY_PATH".into(),
        }),
    }
}

fn found_file(source: &'static str, name: &str, p: &Path) -> Result<FoundPlugin> {
    if !p.exists() {
        return Err(Error::PluginNotFound {
            path: p.to_path_buf(),
        });
    }
    Ok(FoundPlugin {
        name: name.into(),
        path: p.to_path_buf(),
        source,
    })
}

/// All plugins visible through env vars, entry points and `TPU_LIBRARY_PATH`
/// (existing files only), in priority order.
pub fn list_plugins() -> Vec<FoundPlugin> {
    let mut out = Vec::new();
    if let Ok(v) = std::env::var("PJRT_NAMES_AND_LIBRARY_PATHS") {
        for (name, path) in parse_names_and_paths(&v) {
            if path.exists() {
                out.push(FoundPlugin {
                    name,
                    path,
                    source: "PJRT_NAMES_AND_LIBRARY_PATHS",
                });
            }
        }
    }
    for sp in site_packages_dirs() {
        out.extend(scan_entry_points(&sp));
    }
    if let Some(p) = std::env::var_os("TPU_LIBRARY_PATH") {
        let p = PathBuf::from(p);
        if p.exists() {
            out.push(FoundPlugin {
                name: "tpu".into(),
                path: p,
                source: "TPU_LIBRARY_PATH",
            });
        }
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|f| seen.insert(f.path.canonicalize().unwrap_or_else(|_| f.path.clone())));
    out
}

/// Parses `name:path,name:path`.
pub fn parse_names_and_paths(v: &str) -> Vec<(String, PathBuf)> {
    v.split(',')
        .filter_map(|item| {
            let item = item.trim();
            let (name, path) = item.split_once(':')?;
            (!path.is_empty()).then(|| (name.trim().to_string(), PathBuf::from(path.trim())))
        })
        .collect()
}

/// Candidate site-packages directories.
pub fn site_packages_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(py) = hlobridge_config::get_os(hlobridge_config::Var::Python) {
        dirs.extend(python_site_dirs(Path::new(&py)));
    }
    if let Some(venv) = std::env::var_os("VIRTUAL_ENV") {
        dirs.extend(venv_site_dirs(Path::new(&venv)));
    }
    let mut starts: Vec<PathBuf> = Vec::new();
    if let Ok(cwd) = std::env::current_dir() {
        starts.push(cwd);
    }
    // Also search relative to this crate's source tree (the workspace .venv),
    // so tests and benches work from any directory of a checkout.
    starts.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    for start in starts {
        for anc in start.ancestors() {
            let v = anc.join(".venv");
            if v.is_dir() {
                dirs.extend(venv_site_dirs(&v));
                break;
            }
        }
    }
    if dirs.is_empty() {
        dirs.extend(python_site_dirs(Path::new("python3")));
    }
    let mut seen = std::collections::HashSet::new();
    dirs.retain(|d| seen.insert(d.clone()));
    dirs
}

fn venv_site_dirs(venv: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for lib in ["lib", "lib64"] {
        if let Ok(rd) = std::fs::read_dir(venv.join(lib)) {
            for e in rd.flatten() {
                let sp = e.path().join("site-packages");
                if e.file_name().to_string_lossy().starts_with("python") && sp.is_dir() {
                    out.push(sp);
                }
            }
        }
    }
    out
}

fn python_site_dirs(python: &Path) -> Vec<PathBuf> {
    let out = std::process::Command::new(python)
        .args(["-c", "import sys\nfor p in sys.path: print(p)"])
        .stderr(std::process::Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(PathBuf::from)
            .filter(|p| p.is_dir() && p.to_string_lossy().contains("-packages"))
            .collect(),
        _ => Vec::new(),
    }
}

/// Scans `site/*.dist-info/entry_points.txt` for `[xla_plugins]` and
/// `[jax_plugins]` entries and resolves each module's directory to a `.so`.
pub fn scan_entry_points(site: &Path) -> Vec<FoundPlugin> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(site) else {
        return out;
    };
    let mut infos: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "dist-info"))
        .collect();
    infos.sort();
    for info in infos {
        let Ok(text) = std::fs::read_to_string(info.join("entry_points.txt")) else {
            continue;
        };
        for (group, name, module) in parse_entry_points(&text) {
            if group != "xla_plugins" && group != "jax_plugins" {
                continue;
            }
            let module_dir = site.join(module.split(':').next().unwrap_or("").replace('.', "/"));
            if let Some(so) = find_so(&module_dir) {
                out.push(FoundPlugin {
                    name,
                    path: so,
                    source: "entry_point",
                });
            }
        }
    }
    out
}

/// Parses an `entry_points.txt` into `(group, name, target)` triples.
pub fn parse_entry_points(text: &str) -> Vec<(String, String, String)> {
    let mut group = String::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(g) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            group = g.trim().to_string();
        } else if let Some((k, v)) = line.split_once('=') {
            out.push((group.clone(), k.trim().to_string(), v.trim().to_string()));
        }
    }
    out
}

fn find_so(dir: &Path) -> Option<PathBuf> {
    let rd = std::fs::read_dir(dir).ok()?;
    let mut sos: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "so" || e == "dylib"))
        .collect();
    sos.sort();
    // Prefer names containing "pjrt".
    sos.iter()
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().contains("pjrt"))
        })
        .or(sos.first())
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_paths() {
        let v = parse_names_and_paths("cpu:/a/b.so, cuda:/c.so,bad");
        assert_eq!(
            v,
            vec![
                ("cpu".into(), "/a/b.so".into()),
                ("cuda".into(), "/c.so".into())
            ]
        );
    }

    #[test]
    fn parses_entry_points() {
        let t = "[console_scripts]\nx = y:z\n\n[xla_plugins]\nxla_cpu_pjrt = xla_plugins.xla_cpu_pjrt\n";
        let v = parse_entry_points(t);
        assert_eq!(
            v[1],
            (
                "xla_plugins".into(),
                "xla_cpu_pjrt".into(),
                "xla_plugins.xla_cpu_pjrt".into()
            )
        );
    }
}
