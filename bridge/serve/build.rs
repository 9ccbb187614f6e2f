//! Compiles `proto/proto/serve.proto` with `protox` (pure Rust, no system
//! `protoc`) and generates the tonic server and client with `tonic-build`.

fn main() {
    let file = "../../proto/proto/serve.proto";
    println!("cargo:rerun-if-changed={file}");
    let fds = match protox::compile([file], ["../../proto/proto"]) {
        Ok(fds) => fds,
        Err(e) => panic!("failed to parse serve.proto: {e}"),
    };
    if let Err(e) = tonic_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)
    {
        panic!("tonic-build failed: {e}");
    }
}
