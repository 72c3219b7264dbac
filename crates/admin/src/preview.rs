//! What a webhook would do, asked before anything is sent: a preview of
//! its request for a document (`webhook preview`), and the check that its
//! templates compile and render on a sample document before it is stored.
//! Both render in `hookfleet-template`'s renderer processes, under the same
//! limits as an emit.

use std::sync::Arc;

use serde_json::Value;

use hookfleet_core::domain::{display_header_value, parse_headers, Header, Webhook};
use hookfleet_core::domain::{
    HEADER_FRAPPE_SIGNATURE, HEADER_ID, HEADER_SIGNATURE, HEADER_TIMESTAMP,
};
use hookfleet_core::request::NetworkPolicy;
use hookfleet_core::request::{
    check_body_size, check_url, AllowedHosts, RenderJob, Renderer, RequestBuilder, Templates,
};
use hookfleet_core::store::Store;
use hookfleet_core::RenderError;
use hookfleet_template::Sandbox;

use crate::error::OpsError;

/// What a webhook would do with a document, nothing recorded and nothing
/// sent (`hookfleet webhook preview`). The condition is rendered on its
/// own and the request regardless of it, as Frappe's preview does, so an
/// author sees the body even for a document that does not qualify.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct Preview {
    /// Whether the condition holds (no condition: true; an error: false).
    pub meets_condition: bool,
    /// Why the condition could not be evaluated.
    #[schema(required)]
    pub condition_error: Option<String>,
    /// The URL the request would go to (None when it could not be built).
    #[schema(required)]
    pub url: Option<String>,
    pub method: String,
    /// Every header the request would carry: Content-Type, the static
    /// headers with their values hidden, and the signature headers added
    /// when it is sent.
    pub headers: Vec<Header>,
    /// The body exactly as it would be sent.
    #[schema(required)]
    pub body: Option<String>,
    /// Why the request could not be built (a URL refused, a body that is
    /// not JSON, a template error).
    #[schema(required)]
    pub error: Option<String>,
}

/// What the headers made per attempt (the event id, the timestamp, the
/// signatures) show in a preview.
pub const SET_WHEN_SENT: &str = "[set when sent]";

/// `webhook preview NAME`: the webhook `name` previewed on `doc` (see
/// [`Preview`]), rendered on a blocking thread.
pub async fn preview(
    store: &Store,
    policy: &NetworkPolicy,
    name: &str,
    doc: Value,
) -> Result<Preview, OpsError> {
    let webhook = crate::webhooks::get(store, name).await?;
    let policy = policy.clone();
    Ok(tokio::task::spawn_blocking(move || render(&webhook, &doc, &policy)).await?)
}

