//! What a long-running process needs around its work: the drain-then-stop
//! signal, backing off while a dependency is away, the metrics and
//! health probes, the bounded HTTP listeners, and traces.

mod backoff;
pub mod http;
pub mod observe;
mod shutdown;
pub mod trace;

pub use backoff::{retry_until_stopped, Backoff};
pub use shutdown::Shutdown;
