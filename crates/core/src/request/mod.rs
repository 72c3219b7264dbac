//! Requests as they are built at emit: a document and a webhook's templates
//! in (rendered through the [`Renderer`] seam), the frozen request out,
//! checked against where it may go (the SSRF guard's [`NetworkPolicy`] and
//! the webhook's allowed hosts).

mod build;
pub mod python_json;
mod ssrf;

pub use build::{
    check_body_size, check_url, parse_host_entry, AllowedHosts, BuiltRequest, RenderJob, Rendered,
    Renderer, RequestBuilder, Templates, MAX_BODY_BYTES, MAX_TEMPLATE_BYTES, MAX_URL_BYTES,
};
pub(crate) use ssrf::GuardedResolver;
pub use ssrf::{Blocked, NetworkPolicy};
