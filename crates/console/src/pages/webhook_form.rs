//! The webhook form of the pages ("New webhook", "Edit"): its fields as
//! text, filled from a stored webhook or from what was posted, and read
//! into the JSON definition the API takes (`definitions::apply_json`), so
//! a webhook made on a page is checked and stored exactly as one made
//! through the API or the CLI.

use serde::Serialize;
use serde_json::{Map, Value};

use hookfleet_core::domain::{format_duration, WebhookSpec};

use super::actions::Fields;
use crate::ApiError;

/// The form's fields, as the page shows them. The secret is never among
/// them: it is neither shown nor, when a form is refused, sent back.
#[derive(Serialize, Debug, Default, Clone, PartialEq, Eq)]
pub struct WebhookForm {
    pub name: String,
    pub entity_type: String,
    pub event: String,
    pub request_url: String,
    pub request_method: String,
    pub request_structure: String,
    pub body_template: String,
    pub condition: String,
    /// One `Key: value` a line; a stored value is shown as `[hidden]` and
    /// kept when sent back so.
    pub headers: String,
    pub timeout: String,
    pub queue: String,
    pub max_retries: String,
    pub max_concurrency: String,
    pub rate_limit: String,
    pub enabled: bool,
    /// Editing: a secret is stored (an empty secret field keeps it).
    pub signed: bool,
    /// Editing: the stored secret goes (the webhook stops signing).
    pub remove_secret: bool,
}

impl WebhookForm {
    /// A new webhook's form, with the defaults a definition gets.
    pub fn blank() -> WebhookForm {
        let spec = WebhookSpec::new("", "", "", "");
        WebhookForm {
            request_method: spec.method.as_str().into(),
            request_structure: spec.structure.as_str().into(),
            timeout: format_duration(spec.timeout),
            queue: spec.queue,
            max_retries: spec.max_retries.to_string(),
            enabled: spec.enabled,
            ..WebhookForm::default()
        }
    }

    /// The form of a stored webhook, from its view (`WebhookView`, as the
    /// full token sees it: header values hidden, no secret).
    pub fn of_view(w: &Value) -> WebhookForm {
        let text = |k: &str| match &w[k] {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            _ => String::new(),
        };
        let headers = w["headers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|h| {
                format!(
                    "{}: {}\n",
                    h["key"].as_str().unwrap_or_default(),
                    h["value"].as_str().unwrap_or_default()
                )
            })
            .collect();
        WebhookForm {
            headers,
            enabled: w["enabled"].as_bool().unwrap_or(true),
            signed: w["signed"].as_bool().unwrap_or(false),
            remove_secret: false,
            ..WebhookForm::of_text(text)
        }
    }

    /// The fields that are text as such, each as `text` gives it by name
    /// (the rest left to the caller).
    fn of_text(text: impl Fn(&str) -> String) -> WebhookForm {
        WebhookForm {
            name: text("name"),
            entity_type: text("entity_type"),
            event: text("event"),
            request_url: text("request_url"),
            request_method: text("request_method"),
            request_structure: text("request_structure"),
            body_template: text("body_template"),
            condition: text("condition"),
            headers: String::new(),
            timeout: text("timeout"),
            queue: text("queue"),
            max_retries: text("max_retries"),
            max_concurrency: text("max_concurrency"),
            rate_limit: text("rate_limit"),
            enabled: false,
            signed: false,
            remove_secret: false,
        }
    }

    /// The form as posted (`signed`: whether the webhook edited has a
    /// secret, which the form does not say).
    pub fn posted(f: &Fields, signed: bool) -> WebhookForm {
        let text = |k: &str| f.get(k).unwrap_or_default().to_string();
        WebhookForm {
            headers: text("headers"),
            enabled: f.get("enabled").is_some(),
            signed,
            remove_secret: f.get("remove_secret").is_some(),
            ..WebhookForm::of_text(text)
        }
    }

    /// The JSON definition this form asks for, as `POST /api/v1/webhooks`
    /// (or, `editing`, `PATCH`) takes it, with `secret` (the secret field:
    /// empty keeps or leaves none). A blank optional field is the default
    /// (for a new webhook) or kept (editing); a blank template, condition
    /// or limit is none. What a field cannot say (a number that is not
    /// one, a header line with no colon) is refused here, naming the
    /// field; the rest is the definition's validation.
    pub fn definition(&self, secret: &str, editing: bool) -> Result<Map<String, Value>, ApiError> {
        let mut d = Map::new();
        for (key, value) in [
            ("name", &self.name),
            ("entity_type", &self.entity_type),
            ("event", &self.event),
            ("request_url", &self.request_url),
            ("request_method", &self.request_method),
            ("request_structure", &self.request_structure),
        ] {
            d.insert(key.into(), value.trim().into());
        }
        for (key, value) in [
            ("body_template", &self.body_template),
            ("condition", &self.condition),
            ("rate_limit", &self.rate_limit),
        ] {
            d.insert(key.into(), optional(value));
        }
        for (key, value) in [("timeout", &self.timeout), ("queue", &self.queue)] {
            if !value.trim().is_empty() {
                d.insert(key.into(), value.trim().into());
            }
        }
        if let Some(n) = number("max retries", &self.max_retries)? {
            d.insert("max_retries".into(), n.into());
        }
        let concurrency = number("max concurrency", &self.max_concurrency)?;
        d.insert(
            "max_concurrency".into(),
            concurrency.map_or(Value::Null, Value::from),
        );
        d.insert("headers".into(), headers(&self.headers)?);
        d.insert("enabled".into(), self.enabled.into());
        match (secret.is_empty(), editing && self.remove_secret) {
            (false, true) => {
                return Err(ApiError::bad_request(
                    "secret: give a new secret or remove the stored one, not both",
                ))
            }
            (true, true) => {
                d.insert("secret".into(), Value::Null);
            }
            (false, false) => {
                d.insert("secret".into(), secret.into());
            }
            // No secret given: a new webhook signs nothing, an edited one
            // keeps what it has.
            (true, false) => {}
        }
        Ok(d)
    }
}

