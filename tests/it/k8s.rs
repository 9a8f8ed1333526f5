//! The kubelet's allocations joined with who holds the GPUs: a fake
//! kubelet serves the pod-resources API (gRPC, v1) on a temporary unix
//! socket; holders sit in pod-shaped cgroups of a fake /proc, their pods
//! named by kubelet-style log directories.

use crate::harness::*;
use gpufree::kubelet::api::{
    AllocatableResourcesRequest, AllocatableResourcesResponse, ContainerDevices,
    ContainerResources, ListPodResourcesRequest, ListPodResourcesResponse, PodResources,
    ALLOCATABLE, LIST,
};
use serde_json::{json, Value};
use std::convert::Infallible;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};
use tonic::codegen::http;

const GIB: u64 = 1 << 30;

fn uuid(i: u32) -> String {
    format!("GPU-aa{i:02}bb00-1111-2222-3333-444455556666")
}

/// A pod with one container holding `gpus`.
fn pod(namespace: &str, name: &str, gpus: &[u32]) -> PodResources {
    PodResources {
        name: name.into(),
        namespace: namespace.into(),
        containers: vec![ContainerResources {
            name: "main".into(),
            devices: vec![ContainerDevices {
                resource_name: "nvidia.com/gpu".into(),
                device_ids: gpus.iter().map(|&g| uuid(g)).collect(),
            }],
        }],
    }
}

/// The answers of the fake kubelet.
#[derive(Clone)]
struct Kubelet {
    list: ListPodResourcesResponse,
    allocatable: AllocatableResourcesResponse,
}

/// One unary answer.
struct Answer<T>(T);

impl<Req: Send + 'static, T: Clone + Send + 'static> tonic::server::UnaryService<Req>
    for Answer<T>
{
    type Response = T;
    type Future = std::future::Ready<Result<tonic::Response<T>, tonic::Status>>;
    fn call(&mut self, _: tonic::Request<Req>) -> Self::Future {
        std::future::ready(Ok(tonic::Response::new(self.0.clone())))
    }
}

impl tonic::server::NamedService for Kubelet {
    const NAME: &'static str = "v1.PodResourcesLister";
}

type Reply = http::Response<tonic::body::Body>;

impl tower::Service<http::Request<tonic::body::Body>> for Kubelet {
    type Response = Reply;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Reply, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let me = self.clone();
        Box::pin(async move {
            Ok(match req.uri().path() {
                p if p == LIST => {
                    let codec = tonic_prost::ProstCodec::<
                        ListPodResourcesResponse,
                        ListPodResourcesRequest,
                    >::default();
                    tonic::server::Grpc::new(codec)
                        .unary(Answer(me.list), req)
                        .await
                }
                p if p == ALLOCATABLE => {
                    let codec = tonic_prost::ProstCodec::<
                        AllocatableResourcesResponse,
                        AllocatableResourcesRequest,
                    >::default();
                    tonic::server::Grpc::new(codec)
                        .unary(Answer(me.allocatable), req)
                        .await
                }
                _ => tonic::Status::unimplemented("no such call").into_http(),
            })
        })
    }
}

/// Serves `k` on a unix socket in `dir` from a thread of its own.
fn serve(dir: &Path, k: Kubelet) -> PathBuf {
    let socket = dir.join("kubelet.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::UnixListener::from_std(listener).unwrap();
            let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
            // One service, no router: the server takes it as it is.
            let _ = tonic::transport::Server::builder()
                .serve_with_incoming(k, incoming)
                .await;
        });
    });
    socket
}

/// A holder of `/dev/nvidia{gpu}` in the pod with `uid`.
fn in_pod(fake: &FakeProc, d: &TestDir, pid: u32, uid: &str, gpu: u32) {
    let node = d.node(&format!("nvidia{gpu}"));
    let cgroup = format!(
        "0::/kubepods.slice/kubepods-pod{}.slice/cri-containerd-{}.scope\n",
        uid.replace('-', "_"),
        "ab".repeat(32)
    );
    let fds: &[&Path] = &[&node];
    fake.add(&FakeProcess {
        pid,
        ppid: 1,
        comm: "python3",
        state: 'S',
        start: 100 + u64::from(pid),
        cmdline: &["python3", "serve.py"],
        exe: "/usr/bin/python3.12",
        uid: 1000,
        cgroup: &cgroup,
        fds,
        maps: &[],
    });
}

