//! The per-shape programs of a dynamic artifact (`hlobridge_artifact::dynamic`):
//! its ONE module with `?` dims is refined to a request's concrete argument
//! shapes by the core's refinement pass ([`hlobridge::refine::refine_text`],
//! the one Python's `Artifact.run` calls too), compiled through the compile
//! service ([`hlobridge_compile`]) and cached per shape, so a new shape
//! costs one refinement plus one compile and a known one neither.
//!
//! The cache holds at most [`MAX_SHAPES`] programs (oldest dropped first),
//! so clients that send ever new shapes cannot grow it without bound.

use crate::error::{DeployError, Result};
use pjrt_client::{Client, LoadedExecutable};
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// Most compiled shapes kept per model.
pub const MAX_SHAPES: usize = 256;

/// Counts of a [`ShapeCache`]'s work (for tests and logs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShapeStats {
    /// Refinements done (one per new shape).
    pub refinements: u64,
    /// Lookups served from the cache.
    pub hits: u64,
}

#[derive(Default)]
struct Inner {
    exes: HashMap<Vec<Vec<i64>>, LoadedExecutable>,
    order: VecDeque<Vec<Vec<i64>>>,
    stats: ShapeStats,
}

/// The dynamic module and its compiled shapes.
pub struct ShapeCache {
    text: String,
    file: String,
    num_outputs: usize,
    inner: Mutex<Inner>,
}

impl ShapeCache {
    /// A cache for `text` (the module file `file`), whose programs must
    /// return `num_outputs` results.
    pub fn new(file: &str, text: String, num_outputs: usize) -> ShapeCache {
        ShapeCache {
            text,
            file: file.to_string(),
            num_outputs,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// What the cache did so far.
    pub fn stats(&self) -> ShapeStats {
        self.lock().stats
    }

    /// The shapes compiled, oldest first.
    pub fn shapes(&self) -> Vec<Vec<Vec<i64>>> {
        self.lock().order.iter().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while compiling leaves the map consistent (inserts are last).
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The program for `shapes` (one per module parameter, weights
    /// included), refined and compiled on first use.
    pub fn get(&self, client: &Client, shapes: &[Vec<i64>]) -> Result<LoadedExecutable> {
        let mut g = self.lock();
        if let Some(exe) = g.exes.get(shapes) {
            let exe = exe.clone();
            g.stats.hits += 1;
            return Ok(exe);
        }
        let t0 = std::time::Instant::now();
        let refined = hlobridge::refine::refine_text(&self.text, shapes).map_err(|e| match e {
            hlobridge::Error::ShapeAssertion {
                dimension,
                constraint,
                message,
                ..
            } => DeployError::ShapeConstraint {
                dim: dimension,
                constraint,
                message,
            },
            e => DeployError::Execution(format!(
                "{}: refining to the shapes {shapes:?}: {e}",
                self.file
            )),
        })?;
        let refine_us = t0.elapsed().as_micros();
        let policy = hlobridge_compile::CompilePolicy::default();
        let fetched = hlobridge_compile::compile(client, &refined, Default::default(), &policy)
            .map_err(|e| match e {
                hlobridge_compile::CompileError::Pjrt(e) => DeployError::Pjrt(e),
                e => DeployError::Execution(e.to_string()),
            })?;
        let exe = fetched.compiled.exe.clone();
        if exe.num_outputs() != self.num_outputs {
            return Err(DeployError::Artifact(
                hlobridge_artifact::ArtifactError::Manifest(format!(
                    "{} has {} results, the manifest lists {}",
                    self.file,
                    exe.num_outputs(),
                    self.num_outputs
                )),
            ));
        }
        tracing::info!(file = %self.file, ?shapes, refine_us, from_disk = fetched.compiled.from_disk, "dynamic artifact: shape compiled");
        g.stats.refinements += 1;
        if g.order.len() >= MAX_SHAPES {
            if let Some(old) = g.order.pop_front() {
                g.exes.remove(&old);
            }
        }
        g.order.push_back(shapes.to_vec());
        g.exes.insert(shapes.to_vec(), exe.clone());
        Ok(exe)
    }
}
