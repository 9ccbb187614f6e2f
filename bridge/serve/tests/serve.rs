//! The gRPC service in-process on loopback: Predict (batched and not)
//! against host arithmetic, Metadata, health, each bad request's status with
//! the server still serving afterwards, bearer tokens, the public-address
//! refusal, and a graceful shutdown.

use hlobridge_serve::pb::{MetadataRequest, PredictRequest, Tensor};
use hlobridge_serve::{ServeConfig, ServeError};
use tonic::transport::Channel;
use tonic::Code;

mod common;
use common::{check, client, req, start_demo, x, Running};

fn tmp(name: &str) -> tempfile::TempDir {
    common::tmp("serve", name)
}

async fn start(buckets: &[i64], cfg: ServeConfig, name: &str) -> Running {
    start_demo(tmp(name).path(), buckets, cfg).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn predicts_metadata_health_and_bad_requests() {
    let cfg = ServeConfig {
        max_message_bytes: 4096,
        ..ServeConfig::default()
    };
    let mut srv = start(&[1, 4], cfg, "basic").await;
    let mut c = client(&srv.url()).await;
    for rows in [1, 3, 4] {
        let (xv, t) = x(rows, rows as f32);
        let out = c.predict(req(vec![("x", t)])).await.unwrap().into_inner();
        check(&xv, &out, rows);
    }
    let md = c.metadata(MetadataRequest {}).await.unwrap().into_inner();
    assert!(md.content_hash.starts_with("sha256:"));
    assert!(md.manifest_json.contains(&md.content_hash));

    let (_, good) = x(2, 0.0);
    let bad: Vec<(PredictRequest, Code)> = vec![
        (
            req(vec![(
                "x",
                Tensor {
                    shape: vec![2, 4],
                    ..good.clone()
                },
            )]),
            Code::InvalidArgument,
        ),
        (
            req(vec![(
                "x",
                Tensor {
                    shape: vec![5, 3],
                    ..good.clone()
                },
            )]),
            Code::InvalidArgument,
        ),
        (
            req(vec![(
                "x",
                Tensor {
                    shape: vec![-2, 3],
                    ..good.clone()
                },
            )]),
            Code::InvalidArgument,
        ),
        (
            req(vec![(
                "x",
                Tensor {
                    dtype: "f64".into(),
                    ..good.clone()
                },
            )]),
            Code::InvalidArgument,
        ),
        (
            req(vec![(
                "x",
                Tensor {
                    dtype: "nonsense".into(),
                    ..good.clone()
                },
            )]),
            Code::InvalidArgument,
        ),
        (
            req(vec![(
                "x",
                Tensor {
                    data: vec![0; 7],
                    ..good.clone()
                },
            )]),
            Code::InvalidArgument,
        ),
        (req(vec![]), Code::InvalidArgument),
        // The same input twice (the last one would win with a map).
        (
            req(vec![("x", good.clone()), ("x", good.clone())]),
            Code::InvalidArgument,
        ),
        (
            req(vec![("x", good.clone()), ("zz-request-data", good.clone())]),
            Code::InvalidArgument,
        ),
        (
            req(vec![(
                "x",
                Tensor {
                    data: vec![0; 8000],
                    shape: vec![4, 500],
                    ..good.clone()
                },
            )]),
            Code::OutOfRange,
        ),
    ];
    for (r, code) in bad {
        let e = c.predict(r).await.unwrap_err();
        assert_eq!(e.code(), code, "{e:?}");
        assert!(!e.message().contains("zz-request-data"));
        // Still serving.
        let (xv, t) = x(2, 1.0);
        check(
            &xv,
            &c.predict(req(vec![("x", t)])).await.unwrap().into_inner(),
            2,
        );
    }

    let ch = Channel::from_shared(srv.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut h = tonic_health::pb::health_client::HealthClient::new(ch);
    let st = h
        .check(tonic_health::pb::HealthCheckRequest {
            service: "hlobridge.serve.v1.Predictor".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        st.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );

    // Concurrent requests of mixed sizes, batching off: each gets its own rows.
    let mut tasks = Vec::new();
    for k in 0..16 {
        let mut c = c.clone();
        tasks.push(tokio::spawn(async move {
            let rows = 1 + k % 4;
            let (xv, t) = x(rows, k as f32);
            let out = c.predict(req(vec![("x", t)])).await.unwrap().into_inner();
            check(&xv, &out, rows);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    srv.stop.take().unwrap().send(()).unwrap();
    srv.done.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batching_splits_results_back() {
    let cfg = ServeConfig {
        batching: true,
        max_delay: std::time::Duration::from_millis(20),
        ..ServeConfig::default()
    };
    let mut srv = start(&[1, 2, 8], cfg, "batch").await;
    let c = client(&srv.url()).await;
    let mut tasks = Vec::new();
    for k in 0..24 {
        let mut c = c.clone();
        tasks.push(tokio::spawn(async move {
            let rows = 1 + k % 3;
            let (xv, t) = x(rows, k as f32 * 0.1);
            let out = c.predict(req(vec![("x", t)])).await.unwrap().into_inner();
            check(&xv, &out, rows);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    srv.stop.take().unwrap().send(()).unwrap();
    srv.done.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_token_and_public_address() {
    let dir = tmp("tok");
    std::fs::create_dir_all(dir.path()).unwrap();
    let tf = dir.path().join("token");
    std::fs::write(&tf, "s3cret-token-0123456789\n").unwrap();
    let cfg = ServeConfig {
        token_file: Some(tf.clone()),
        ..ServeConfig::default()
    };
    let mut srv = start(&[2], cfg, "tokart").await;
    let mut c = client(&srv.url()).await;
    let (xv, t) = x(2, 0.5);
    let e = c.predict(req(vec![("x", t.clone())])).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);
    let mut r = tonic::Request::new(req(vec![("x", t.clone())]));
    r.metadata_mut().insert(
        "authorization",
        "Bearer wrong-token-0123456789".parse().unwrap(),
    );
    assert_eq!(
        c.predict(r).await.unwrap_err().code(),
        Code::Unauthenticated
    );
    let mut r = tonic::Request::new(req(vec![("x", t)]));
    r.metadata_mut().insert(
        "authorization",
        "Bearer s3cret-token-0123456789".parse().unwrap(),
    );
    check(&xv, &c.predict(r).await.unwrap().into_inner(), 2);
    srv.stop.take().unwrap().send(()).unwrap();
    srv.done.await.unwrap().unwrap();

    let public = ServeConfig {
        addr: "0.0.0.0:0".parse().unwrap(),
        ..ServeConfig::default()
    };
    assert!(matches!(public.security(), Err(ServeError::Config(_))));
    let public = ServeConfig {
        token_file: Some(tf),
        ..public
    };
    assert!(public.security().unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_and_shutdown_while_busy() {
    // Batching with a long delay holds requests in the worker, so shutdown
    // starts while they are surely in flight.
    let cfg = ServeConfig {
        batching: true,
        max_delay: std::time::Duration::from_millis(400),
        ..ServeConfig::default()
    };
    let short = ServeConfig {
        deadline: std::time::Duration::from_millis(50),
        ..cfg.clone()
    };
    let mut srv = start(&[8], short, "deadline").await;
    let mut c = client(&srv.url()).await;
    let (_, t) = x(4, 0.0);
    let e = c.predict(req(vec![("x", t)])).await.unwrap_err();
    assert_eq!(e.code(), Code::DeadlineExceeded);
    srv.stop.take().unwrap().send(()).unwrap();
    srv.done.await.unwrap().unwrap();

    let mut srv = start(&[8], cfg, "drain").await;
    let c = client(&srv.url()).await;
    let mut tasks = Vec::new();
    for k in 0..3 {
        let mut c = c.clone();
        tasks.push(tokio::spawn(async move {
            let (xv, t) = x(2, k as f32);
            let out = c.predict(req(vec![("x", t)])).await.unwrap().into_inner();
            check(&xv, &out, 2);
        }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    srv.stop.take().unwrap().send(()).unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    srv.done.await.unwrap().unwrap();
}
