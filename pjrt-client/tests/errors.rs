//! Bad input produces clear, typed errors (never panics or aborts).

mod common;
use common::*;
use pjrt_client::{CompileOptions, ElementType, Error, Plugin, Program};

#[test]
fn missing_plugin_file() {
    let err = Plugin::load("/nonexistent/dir/libpjrt_nothing.so").unwrap_err();
    assert!(matches!(err, Error::PluginNotFound { .. }), "{err}");
    assert!(err
        .to_string()
        .contains("/nonexistent/dir/libpjrt_nothing.so"));
}

#[test]
fn shared_library_that_is_not_a_plugin() {
    // Any real shared library without GetPjrtApi: use libm / libc.
    let candidates = [
        "/lib/x86_64-linux-gnu/libm.so.6",
        "/usr/lib/x86_64-linux-gnu/libm.so.6",
        "/lib/aarch64-linux-gnu/libm.so.6",
        "/usr/lib/aarch64-linux-gnu/libm.so.6",
        "/lib64/libm.so.6",
    ];
    let Some(lib) = candidates.iter().find(|p| std::path::Path::new(p).exists()) else {
        panic!("no libm found to test a non-PJRT shared library");
    };
    let err = Plugin::load(lib).unwrap_err();
    assert!(matches!(err, Error::NotAPjrtPlugin { .. }), "{err}");
    assert!(err.to_string().contains("GetPjrtApi"));
}

#[test]
fn file_that_is_not_a_shared_library() {
    let p = std::env::temp_dir().join(format!("hlobridge_not_a_lib_{}.so", std::process::id()));
    std::fs::write(&p, b"not an ELF file").unwrap();
    let err = Plugin::load(&p).unwrap_err();
    std::fs::remove_file(&p).ok();
    assert!(matches!(err, Error::PluginLoad { .. }), "{err}");
}

#[test]
fn invalid_module_is_a_compile_error() {
    let c = client(1);
    let err = c
        .compile(
            &Program::mlir_text("this is not mlir"),
            &CompileOptions::default(),
        )
        .unwrap_err();
    match &err {
        Error::Pjrt { function, .. } => assert_eq!(*function, "PJRT_Client_Compile"),
        other => panic!("unexpected error {other}"),
    }
    let err = c
        .compile(&Program::mlir_text(""), &CompileOptions::default())
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
}

#[test]
fn wrong_argument_count_shape_and_dtype() {
    let c = client(1);
    let exe = c
        .compile(
            &Program::mlir_text(&sine_exp_module(8)),
            &CompileOptions::default(),
        )
        .unwrap();
    let good = c.buffer_from_host(&[0f32; 8], &[8], None).unwrap();
    let err = exe.execute(&[&good]).unwrap_err();
    assert!(
        matches!(
            err,
            Error::ArgumentCount {
                expected: 2,
                got: 1
            }
        ),
        "{err}"
    );

    let wrong_shape = c.buffer_from_host(&[0f32; 4], &[2, 2], None).unwrap();
    let err = exe.execute(&[&good, &wrong_shape]).unwrap_err();
    match &err {
        Error::ArgumentShape {
            index: 1,
            expected,
            got,
        } => {
            assert_eq!(expected, &vec![8]);
            assert_eq!(got, &vec![2, 2]);
        }
        other => panic!("unexpected error {other}"),
    }
    assert!(err.to_string().contains("argument 1"));

    let wrong_type = c.buffer_from_host(&[0i32; 8], &[8], None).unwrap();
    let err = exe.execute(&[&wrong_type, &good]).unwrap_err();
    assert!(
        matches!(
            err,
            Error::ArgumentDtype {
                index: 0,
                expected: ElementType::F32,
                got: ElementType::S32
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("expected f32, got i32"), "{err}");
}

#[test]
fn host_data_size_mismatch() {
    let c = client(1);
    let err = c.buffer_from_host(&[0f32; 3], &[2, 2], None).unwrap_err();
    assert!(
        matches!(
            err,
            Error::HostSize {
                expected: 16,
                got: 12,
                ..
            }
        ),
        "{err}"
    );
    let err = c.buffer_from_host(&[0f32; 4], &[-1, 4], None).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    let b = c.buffer_from_host(&[0f32; 4], &[4], None).unwrap();
    assert!(b.to_host::<i32>().is_err());
    let mut small = [0u8; 3];
    assert!(matches!(
        b.copy_to_host_bytes(&mut small).unwrap_err(),
        Error::HostSize { .. }
    ));
}

#[test]
fn device_index_out_of_range() {
    let c = client(1);
    assert!(matches!(
        c.device(5).unwrap_err(),
        Error::InvalidArgument(_)
    ));
}
