//! gpufree's one integration-test binary (STYLE.md 13): real processes,
//! temporary device directories and the simulated NVML library.

#![allow(clippy::unwrap_used)] // Tests fail loudly by design.
#![allow(clippy::too_many_lines)] // A test reads as one story; its length is exempt.

mod architecture;
mod audit;
mod blind;
mod bpf;
mod bpf_cache;
mod builder;
mod bundle;
mod bundle_out;
mod check;
mod cmd;
mod contrib;
mod daemon;
mod demo;
mod drm;
#[path = "../common/env.rs"]
mod env;
mod evidence;
mod evil;
mod faults;
mod fleet;
mod from;
mod fuse;
mod harness;
mod help;
mod hooks;
mod idle;
mod incident;
mod k8s;
mod kill;
mod mapper;
mod mig;
mod mps;
mod newcomer;
mod nodes;
mod pattern;
mod pin;
mod prepare;
mod privilege;
mod procfs;
mod prometheus;
mod protect;
mod real_gpu;
mod record;
mod replay;
mod reuse;
mod scan;
#[path = "../common/scene.rs"]
mod scene;
mod serve;
mod shapes;
mod sim;
mod sizes;
mod slurm;
mod status;
mod supervised;
mod trust;
mod truth;
mod verdict;
mod view;
mod watch;
mod why;
mod words;
