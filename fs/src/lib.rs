//! What several lfm crates do with files the same way, below all of them (it depends on no lfm
//! crate): removing what processes that died left behind ([`owners`]), and writing a file whole
//! or not at all ([`atomic`]).

pub mod atomic;
pub mod owners;

pub use atomic::{temporary_in, write_atomically, write_bytes_atomically};
pub use owners::remove_dead_owners;
pub use tempfile::TempPath;
