//! The messages of the kubelet's pod-resources API v1 that gpufree reads
//! (`k8s.io/kubelet/pkg/apis/podresources/v1/api.proto`, package `v1`),
//! written with prost's derive and the proto's field numbers: no protoc at
//! build time for five small messages. Fields gpufree does not read (CPU
//! ids, memory, topology, dynamic resources) are skipped by prost.

/// `ListPodResourcesRequest {}`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesRequest {}

/// `ListPodResourcesResponse { repeated PodResources pod_resources = 1; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesResponse {
    /// Every pod the kubelet runs.
    #[prost(message, repeated, tag = "1")]
    pub pod_resources: Vec<PodResources>,
}

/// `PodResources { string name = 1; string namespace = 2; repeated ContainerResources containers = 3; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodResources {
    /// The pod's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its namespace.
    #[prost(string, tag = "2")]
    pub namespace: String,
    /// Its containers.
    #[prost(message, repeated, tag = "3")]
    pub containers: Vec<ContainerResources>,
}

/// `ContainerResources { string name = 1; repeated ContainerDevices devices = 2; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerResources {
    /// The container's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The devices allocated to it.
    #[prost(message, repeated, tag = "2")]
    pub devices: Vec<ContainerDevices>,
}

/// `ContainerDevices { string resource_name = 1; repeated string device_ids = 2; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerDevices {
    /// `nvidia.com/gpu`, `nvidia.com/mig-1g.18gb`, `amd.com/gpu`...
    #[prost(string, tag = "1")]
    pub resource_name: String,
    /// The device plugin's ids (GPU and MIG UUIDs for NVIDIA's).
    #[prost(string, repeated, tag = "2")]
    pub device_ids: Vec<String>,
}

/// `AllocatableResourcesRequest {}`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AllocatableResourcesRequest {}

/// `AllocatableResourcesResponse { repeated ContainerDevices devices = 1; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AllocatableResourcesResponse {
    /// Every device the kubelet may allocate.
    #[prost(message, repeated, tag = "1")]
    pub devices: Vec<ContainerDevices>,
}

/// The gRPC paths of the two calls.
pub const LIST: &str = "/v1.PodResourcesLister/List";
/// See [`LIST`].
pub const ALLOCATABLE: &str = "/v1.PodResourcesLister/GetAllocatableResources";
