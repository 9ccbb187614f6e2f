//! The defensive reader and the writer: symlinks, FIFOs and devices are
//! refused without being read, sizes are capped from the manifest before
//! reading, the weights are checked against the manifest, and the writer
//! refuses a manifest the reader would refuse (a name used twice).

use hlobridge_artifact::writer::{demo_artifact, write_artifact};
use hlobridge_artifact::{read_artifact, ArtifactError, Manifest};
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hb-artifact-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn refused(r: Result<hlobridge_artifact::Verified, ArtifactError>, what: &str) -> String {
    match r {
        Err(ArtifactError::Refused { reason, .. }) => reason,
        other => panic!("{what}: expected a refusal, got {other:?}"),
    }
}

#[test]
fn reads_what_it_wrote_and_records_sizes() {
    let dir = tmp("ok");
    let hash = demo_artifact(&dir, &[1, 4]).unwrap();
    let v = read_artifact(&dir).unwrap();
    assert_eq!(v.manifest.content_hash, hash);
    assert!(v.manifest.modules.iter().all(|m| m.size.is_some()));
    assert_eq!(
        v.manifest.weights_size,
        Some(
            std::fs::metadata(dir.join("weights.safetensors"))
                .unwrap()
                .len()
        )
    );
    assert_eq!(v.weight_bytes("w").unwrap().len(), 12);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn symlinks_devices_and_fifos_are_refused_unread() {
    let dir = tmp("links");
    demo_artifact(&dir, &[2]).unwrap();
    let w = dir.join("weights.safetensors");
    let keep = dir.join("weights.copy");
    std::fs::rename(&w, &keep).unwrap();
    // A symlink to /dev/zero would be an endless read; to a good copy it is
    // still refused (the artifact is what is in the directory).
    std::os::unix::fs::symlink("/dev/zero", &w).unwrap();
    let r = refused(read_artifact(&dir), "symlink to /dev/zero");
    assert!(r.contains("symbolic link"), "{r}");
    std::fs::remove_file(&w).unwrap();
    std::os::unix::fs::symlink(&keep, &w).unwrap();
    refused(read_artifact(&dir), "symlink to a good copy");
    std::fs::remove_file(&w).unwrap();
    // A FIFO: refused at once, not waited on.
    let c = std::ffi::CString::new(w.to_str().unwrap()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let t = Instant::now();
    let r = refused(read_artifact(&dir), "fifo");
    assert!(r.contains("not a regular file"), "{r}");
    assert!(t.elapsed() < Duration::from_secs(5));
    std::fs::remove_file(&w).unwrap();
    // The manifest itself.
    std::fs::rename(&keep, &w).unwrap();
    assert!(read_artifact(&dir).is_ok());
    let m = dir.join("manifest.json");
    std::fs::rename(&m, dir.join("m.json")).unwrap();
    std::os::unix::fs::symlink(dir.join("m.json"), &m).unwrap();
    refused(read_artifact(&dir), "manifest symlink");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sizes_are_capped_before_reading() {
    let dir = tmp("sizes");
    demo_artifact(&dir, &[2]).unwrap();
    // A weights file larger than the manifest records: refused by its size.
    let w = dir.join("weights.safetensors");
    let mut bytes = std::fs::read(&w).unwrap();
    bytes.extend(std::iter::repeat_n(0u8, 1 << 20));
    std::fs::write(&w, &bytes).unwrap();
    let r = refused(read_artifact(&dir), "grown weights");
    assert!(r.contains("the manifest says"), "{r}");
    // A module file shorter than recorded.
    demo_artifact(&dir, &[2]).unwrap();
    std::fs::write(dir.join("module.b2.mlir"), "x").unwrap();
    refused(read_artifact(&dir), "short module");
    // A huge manifest: refused by the fixed cap, before JSON parsing.
    demo_artifact(&dir, &[2]).unwrap();
    let f = std::fs::File::create(dir.join("manifest.json")).unwrap();
    f.set_len(hlobridge_artifact::reader::MAX_MANIFEST + 1)
        .unwrap();
    let r = refused(read_artifact(&dir), "huge manifest");
    assert!(r.contains("allowed"), "{r}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn weights_must_match_the_manifest_and_names_be_unique() {
    let dir = tmp("names");
    demo_artifact(&dir, &[2]).unwrap();
    let v = read_artifact(&dir).unwrap();
    let mut m: Manifest = v.manifest.clone();
    // A forward argument named like a parameter: refused at write.
    m.params[0].name = "x".into();
    let mods: Vec<(&str, &str)> = v
        .modules
        .iter()
        .map(|(f, t)| (f.as_str(), t.as_str()))
        .collect();
    let w = [1u8; 12];
    let e = write_artifact(
        &tmp("names2"),
        &m,
        &mods,
        &[("x", pjrt_client::ElementType::F32, &[3], &w)],
    )
    .unwrap_err();
    assert!(e.to_string().contains("\"x\" twice"), "{e}");
    // A weight whose shape disagrees with the manifest.
    let m = v.manifest.clone();
    let e = write_artifact(
        &tmp("names3"),
        &m,
        &mods,
        &[("w", pjrt_client::ElementType::F32, &[1, 3], &w)],
    )
    .unwrap_err();
    assert!(matches!(e, ArtifactError::Safetensors(_)), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
