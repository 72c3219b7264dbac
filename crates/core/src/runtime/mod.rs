//! What a long-running process needs around its work: the drain-then-stop
//! signal, backing off while a dependency is away, the metrics and
//! health probes, and the bounded HTTP listeners.

mod backoff;
pub mod http;
pub mod observe;
mod shutdown;

pub use backoff::{retry_until_stopped, Backoff};
pub use shutdown::Shutdown;
