//! Runs an exported hlobridge artifact from Rust on `tch` tensors, no Python.
//!
//! ```bash
//! LIBTORCH_USE_PYTORCH=1 PATH=$PWD/.venv/bin:$PATH \
//!   cargo build --release -p hlobridge-deploy --features tch --example deploy_tch
//! target/release/examples/deploy_tch ARTIFACT OUT_DIR [IN.npy ...]
//! ```
//!
//! Inputs are `.npy` files in the manifest's input order (random normal
//! float32 inputs of the manifest's shapes when none are given); each output
//! is written to `OUT_DIR/<name>.npy` and its name, shape and sum printed.

use hlobridge_deploy::Model;
use tch::{Kind, Tensor};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: deploy_tch ARTIFACT OUT_DIR [IN.npy ...]";
    let dir = args.next().ok_or(usage)?;
    let out_dir = std::path::PathBuf::from(args.next().ok_or(usage)?);
    let files: Vec<String> = args.collect();
    let model = Model::load(&dir)?;
    let names: Vec<String> = model.input_names().map(str::to_string).collect();
    let inputs: Vec<Tensor> = if files.is_empty() {
        model
            .manifest()
            .params
            .iter()
            .filter(|p| !p.weight)
            .map(|p| Tensor::randn(p.shape.as_slice(), (Kind::Float, tch::Device::Cpu)))
            .collect()
    } else {
        files
            .iter()
            .map(Tensor::read_npy)
            .collect::<Result<_, _>>()?
    };
    if inputs.len() != names.len() {
        return Err(format!(
            "the model takes {} inputs ({}), got {}",
            names.len(),
            names.join(", "),
            inputs.len()
        )
        .into());
    }
    let named: Vec<(&str, &Tensor)> = names
        .iter()
        .map(String::as_str)
        .zip(inputs.iter())
        .collect();
    std::fs::create_dir_all(&out_dir)?;
    for (name, t) in model.run_tch(&named)? {
        t.write_npy(out_dir.join(format!("{name}.npy")))?;
        println!(
            "{name} {:?} sum={:.6}",
            t.size(),
            t.sum(Kind::Double).double_value(&[])
        );
    }
    Ok(())
}
