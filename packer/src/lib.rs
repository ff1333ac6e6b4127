//! lfm-packer: ship exactly what a function needs, and unpack it safely once per node.
//!
//! It owns the pack format (a deterministic tar.zst whose first entry is the manifest, see
//! docs/pack.md), building packs from an existing venv or conda prefix and a Spec (or the whole
//! environment), the careful unpacker with its content-addressed, locked cache (its budget, eviction and the
//! leases that keep packs in use), and `verify`.
//! It reads the analyzer's Spec and distribution index but does not analyse, run or monitor
//! (verify's import probe is python/lfm_probes/import_all.py, embedded at build time).

pub mod cache;
pub mod manifest;
pub mod pack;
pub mod parts;
mod placement;
pub mod stdlib;
pub mod unpack;
pub mod verify;

pub use cache::PackLease;
pub use manifest::Manifest;
pub use pack::{pack, PackOptions, Packed, Selection};
pub use unpack::{unpack, unpack_leased, UnpackError, UnpackOptions};