/// Previews `webhook` on `doc` (see [`Preview`]): renders in a renderer,
/// under the same limits as an emit. Blocking.
pub fn render(webhook: &Webhook, doc: &Value, policy: &NetworkPolicy) -> Preview {
    let renderer = &Sandbox;
    let condition = webhook.condition.clone().filter(|c| !c.trim().is_empty());
    let (meets_condition, condition_error) = match condition {
        None => (true, None),
        Some(c) => {
            let templates = Arc::new(Templates {
                condition: Some(c),
                body: None,
                url: None,
                lenient: false,
                python_text: false,
            });
            match renderer
                .render(&[RenderJob {
                    templates: &templates,
                    doc,
                }])
                .pop()
            {
                Some(Ok(r)) => (r.condition.unwrap_or(true), None),
                Some(Err(e)) => (false, Some(e.to_string())),
                None => (false, Some("the renderer gave no answer".into())),
            }
        }
    };
    let mut unconditional = webhook.clone();
    unconditional.condition = None;
    let builder = RequestBuilder::new(Arc::new(unconditional), false);
    let built = RequestBuilder::build_all(&[(&builder, doc)], policy, renderer)
        .pop()
        .unwrap_or_else(|| Err(RenderError::Renderer("no answer".into())));
    let mut headers = Vec::new();
    let (url, body, mut error) = match built {
        Ok(Some(request)) => {
            headers.extend(request.headers);
            (Some(request.url), Some(request.body), None)
        }
        Ok(None) => (None, None, Some("nothing was built".into())),
        Err(e) => (None, None, Some(e.to_string())),
    };
    match parse_headers(&webhook.headers) {
        Ok(statics) => headers.extend(
            statics
                .into_iter()
                .filter(|h| !h.key.eq_ignore_ascii_case("content-type"))
                .map(|h| Header {
                    value: display_header_value(&h.key, &h.value, false),
                    key: h.key,
                }),
        ),
        Err(e) => {
            let e = format!("the static headers cannot be read: {e}");
            error = Some(error.map_or(e.clone(), |b| format!("{b}; {e}")));
        }
    }
    let mut per_attempt = vec![HEADER_ID, HEADER_TIMESTAMP];
    if webhook.secret.is_some() {
        per_attempt.extend([HEADER_FRAPPE_SIGNATURE, HEADER_SIGNATURE]);
    }
    headers.extend(per_attempt.into_iter().map(|key| Header {
        key: key.into(),
        value: SET_WHEN_SENT.into(),
    }));
    Preview {
        meets_condition,
        condition_error,
        url,
        method: webhook.method().as_str().into(),
        headers,
        body,
        error,
    }
}

/// The document templates are tried on when a webhook is added without
/// `--sample-doc`.
pub fn default_sample_doc(entity_type: &str) -> Value {
    serde_json::json!({ "doctype": entity_type, "name": "SAMPLE-0001" })
}

/// Checks that the webhook's templates compile, that its condition is one
/// expression, and that its body template renders to JSON (and its dynamic URL
/// to an http(s) URL) on `sample`, each within the renderer's time and memory
/// limits. Used before a webhook is stored.
///
/// On the default sample (a document with only a doctype and a name, when
/// none is given) a template that fails for want of a value
/// ([`RenderError::WantsValue`]: `doc.taxes[0].rate`, `doc.total / 100`)
/// passes, as it does in Frappe, which checks only that a template
/// compiles: what it names (filters, functions, methods) and its syntax are
/// still checked, and a real document that lacks the value records the
/// reason on its row. A sample given is a document the author vouches for:
/// there every failure is refused.
pub(crate) fn check_templates(
    webhook: Arc<Webhook>,
    sample: &Value,
    policy: &NetworkPolicy,
) -> Result<(), RenderError> {
    let renderer = &Sandbox;
    let on_default_sample = *sample == default_sample_doc(&webhook.entity_type);
    let builder = RequestBuilder::new(webhook, true);
    if *builder.allowed_hosts() == AllowedHosts::Unpinned {
        return Err(RenderError::Url(
            "the URL template must write its scheme (http:// or https://) and, if it renders its host, name the hosts it may reach with --allowed-host HOST[:PORT]".into(),
        ));
    }
    let Some(templates) = &builder.templates else {
        return Ok(());
    };
    let rendered = match renderer
        .render(&[RenderJob {
            templates,
            doc: sample,
        }])
        .pop()
        .unwrap_or_else(|| Err(RenderError::Renderer("no answer".into())))
    {
        Err(RenderError::WantsValue(_)) if on_default_sample => return Ok(()),
        other => other?,
    };
    if let Some(body) = &rendered.body {
        check_body_size(body.trim())?;
        serde_json::from_str::<serde::de::IgnoredAny>(body.trim()).map_err(|e| {
            RenderError::NotJson(format!(
                "{e} (rendered on the sample document {sample}: {})",
                body.trim()
            ))
        })?;
    }
    // The host is checked against the allowed ones at emit: on a sample
    // document, one the document chooses renders as `null`.
    if let Some(url) = &rendered.url {
        check_url(url, policy)?;
    }
    Ok(())
}