/// A multi-line field's text, or null when blank.
fn optional(text: &str) -> Value {
    if text.trim().is_empty() {
        Value::Null
    } else {
        text.into()
    }
}

/// A whole number, or None when blank.
fn number(field: &str, text: &str) -> Result<Option<i64>, ApiError> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    text.parse()
        .map(Some)
        .map_err(|_| ApiError::bad_request(format!("{field}: {text:?} is not a whole number")))
}

/// The headers field (`Key: value` a line, blank lines skipped) as the
/// definition's list.
fn headers(text: &str) -> Result<Value, ApiError> {
    let mut list = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            return Err(ApiError::bad_request(format!(
                "headers: line {} is not \"Key: value\"",
                n + 1
            )));
        };
        list.push(serde_json::json!({ "key": key.trim(), "value": value.trim() }));
    }
    Ok(Value::Array(list))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn form() -> WebhookForm {
        WebhookForm {
            name: " orders ".into(),
            entity_type: "Sales Order".into(),
            event: "on_submit".into(),
            request_url: "https://hooks.example.com/orders".into(),
            headers: "Authorization: [hidden]\n\nX-Team: billing\n".into(),
            ..WebhookForm::blank()
        }
    }

    #[test]
    fn a_new_webhook_s_form_reads_as_the_api_s_definition() {
        let d = form().definition("whsec_abc", false).unwrap();
        assert_eq!(d["name"], "orders");
        assert_eq!(d["request_method"], "POST");
        assert_eq!(d["body_template"], Value::Null);
        assert_eq!(d["max_concurrency"], Value::Null);
        assert_eq!(d["max_retries"], 3);
        assert_eq!(d["secret"], "whsec_abc");
        assert_eq!(
            d["headers"],
            json!([{"key": "Authorization", "value": "[hidden]"}, {"key": "X-Team", "value": "billing"}])
        );
    }

    #[test]
    fn an_empty_secret_keeps_the_stored_one_and_remove_clears_it() {
        let mut f = form();
        assert!(!f.definition("", true).unwrap().contains_key("secret"));
        f.remove_secret = true;
        assert_eq!(f.definition("", true).unwrap()["secret"], Value::Null);
        assert!(f.definition("new", true).is_err(), "both at once");
    }

    #[test]
    fn what_a_field_cannot_say_is_refused_naming_it() {
        let mut f = form();
        f.max_retries = "many".into();
        assert!(f
            .definition("", false)
            .unwrap_err()
            .1
            .contains("max retries"));
        let mut f = form();
        f.headers = "Authorization Bearer x".into();
        assert!(f.definition("", false).unwrap_err().1.contains("line 1"));
    }

    #[test]
    fn a_stored_webhook_fills_the_form_with_its_header_values_hidden() {
        let view = json!({
            "name": "orders", "entity_type": "Sales Order", "event": "on_submit",
            "request_url": "https://x.example/", "request_method": "PUT",
            "request_structure": "json", "body_template": null, "condition": "doc.total > 1",
            "headers": [{"key": "Authorization", "value": "[hidden]"}],
            "timeout": "10s", "queue": "default", "max_retries": 5, "max_concurrency": null,
            "rate_limit": "50/s", "enabled": false, "signed": true,
        });
        let f = WebhookForm::of_view(&view);
        assert_eq!(f.headers, "Authorization: [hidden]\n");
        assert_eq!(
            (f.max_retries.as_str(), f.enabled, f.signed),
            ("5", false, true)
        );
        assert_eq!(f.body_template, "");
    }
}
