//! The console (`hookfleet console`) served in-process on a free loopback
//! port, and a small HTTP client for its API and pages.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;

use crate::env::TestEnv;

/// A full-access and a read-only token for tests.
pub const FULL_TOKEN: &str = "full-token-0123456789abcdef";
pub const READ_TOKEN: &str = "read-token-0123456789abcdef";

/// A console on 127.0.0.1, stopped when dropped.
pub struct ConsoleServer {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// Follows no redirect, so a test sees the 303 and its cookie.
    client: reqwest::Client,
}

/// An answer: status, headers and body.
pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

impl ConsoleServer {
    /// Serves `env`'s fleet with the given tokens (None, None: loopback,
    /// open).
    pub async fn start(
        env: &TestEnv,
        token: Option<&str>,
        read_token: Option<&str>,
    ) -> ConsoleServer {
        let console = hookfleet_console::Console::new(
            env.store.clone(),
            env.queue.clone(),
            Duration::from_secs(600),
            (*env.policy).clone(),
            token.map(str::to_string),
            read_token.map(str::to_string),
        );
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (bound, addr) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            hookfleet_console::serve(
                "127.0.0.1:0".parse().expect("addr"),
                console,
                async move {
                    let _ = stopped.await;
                },
                move |a| {
                    let _ = bound.send(a);
                },
            )
            .await
            .expect("the console serves");
        });
        let addr = addr.await.expect("the console bound a port");
        ConsoleServer {
            addr,
            stop: Some(stop),
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(Duration::from_secs(30))
                .build()
                .expect("client"),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Answer {
        let r = req.send().await.expect("the console answers");
        Answer {
            status: r.status().as_u16(),
            headers: r.headers().clone(),
            body: r.text().await.expect("a body"),
        }
    }

    /// GET `path` with `token` as bearer (None: no Authorization header).
    pub async fn get(&self, path: &str, token: Option<&str>) -> Answer {
        let mut req = self.client.get(self.url(path));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        self.send(req).await
    }

    /// POST `body` (JSON text, or "" for none) to `path`.
    pub async fn post(&self, path: &str, token: Option<&str>, body: &str) -> Answer {
        let mut req = self
            .client
            .post(self.url(path))
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        self.send(req).await
    }

    /// Any request, with the headers given (the Host header too).
    pub async fn send_with(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Answer {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
        let mut req = self
            .client
            .request(method, self.url(path))
            .body(body.to_string());
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        self.send(req).await
    }

    /// PATCH `body` (JSON text) to `path`.
    pub async fn patch(&self, path: &str, token: Option<&str>, body: &str) -> Answer {
        let mut req = self
            .client
            .patch(self.url(path))
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        self.send(req).await
    }

    /// DELETE `path`.
    pub async fn delete(&self, path: &str, token: Option<&str>) -> Answer {
        let mut req = self.client.delete(self.url(path));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        self.send(req).await
    }

    /// GET a page with a session cookie (or none).
    pub async fn page(&self, path: &str, cookie: Option<&str>) -> Answer {
        let mut req = self.client.get(self.url(path));
        if let Some(c) = cookie {
            req = req.header("cookie", c);
        }
        self.send(req).await
    }

    /// POST a form to a page with a session cookie (or none).
    pub async fn form(&self, path: &str, cookie: Option<&str>, fields: &[(&str, &str)]) -> Answer {
        let body: Vec<String> = fields
            .iter()
            .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
            .collect();
        let mut req = self
            .client
            .post(self.url(path))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body.join("&"));
        if let Some(c) = cookie {
            req = req.header("cookie", c);
        }
        self.send(req).await
    }

    /// Logs in through the login form; the session cookie (`name=value`).
    pub async fn login(&self, token: &str) -> String {
        let a = self
            .form("/login", None, &[("token", token), ("next", "/")])
            .await;
        assert_eq!(a.status, 303, "login: {}", a.body);
        let set = a.header("set-cookie").expect("a session cookie");
        set.split(';').next().expect("name=value").to_string()
    }
}

/// Percent-encodes a form value.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The CSRF token a page's forms carry.
pub fn csrf_of(html: &str) -> String {
    let at = html
        .find("name=\"csrf\" value=\"")
        .expect("a form with a CSRF token");
    let rest = &html[at + "name=\"csrf\" value=\"".len()..];
    rest[..rest.find('"').expect("closing quote")].to_string()
}

impl Drop for ConsoleServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
