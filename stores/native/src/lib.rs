//! Native core of fiba-stream: the FiBA aggregator (`fiba`), the native twins of the built-in
//! monoids (`monoids`) and, with the `python` feature, the `stores._native` module.

pub mod changelog_layouts;
pub mod compact_vec;
pub mod compressed_batches;
pub mod event_records;
pub mod events;
pub mod fetched_records;
pub mod fiba;
pub mod json_text;
pub mod monoids;
pub mod overflow;
pub mod pending_writes;
#[cfg(feature = "python")]
mod py_io;
#[cfg(feature = "python")]
mod py_sequence;
#[cfg(feature = "python")]
mod python;
#[cfg(feature = "python")]
mod pywindows;
pub mod record_batch;
pub mod state_codec;
pub mod store_writes;
pub mod windows;