const UID_A: &str = "aaaaaaaa-0000-0000-0000-000000000001";
const UID_B: &str = "bbbbbbbb-0000-0000-0000-000000000002";
const UID_C: &str = "cccccccc-0000-0000-0000-000000000003";

/// GPU 0 allocated to ml/a (its process holds it) and held by ml/b's
/// process too; GPU 1 allocated to ml/b, held by the process of ml/c, a
/// pod the kubelet no longer runs; GPU 2 allocated to nobody, 4 GiB used.
fn cluster(d: &TestDir, fake: &FakeProc) -> (PathBuf, PathBuf, PathBuf) {
    let listed =
        |pid: u32, gib: u64| json!({"pid": pid, "used_bytes": gib * GIB, "visible": "always"});
    let mut g0 = sim_gpu(0, &[], 0);
    g0["processes"] = json!([listed(100, 8), listed(200, 2)]);
    let mut g1 = sim_gpu(1, &[], 0);
    g1["processes"] = json!([listed(300, 3)]);
    let mut g2 = sim_gpu(2, &[], 0);
    g2["leaked_bytes"] = json!(4 * GIB);
    let state = d.state(&sim_state(vec![g0, g1, g2]));
    in_pod(fake, d, 100, UID_A, 0);
    in_pod(fake, d, 200, UID_B, 0);
    in_pod(fake, d, 300, UID_C, 1);
    let logs = d.tmp.path().join("pods");
    for (name, uid) in [("a", UID_A), ("b", UID_B), ("c", UID_C)] {
        std::fs::create_dir_all(logs.join(format!("ml_{name}_{uid}"))).unwrap();
    }
    let socket = serve(
        d.tmp.path(),
        Kubelet {
            list: ListPodResourcesResponse {
                pod_resources: vec![
                    pod("ml", "a", &[0]),
                    pod("ml", "b", &[1]),
                    pod("ml", "idle", &[]),
                ],
            },
            allocatable: AllocatableResourcesResponse {
                devices: vec![ContainerDevices {
                    resource_name: "nvidia.com/gpu".into(),
                    device_ids: (0..3).map(uuid).collect(),
                }],
            },
        },
    );
    (state, logs, socket)
}

/// `gpufree WORDS` on the cluster's node: its /proc and devices, the
/// simulator, and the kubelet's files and socket in `env`.
fn on_node(
    words: &[&str],
    d: &TestDir,
    fake: &FakeProc,
    state: &Path,
    env: &[(&str, &Path)],
) -> Gpufree {
    Gpufree::new(words)
        .proc_root(&fake.root)
        .on(d, state)
        .envs(env.iter().copied())
}

