//! The storage tier as a program sees it through the kernel: the file I/O path and its costs
//! (`iopath`), the page cache with readahead and writeback (`pagecache`), a storage engine
//! (`kvstore`), and the closed-loop file benchmark that runs them on device models (`bench`),
//! after the measurements of reference seed 001 (SCM vs an Optane SSD under WiredTiger).

pub mod bench;
pub mod iopath;
pub mod kvstore;
pub mod pagecache;

pub use bench::{Bench, BenchOut};
