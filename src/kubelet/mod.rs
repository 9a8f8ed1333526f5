//! The kubelet's pod-resources API (gRPC over the unix socket
//! `/var/lib/kubelet/pod-resources/kubelet.sock`): which devices each pod's
//! containers were allocated, and which devices the node may allocate.
//! Collection: one read per snapshot, bounded by a deadline, its failure
//! kept as a value.

pub mod api;

use crate::model::{Allocation, KubeletDown, KubeletView, PodName};
use std::path::Path;
use std::time::Duration;

/// The socket's usual path.
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

/// Reads the allocations and the allocatable devices from the kubelet at
/// `socket`, giving up after `within`; a failure is the view's `error`.
pub fn read(socket: &Path, within: Duration) -> KubeletView {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let result = match runtime {
        Ok(rt) => rt.block_on(async {
            tokio::time::timeout(within, ask(socket))
                .await
                .unwrap_or(Err(KubeletDown::Timeout { within }))
        }),
        Err(e) => Err(KubeletDown::Runtime {
            error: e.to_string(),
        }),
    };
    match result {
        Ok((pods, allocations, allocatable)) => KubeletView {
            socket: socket.display().to_string(),
            pods,
            allocations,
            allocatable,
            error: None,
        },
        Err(why) => KubeletView {
            socket: socket.display().to_string(),
            error: Some(why),
            ..KubeletView::default()
        },
    }
}

/// The two calls on one connection.
async fn ask(socket: &Path) -> Result<(Vec<PodName>, Vec<Allocation>, Vec<String>), KubeletDown> {
    let path = socket.to_path_buf();
    // The URI is never dialed: the connector opens the unix socket.
    let channel = tonic::transport::Endpoint::from_static("http://kubelet.invalid")
        .connect_with_connector(tower::service_fn(move |_: tonic::codegen::http::Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
        .await
        .map_err(|e| KubeletDown::Connect {
            error: e.to_string(),
        })?;
    let mut grpc = tonic::client::Grpc::new(channel);
    let list: api::ListPodResourcesResponse =
        call(&mut grpc, api::LIST, api::ListPodResourcesRequest {}).await?;
    let allocatable: api::AllocatableResourcesResponse = call(
        &mut grpc,
        api::ALLOCATABLE,
        api::AllocatableResourcesRequest {},
    )
    .await?;
    let pods = list
        .pod_resources
        .iter()
        .map(|p| PodName {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
        })
        .collect();
    let allocations = list
        .pod_resources
        .into_iter()
        .flat_map(|pod| {
            pod.containers.into_iter().flat_map(move |c| {
                let (namespace, name) = (pod.namespace.clone(), pod.name.clone());
                c.devices.into_iter().flat_map(move |d| {
                    let (namespace, name, container) =
                        (namespace.clone(), name.clone(), c.name.clone());
                    d.device_ids.into_iter().map(move |id| Allocation {
                        namespace: namespace.clone(),
                        pod: name.clone(),
                        container: container.clone(),
                        resource: d.resource_name.clone(),
                        device_id: id,
                    })
                })
            })
        })
        .collect();
    let allocatable = allocatable
        .devices
        .into_iter()
        .flat_map(|d| d.device_ids)
        .collect();
    Ok((pods, allocations, allocatable))
}

/// One unary call.
async fn call<Req, Resp>(
    grpc: &mut tonic::client::Grpc<tonic::transport::Channel>,
    path: &'static str,
    request: Req,
) -> Result<Resp, KubeletDown>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    let failed = |error: String| KubeletDown::Call {
        path: path.to_string(),
        error,
    };
    grpc.ready().await.map_err(|e| failed(e.to_string()))?;
    let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
    grpc.unary(
        tonic::Request::new(request),
        tonic::codegen::http::uri::PathAndQuery::from_static(path),
        codec,
    )
    .await
    .map(tonic::Response::into_inner)
    .map_err(|status| failed(status.message().to_string()))
}
