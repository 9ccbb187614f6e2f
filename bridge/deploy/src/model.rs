//! [`Model`]: a loaded artifact. Loading reads and verifies it once
//! ([`hlobridge_artifact::read_artifact`]: regular files only, sizes
//! capped, manifest, content hash, weights against the manifest), compiles
//! every module variant once through the PJRT plugin, and binds the weights
//! on the device once; [`Model::run`] checks named inputs against the
//! manifest, pads the batch to the smallest compiled bucket (only for an
//! artifact whose rows the exporter found independent), executes, checks
//! that every result carries the bucket's rows, and slices them back.
//!
//! A dynamic artifact (`hlobridge_artifact::dynamic`) has ONE module: load
//! refines and compiles it for the example's shapes (so a module the
//! refinement cannot serve fails at load), and each new request shape is
//! refined and compiled once ([`crate::shapes::ShapeCache`]). Its inputs
//! are checked against the manifest's symbols first
//! ([`Manifest::check_shapes`]: [`DeployError::ShapeConstraint`] names the
//! dimension and the constraint), and a batch runs at its exact size (or,
//! below the batch symbol's `min`, padded up to it).

use crate::batching::{concat_pad, slice_rows};
use crate::error::{DeployError, Result};
use crate::manifest::{element_type, Manifest};
use crate::shapes::{ShapeCache, ShapeStats};
use hlobridge_artifact::ArtifactError;
use pjrt_client::{Buffer, Client, ClientOptions, ElementType, LoadedExecutable, Plugin};
use std::path::{Path, PathBuf};

/// A dense host tensor (row-major, little-endian bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tensor {
    /// Element type.
    pub dtype: ElementType,
    /// Dims.
    pub shape: Vec<i64>,
    /// `dtype.host_size_of(shape)` bytes.
    pub data: Vec<u8>,
}

/// A borrowed dense host tensor.
#[derive(Debug, Clone, Copy)]
pub struct TensorRef<'a> {
    /// Element type.
    pub dtype: ElementType,
    /// Dims.
    pub shape: &'a [i64],
    /// Bytes.
    pub data: &'a [u8],
}

impl Tensor {
    /// This tensor, borrowed.
    pub fn as_ref(&self) -> TensorRef<'_> {
        TensorRef {
            dtype: self.dtype,
            shape: &self.shape,
            data: &self.data,
        }
    }
}

/// How to load.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// The PJRT plugin; default: discovery (`PJRT_PLUGIN_PATH`, the venv's
    /// `xla-cpu-pjrt`...).
    pub plugin: Option<PathBuf>,
}

struct Variant {
    batch: Option<i64>,
    exe: LoadedExecutable,
}

/// The most rows `hlobridge serve --batching` merges into one execution of
/// a dynamic artifact whose batch symbol has no `max`.
pub const DYNAMIC_BATCH_CAP: i64 = 64;

/// Request inputs checked against the manifest, in program order.
#[derive(Debug)]
pub struct Prepared<'a> {
    /// One per non-weight parameter, in parameter order.
    pub inputs: Vec<TensorRef<'a>>,
    /// The request's batch size along the manifest's batch dim.
    pub batch: Option<i64>,
}

/// A loaded, compiled artifact with its weights on the device.
pub struct Model {
    manifest: Manifest,
    manifest_text: String,
    client: Client,
    variants: Vec<Variant>,
    /// A dynamic artifact's module and its compiled shapes.
    dynamic: Option<ShapeCache>,
    /// Per parameter: the bound weight buffer, or `None` for a request input.
    weights: Vec<Option<Buffer>>,
    dtypes: Vec<ElementType>,
    out_dtypes: Vec<ElementType>,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("hash", &self.manifest.content_hash)
            .finish_non_exhaustive()
    }
}

impl Model {
    /// Loads the artifact in `dir` with the discovered plugin.
    pub fn load(dir: impl AsRef<Path>) -> Result<Model> {
        Model::load_with(dir, &LoadOptions::default())
    }

