//! Compiles our own minimal `.proto` files with `protox` (pure Rust, no
//! system `protoc` needed) and generates Rust code with `prost-build`.

fn main() {
    let files = ["proto/xla_subset.proto"];
    for f in &files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = match protox::compile(files, ["proto"]) {
        Ok(fds) => fds,
        Err(e) => panic!("failed to parse our .proto files: {e}"),
    };
    let mut cfg = prost_build::Config::new();
    if let Err(e) = cfg.compile_fds(fds) {
        panic!("prost-build failed: {e}");
    }
}
