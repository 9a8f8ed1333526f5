//! A simulated `libnvidia-ml.so.1`.
//!
//! This crate builds a shared library that exports the NVML C ABI (the
//! symbols, struct layouts and return codes of `nvml.h`, API version 13) and
//! serves the GPUs described by the JSON file named by `GPUFREE_SIM_STATE`.
//! The file is re-read on every `nvmlInit*`. Any NVML client can load it:
//! gpufree, nvml-wrapper, pynvml, gpustat, nvitop. GPUs may be in MIG mode:
//! their MIG devices answer as NVML's MIG device handles do.
//!
//! It shares no code with gpufree's NVML backend on purpose: a bug in one
//! cannot hide the same bug in the other.
//!
//! The driver's evidence of a GPU's health (NVIDIA's recovery action,
//! remapped rows, retired pages pending, per-process utilisation, Xid
//! events) answers from the state file, NOT_SUPPORTED where it is left out.
//!
//! Functions for things a simulated GPU has not got (fans, clocks, ECC,
//! encoders...) are exported and return `NVML_ERROR_NOT_SUPPORTED`, as a
//! real driver does for a board without them, rather than being left out.

#![allow(unsafe_code)] // This crate is an FFI surface: every export is `extern "C"`.
#![allow(clippy::missing_safety_doc)] // The contract of each export is nvml.h's.
#![cfg_attr(test, allow(clippy::too_many_lines))] // Tests are exempt.

pub mod state;

mod device;
mod events;
mod health;
mod memory;
mod mig;
mod out;
mod pci;
mod processes;
mod ret;
mod session;
mod system;
mod unsupported;
mod view;

pub use device::*;
pub use events::*;
pub use health::*;
pub use memory::*;
pub use mig::*;
pub use pci::*;
pub use processes::*;
pub use ret::nvmlErrorString;
pub use session::*;
pub use system::*;
pub use unsupported::*;

#[cfg(test)]
mod tests;