    /// Loads the artifact in `dir`.
    pub fn load_with(dir: impl AsRef<Path>, opts: &LoadOptions) -> Result<Model> {
        let v = hlobridge_artifact::read_artifact(dir.as_ref())?;
        let plugin = match &opts.plugin {
            Some(p) => Plugin::load(p)?,
            None => Plugin::discover()?,
        };
        let client = Client::new(&plugin, &ClientOptions::new())?;
        let manifest = &v.manifest;
        let dtypes: Vec<ElementType> = manifest
            .params
            .iter()
            .map(|p| element_type(&p.dtype))
            .collect::<Result<_, ArtifactError>>()?;
        let out_dtypes: Vec<ElementType> = manifest
            .outputs
            .iter()
            .map(|o| element_type(&o.dtype))
            .collect::<Result<_, ArtifactError>>()?;
        let mut weights = Vec::with_capacity(manifest.params.len());
        for (p, &dt) in manifest.params.iter().zip(&dtypes) {
            if !p.weight {
                weights.push(None);
                continue;
            }
            // Present with the manifest's dtype and shape: checked by the reader.
            let bytes = v.weight_bytes(&p.name).ok_or_else(|| {
                DeployError::Execution(format!("weight {:?} missing after the check", p.name))
            })?;
            weights.push(Some(
                client.buffer_from_host_bytes(bytes, dt, &p.shape, None)?,
            ));
        }
        let mut variants = Vec::new();
        let dynamic = match (manifest.is_dynamic(), v.modules.first()) {
            (true, Some((file, text))) => {
                let cache = ShapeCache::new(file, text.clone(), manifest.outputs.len());
                // The example's shapes, refined and compiled now: a module
                // the refinement cannot serve fails here, not on a request.
                let shapes: Vec<Vec<i64>> =
                    manifest.params.iter().map(|p| p.shape.clone()).collect();
                cache.get(&client, &shapes).map_err(|e| match e {
                    DeployError::ShapeConstraint { message, .. } => {
                        DeployError::Artifact(ArtifactError::Manifest(format!(
                            "the example shapes violate the module's assertions: {message}"
                        )))
                    }
                    e => e,
                })?;
                Some(cache)
            }
            _ => None,
        };
        for (f, (_, text)) in manifest.modules.iter().zip(&v.modules) {
            if dynamic.is_some() {
                break;
            }
            // The one compile service, with the policy the Python runtime
            // uses minus its memory cache: same options, host lowering,
            // disk cache and fallback, so the served program is the tested one.
            let policy = hlobridge_compile::CompilePolicy::default();
            let fetched = hlobridge_compile::compile(&client, text, Default::default(), &policy)
                .map_err(|e| match e {
                    hlobridge_compile::CompileError::Pjrt(e) => DeployError::Pjrt(e),
                    e => DeployError::Execution(e.to_string()),
                })?;
            let c = &fetched.compiled;
            tracing::info!(file = %f.file, from_disk = c.from_disk, kernels = %c.host.kernels_line(), "artifact module ready");
            let exe = c.exe.clone();
            if exe.num_outputs() != manifest.outputs.len() {
                return Err(DeployError::Artifact(ArtifactError::Manifest(format!(
                    "{} has {} results, the manifest lists {}",
                    f.file,
                    exe.num_outputs(),
                    manifest.outputs.len()
                ))));
            }
            variants.push(Variant {
                batch: f.batch,
                exe,
            });
        }
        variants.sort_by_key(|v| v.batch);
        tracing::debug!(hash = %manifest.content_hash, variants = variants.len(), "artifact loaded");
        let manifest = v.manifest;
        Ok(Model {
            manifest,
            manifest_text: v.manifest_text,
            client,
            variants,
            dynamic,
            weights,
            dtypes,
            out_dtypes,
        })
    }

    /// The parsed manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// `manifest.json` as written.
    pub fn manifest_text(&self) -> &str {
        &self.manifest_text
    }

    /// The PJRT client the model runs on.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The request inputs' names, in program order.
    pub fn input_names(&self) -> impl Iterator<Item = &str> {
        self.manifest
            .params
            .iter()
            .filter(|p| !p.weight)
            .map(|p| p.name.as_str())
    }

    /// Whether this is a dynamic artifact (refined per shape).
    pub fn is_dynamic(&self) -> bool {
        self.dynamic.is_some()
    }

    /// A dynamic artifact's refinements and cache hits so far.
    pub fn shape_stats(&self) -> Option<ShapeStats> {
        self.dynamic.as_ref().map(|c| c.stats())
    }

