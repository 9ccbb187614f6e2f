//! Calls a running `hlobridge serve` from Rust on `tch` tensors: the gRPC
//! `Predict` of an exported artifact, no Python.
//!
//! ```bash
//! LIBTORCH_USE_PYTORCH=1 PATH=$PWD/.venv/bin:$PATH \
//!   cargo build --release -p hlobridge-serve --features tch --example serve_client_tch
//! target/release/examples/serve_client_tch 127.0.0.1:PORT OUT_DIR NAME=IN.npy ...
//! ```
//!
//! Each `NAME=IN.npy` is one named input (read with `Tensor::read_npy`);
//! each output is written to `OUT_DIR/<name>.npy` and its name and shape
//! printed. float32, float64, int32 and int64 tensors cross as
//! little-endian bytes, row-major (contiguous copies of the inputs).

use hlobridge_serve::pb::predictor_client::PredictorClient;
use hlobridge_serve::pb::{NamedTensor, PredictRequest, Tensor as Wire};
use std::error::Error;
use tch::{Kind, Tensor};

type Res<T> = Result<T, Box<dyn Error>>;

/// The wire dtype name and byte width of a tch kind.
fn wire_dtype(kind: Kind) -> Res<(&'static str, usize)> {
    Ok(match kind {
        Kind::Float => ("f32", 4),
        Kind::Double => ("f64", 8),
        Kind::Int => ("i32", 4),
        Kind::Int64 => ("i64", 8),
        k => return Err(format!("dtype {k:?} is not supported by this client").into()),
    })
}

fn kind_of(dtype: &str) -> Res<Kind> {
    Ok(match dtype {
        "f32" => Kind::Float,
        "f64" => Kind::Double,
        "i32" => Kind::Int,
        "i64" => Kind::Int64,
        d => return Err(format!("the server returned dtype {d:?}, unsupported here").into()),
    })
}

fn to_wire(t: &Tensor) -> Res<Wire> {
    let t = t.contiguous();
    let (dtype, width) = wire_dtype(t.kind())?;
    let mut data = vec![0u8; t.numel() * width];
    t.copy_data_u8(&mut data, t.numel());
    Ok(Wire {
        dtype: dtype.into(),
        shape: t.size(),
        data,
    })
}

fn from_wire(w: &Wire) -> Res<Tensor> {
    let kind = kind_of(&w.dtype)?;
    Ok(Tensor::from_data_size(&w.data, &w.shape, kind))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Res<()> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: serve_client_tch ADDR OUT_DIR NAME=IN.npy ...";
    let addr = args.next().ok_or(usage)?;
    let out_dir = std::path::PathBuf::from(args.next().ok_or(usage)?);
    let mut inputs = Vec::new();
    for a in args {
        let (name, file) = a.split_once('=').ok_or(usage)?;
        inputs.push(NamedTensor {
            name: name.to_string(),
            tensor: Some(to_wire(&Tensor::read_npy(file)?)?),
        });
    }
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    let mut client = PredictorClient::new(channel);
    let reply = client
        .predict(PredictRequest { inputs })
        .await?
        .into_inner();
    std::fs::create_dir_all(&out_dir)?;
    for o in &reply.outputs {
        let name = &o.name;
        let t = from_wire(o.tensor.as_ref().ok_or("an output without a tensor")?)?;
        t.write_npy(out_dir.join(format!("{name}.npy")))?;
        println!("{name} {:?}", t.size());
    }
    Ok(())
}