#[test]
fn allocations_are_joined_with_the_holders() {
    let d = TestDir::new(3);
    let fake = FakeProc::idle(d.tmp.path());
    let (state, logs, socket) = cluster(&d, &fake);
    let env = [
        ("GPUFREE_POD_LOG_DIR", logs.as_path()),
        ("GPUFREE_KUBELET_SOCKET", socket.as_path()),
    ];
    let r = on_node(&["why", "--json"], &d, &fake, &state, &env).run();
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    let doc = r.json();
    assert!(doc["kubelet"]["error"].is_null(), "{}", doc["kubelet"]);
    assert_eq!(doc["kubelet"]["allocations"].as_array().unwrap().len(), 2);

    let other = findings_of(&doc, "other-pods-gpu");
    assert_eq!(other.len(), 1, "{doc}");
    assert_eq!(other[0]["pids"], json!([200]));
    assert_eq!(other[0]["gpus"], json!([0]));
    let m = other[0]["message"].as_str().unwrap();
    assert!(
        m.contains("pod ml/b holds GPU 0, which the kubelet allocated to ml/a"),
        "{m}"
    );

    let gone = findings_of(&doc, "gone-pod");
    assert_eq!(gone.len(), 1, "{doc}");
    assert_eq!(gone[0]["pids"], json!([300]));
    assert!(
        gone[0]["message"].as_str().unwrap().contains("pod ml/c"),
        "{}",
        gone[0]
    );

    let unallocated = findings_of(&doc, "unallocated-memory");
    assert_eq!(unallocated.len(), 1, "{doc}");
    assert_eq!(unallocated[0]["gpus"], json!([2]));
    assert!(unallocated[0]["message"]
        .as_str()
        .unwrap()
        .contains("4.0 GiB in use but the kubelet allocated it to no pod"));

    // pod ml/a's process on its own GPU is none of these.
    for f in doc["findings"].as_array().unwrap() {
        let kind = f["kind"].as_str().unwrap();
        if ["other-pods-gpu", "gone-pod", "unallocated-memory"].contains(&kind) {
            assert!(!f["pids"].as_array().unwrap().contains(&json!(100)), "{f}");
        }
    }

    let metrics = on_node(&["metrics"], &d, &fake, &state, &env).run().stdout;
    let series = |gpu: u32| {
        metrics
            .lines()
            .find(|l| l.starts_with(&format!("gpufree_unallocated_used_bytes{{gpu=\"{gpu}\"")))
            .unwrap_or_default()
            .to_string()
    };
    assert!(series(2).ends_with(&format!(" {}", 4 * GIB)), "{metrics}");
    assert!(series(0).ends_with(" 0"), "{metrics}");
    // Each holder's series names the pod its GPU is allocated to.
    let holder = |pid: u32| {
        metrics
            .lines()
            .find(|l| {
                l.starts_with("gpufree_process_gpu_memory_bytes{")
                    && l.contains(&format!("pid=\"{pid}\""))
            })
            .unwrap_or_default()
            .to_string()
    };
    assert!(holder(200).contains("allocated_pod=\"ml/a\""), "{metrics}");
    assert!(holder(300).contains("allocated_pod=\"ml/b\""), "{metrics}");

    // A monitor hears of them too: `check` counts them (condition pod).
    let state_file = d.tmp.path().join("check.json");
    let r = on_node(
        &[
            "check",
            "--format",
            "json",
            "--state",
            state_file.to_str().unwrap(),
        ],
        &d,
        &fake,
        &state,
        &env,
    )
    .run();
    let doc = r.json();
    assert_eq!(doc["level"], "critical", "{doc}");
    let pods: Vec<&Value> = doc["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["condition"] == "pod")
        .collect();
    assert_eq!(pods.len(), 3, "{doc}");
    assert!(pods.iter().any(|p| p["message"]
        .as_str()
        .unwrap()
        .contains("the kubelet no longer runs that pod")));
}

#[test]
fn a_kubelet_that_does_not_answer_is_said_not_guessed() {
    let d = TestDir::new(3);
    let fake = FakeProc::idle(d.tmp.path());
    let (state, logs, _) = cluster(&d, &fake);
    // A socket file nobody listens on.
    let dead = d.tmp.path().join("dead.sock");
    drop(std::os::unix::net::UnixListener::bind(&dead).unwrap());
    let env = [
        ("GPUFREE_POD_LOG_DIR", logs.as_path()),
        ("GPUFREE_KUBELET_SOCKET", dead.as_path()),
    ];
    let doc = on_node(&["status", "--json"], &d, &fake, &state, &env)
        .run()
        .json();
    assert!(
        doc["kubelet"]["error"]
            .as_str()
            .unwrap()
            .contains("cannot connect"),
        "{}",
        doc["kubelet"]
    );
    assert!(
        findings_of(&doc, "gone-pod").is_empty() && findings_of(&doc, "other-pods-gpu").is_empty()
    );
}
