//! Core types shared by every tiersim crate: units and their parsers, the access record,
//! the error type, and typed plugin parameters (Ramulator-2 style: every plugin declares
//! its parameters with kinds and defaults, unknown keys are rejected).

pub mod access;
pub mod error;
pub mod hint;
pub mod params;
pub mod units;

pub use access::{Access, Op};
pub use error::{Error, Result};
pub use hint::prefetch;
pub use params::{ParamKind, ParamSpec, ParamValue, Params, PluginInfo};
pub use units::{Bytes, NodeId, Ns, PageId};
