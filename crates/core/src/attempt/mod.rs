//! One attempt of a delivery: the claim that allows it (its request and its
//! webhook's credentials, opened), the request on the wire (signed afresh,
//! sent with the webhook's timeout), and what the answer means.

mod claim;
mod judge;
mod send;

pub use claim::{Claim, ClaimSource, Destination, SealedCredentials, LEASE_MARGIN};
pub use judge::{judge, AttemptReport, Outcome, OutcomeStatus, RESPONSE_BODY_LIMIT};
pub use send::{http_client, send};