    /// Compiled batch sizes, ascending (empty without a batch dim, and for
    /// a dynamic artifact, which compiles each size on first use).
    pub fn batch_sizes(&self) -> Vec<i64> {
        self.variants.iter().filter_map(|v| v.batch).collect()
    }

    /// The largest batch one execution takes (`None` without a batch dim);
    /// for a dynamic artifact, its batch symbol's `max` or
    /// [`DYNAMIC_BATCH_CAP`].
    pub fn max_batch(&self) -> Option<i64> {
        if self.dynamic.is_some() {
            return self
                .manifest
                .batch_symbol()
                .map(|s| s.max.unwrap_or(DYNAMIC_BATCH_CAP.max(s.min)));
        }
        self.manifest
            .batch_dim
            .and(self.variants.last().and_then(|v| v.batch))
    }

    /// Checks named request inputs against the manifest: every input
    /// present once, nothing else, dtypes and shapes (any batch size from 1
    /// to [`Model::max_batch`] along the batch dim), data sizes.
    pub fn prepare<'a>(&self, inputs: &[(&str, TensorRef<'a>)]) -> Result<Prepared<'a>> {
        let m = &self.manifest;
        let expected: Vec<&str> = self.input_names().collect();
        let mut ordered: Vec<Option<TensorRef<'a>>> = vec![None; m.params.len()];
        for (name, t) in inputs {
            let i = m
                .params
                .iter()
                .position(|p| !p.weight && p.name == *name)
                .ok_or_else(|| {
                    DeployError::BadInput(format!(
                        "the request has an input the model does not take; it takes {}",
                        expected.join(", ")
                    ))
                })?;
            if ordered[i].replace(*t).is_some() {
                return Err(DeployError::BadInput(format!(
                    "input {} given twice",
                    m.params[i].name
                )));
            }
        }
        if self.dynamic.is_some() {
            let shapes: Vec<(&str, &[i64])> = m
                .params
                .iter()
                .zip(&ordered)
                .filter_map(|(p, t)| t.as_ref().map(|t| (p.name.as_str(), t.shape)))
                .collect();
            m.check_shapes(&shapes)
                .map_err(|v| DeployError::ShapeConstraint {
                    dim: match v.dim {
                        Some(d) => format!("input {} dim {d}", v.input),
                        None => format!("input {}", v.input),
                    },
                    constraint: v.constraint.clone(),
                    message: v.to_string(),
                })?;
        }
        let mut batch: Option<i64> = None;
        let mut out = Vec::with_capacity(expected.len());
        for (i, p) in m.params.iter().enumerate() {
            if p.weight {
                continue;
            }
            let t = ordered[i]
                .ok_or_else(|| DeployError::BadInput(format!("missing input {}", p.name)))?;
            if t.dtype != self.dtypes[i] {
                return Err(DeployError::BadInput(format!(
                    "input {}: dtype must be {}",
                    p.name, p.dtype
                )));
            }
            let shape_ok = self.dynamic.is_some() // checked above
                || t.shape.len() == p.shape.len()
                && t.shape
                    .iter()
                    .zip(&p.shape)
                    .enumerate()
                    .all(|(d, (a, b))| a == b || Some(d) == m.batch_dim);
            if !shape_ok {
                return Err(DeployError::BadInput(format!(
                    "input {}: shape must be {:?}{}",
                    p.name,
                    p.shape,
                    m.batch_dim.map_or(String::new(), |d| format!(
                        " (any size up to {} along dim {d})",
                        self.max_batch().unwrap_or(0)
                    ))
                )));
            }
            if let Some(bd) = m.batch_dim {
                let b = t.shape[bd];
                m.bucket_for(b).map_err(|e| match m.batch_symbol() {
                    Some(sym) if self.dynamic.is_some() => DeployError::ShapeConstraint {
                        dim: format!("input {} dim {bd}", p.name),
                        constraint: sym.constraint(),
                        message: format!("input {} (dim {bd}): {e}", p.name),
                    },
                    _ => DeployError::BadInput(format!("input {} (dim {bd}): {e}", p.name)),
                })?;
                if batch.is_some_and(|x| x != b) {
                    return Err(DeployError::BadInput(
                        "inputs disagree on the batch size".into(),
                    ));
                }
                batch = Some(b);
            }
            if self.dtypes[i].host_size_of(t.shape) != Some(t.data.len()) {
                return Err(DeployError::BadInput(format!(
                    "input {}: data size does not match its dtype and shape",
                    p.name
                )));
            }
            out.push(t);
        }
        Ok(Prepared { inputs: out, batch })
    }

    /// Runs named inputs; returns the named outputs in manifest order.
    pub fn run(&self, inputs: &[(&str, TensorRef<'_>)]) -> Result<Vec<(String, Tensor)>> {
        let p = self.prepare(inputs)?;
        let outs = self.run_batch(&[p])?.pop().unwrap_or_default();
        Ok(self
            .manifest
            .outputs
            .iter()
            .map(|o| o.name.clone())
            .zip(outs)
            .collect())
    }

    /// Runs several prepared requests as ONE execution (concatenated along
    /// the batch dim and padded to the smallest bucket that holds them all;
    /// without a batch dim, `reqs` must hold one request) and returns each
    /// request's outputs.
    pub fn run_batch(&self, reqs: &[Prepared<'_>]) -> Result<Vec<Vec<Tensor>>> {
        let m = &self.manifest;
        let Some(bd) = m.batch_dim else {
            if reqs.len() != 1 {
                return Err(DeployError::BadInput(
                    "a model without a batch dim runs one request at a time".into(),
                ));
            }
            let exe = match &self.dynamic {
                Some(_) => self.program_for(
                    &reqs[0]
                        .inputs
                        .iter()
                        .map(|t| t.shape.to_vec())
                        .collect::<Vec<_>>(),
                )?,
                None => self.variants[0].exe.clone(),
            };
            let outs = self.execute(
                &exe,
                &reqs[0]
                    .inputs
                    .iter()
                    .map(|t| (t.data, t.shape.to_vec()))
                    .collect::<Vec<_>>(),
            )?;
            return Ok(vec![outs]);
        };
        if reqs.len() > 1 && !m.batchable() {
            return Err(DeployError::BadInput(
                "this artifact's rows are not independent: requests cannot be batched together"
                    .into(),
            ));
        }
        if self.dynamic.is_some() && reqs.len() > 1 {
            // Requests whose other dims differ (another `seq`) cannot share
            // one execution: each runs at its own shape.
            let off_batch = |r: &Prepared<'_>| -> Vec<Vec<i64>> {
                r.inputs
                    .iter()
                    .map(|t| {
                        let mut s = t.shape.to_vec();
                        s[bd] = 0;
                        s
                    })
                    .collect()
            };
            let first = off_batch(&reqs[0]);
            if reqs[1..].iter().any(|r| off_batch(r) != first) {
                let mut out = Vec::with_capacity(reqs.len());
                for r in reqs {
                    let one = Prepared {
                        inputs: r.inputs.clone(),
                        batch: r.batch,
                    };
                    out.extend(self.run_batch(std::slice::from_ref(&one))?);
                }
                return Ok(out);
            }
        }
        let total: i64 = reqs.iter().map(|r| r.batch.unwrap_or(0)).sum();
        let bucket = m
            .bucket_for(total)
            .map_err(|e| DeployError::BadInput(format!("a batch of {total} rows: {e}")))?;
        let in_params: Vec<usize> = (0..m.params.len())
            .filter(|&i| !m.params[i].weight)
            .collect();
        let mut args: Vec<(Vec<u8>, Vec<i64>)> = Vec::with_capacity(in_params.len());
        for (k, &pi) in in_params.iter().enumerate() {
            let mut shape = match &self.dynamic {
                // The request's own dims (all requests agree off the batch dim).
                Some(_) => reqs[0].inputs[k].shape.to_vec(),
                None => m.params[pi].shape.clone(),
            };
            let parts: Vec<(&[u8], i64)> = reqs
                .iter()
                .map(|r| (r.inputs[k].data, r.batch.unwrap_or(0)))
                .collect();
            let esize = self.dtypes[pi].host_byte_size();
            let data = if reqs.len() == 1 && total == bucket {
                reqs[0].inputs[k].data.to_vec()
            } else {
                concat_pad(&parts, &shape, bd, esize, bucket)
            };
            shape[bd] = bucket;
            args.push((data, shape));
        }
        let exe = match &self.dynamic {
            Some(_) => {
                self.program_for(&args.iter().map(|(_, s)| s.clone()).collect::<Vec<_>>())?
            }
            None => self
                .variants
                .iter()
                .find(|v| v.batch == Some(bucket))
                .ok_or_else(|| DeployError::BadInput(format!("no module for batch {bucket}")))?
                .exe
                .clone(),
        };
        let outs = self.execute(
            &exe,
            &args
                .iter()
                .map(|(d, s)| (&d[..], s.clone()))
                .collect::<Vec<_>>(),
        )?;
        for (o, spec) in outs.iter().zip(&m.outputs) {
            if o.shape.get(bd) != Some(&bucket) {
                return Err(DeployError::Execution(format!(
                    "output {} has shape {:?}: no {bucket} rows along the batch dim {bd} to split between requests (the artifact's batch dim is wrong for this output)",
                    spec.name, o.shape
                )));
            }
        }
        let mut per_req = Vec::with_capacity(reqs.len());
        let mut start = 0i64;
        for r in reqs {
            let b = r.batch.unwrap_or(0);
            let mut mine = Vec::with_capacity(outs.len());
            for o in &outs {
                let mut shape = o.shape.clone();
                let data = if reqs.len() == 1 && b == bucket {
                    o.data.clone()
                } else {
                    slice_rows(&o.data, &o.shape, bd, o.dtype.host_byte_size(), start, b)
                };
                shape[bd] = b;
                mine.push(Tensor {
                    dtype: o.dtype,
                    shape,
                    data,
                });
            }
            per_req.push(mine);
            start += b;
        }
        Ok(per_req)
    }

    /// A dynamic artifact's program for these request input shapes (in
    /// input order); weights keep the manifest's shapes.
    fn program_for(&self, input_shapes: &[Vec<i64>]) -> Result<LoadedExecutable> {
        let cache = self
            .dynamic
            .as_ref()
            .ok_or_else(|| DeployError::Execution("not a dynamic artifact".into()))?;
        let mut it = input_shapes.iter();
        let mut shapes = Vec::with_capacity(self.manifest.params.len());
        for p in &self.manifest.params {
            if p.weight {
                shapes.push(p.shape.clone());
            } else {
                shapes.push(
                    it.next()
                        .ok_or_else(|| DeployError::BadInput("too few inputs".into()))?
                        .clone(),
                );
            }
        }
        cache.get(&self.client, &shapes)
    }

    fn execute(&self, exe: &LoadedExecutable, inputs: &[(&[u8], Vec<i64>)]) -> Result<Vec<Tensor>> {
        let m = &self.manifest;
        let mut owned: Vec<Buffer> = Vec::with_capacity(inputs.len());
        let mut it = inputs.iter();
        for (i, p) in m.params.iter().enumerate() {
            if p.weight {
                continue;
            }
            let (data, shape) = it
                .next()
                .ok_or_else(|| DeployError::BadInput("too few inputs".into()))?;
            owned.push(
                self.client
                    .buffer_from_host_bytes(data, self.dtypes[i], shape, None)?,
            );
        }
        let mut own = owned.iter();
        let mut args: Vec<&Buffer> = Vec::with_capacity(m.params.len());
        for w in &self.weights {
            match w {
                Some(b) => args.push(b),
                None => args.push(
                    own.next()
                        .ok_or_else(|| DeployError::BadInput("too few inputs".into()))?,
                ),
            }
        }
        let outs = exe.execute(&args)?;
        if outs.len() != self.out_dtypes.len() {
            return Err(DeployError::Execution(format!(
                "the program returned {} results, the manifest lists {}",
                outs.len(),
                self.out_dtypes.len()
            )));
        }
        let mut res = Vec::with_capacity(outs.len());
        for (b, &dt) in outs.iter().zip(&self.out_dtypes) {
            let got = b.element_type()?;
            if got != dt {
                return Err(DeployError::Execution(format!(
                    "program returned {got:?}, the manifest says {dt:?}"
                )));
            }
            res.push(Tensor {
                dtype: got,
                shape: b.dims()?.to_vec(),
                data: b.to_host_bytes()?,
            });
        }
        Ok(res)
    }
}
